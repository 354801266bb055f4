"""Action ``lab_caps`` (the lab role's entry point ``caps``): the IOPS caps of the lab's
drives on the DB host's cgroup set exactly to ``throttle`` ([] lifts them all), on cgroup
v1 (blkio) or v2 (io.max). The cgroups are the lab machine's, which is the controller:
this runs there, in the worker of the task, with no module sent anywhere, through the
same code the module ``lab_cgroup`` runs (module_utils ``drivelab_cgroup``, loaded from
this role's folder). ``lab_cgroup`` run on localhost cost a module run (docs/scaling.md),
and a cell's stages lift and put back the caps four to six times. In check mode it only
says whether anything would change. The group must be the lab's own (named drivelab...).
``cliff``: the lab's cliff watcher's config (module lab_cliff), where the lab has cliff
classes: a put-back gives each such drive the write cap its debt says (module_utils
``drivelab_cliff``), under the lock the watcher takes, so no run starts at a drive's fast
cap after it has fallen off its cliff."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

from ansible.plugins.action import ActionBase

ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "root": {"type": "str", "default": "/sys/fs/cgroup"},
    # none: the VM lab's DB host, whose caps are qemu's throttling, not a cgroup's
    "hierarchy": {"type": "str", "default": "auto", "choices": ["auto", "v1", "v2", "none"]},
    "throttle": {"type": "list", "elements": "dict", "default": []},
    "cliff": {"type": "str", "default": ""},
}

_ROLE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def role_utils(which="cgroup"):
    """module_utils drivelab_<which> of this role, as a module of the controller's own."""
    name = f"drivelab_lab_action_{which}"
    if name not in sys.modules:
        path = os.path.join(_ROLE, "module_utils", f"drivelab_{which}.py")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


def major_minor(device):
    st = os.stat(device)
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        if not args["name"].startswith("drivelab") or "/" in args["name"]:
            msg = f"cgroup {args['name']}: not a lab name (must start with drivelab)"
            result.update(failed=True, msg=msg)
            return result
        if args["hierarchy"] == "none":
            result.update(changed=False, hierarchy="none", writes=[])
            return result
        cg = role_utils()
        fs = cg.Cgroupfs()
        try:
            h = cg.choose(args["root"], args["hierarchy"])
            caps = cg.want_caps(args["throttle"], major_minor)
            if caps and args["cliff"] and os.path.exists(args["cliff"]):
                changed = self._put_back_with_cliffs(cg, fs, h, args, caps)
            else:
                changed = cg.ensure(
                    fs, h, args["name"], None, caps, check_mode=self._task.check_mode
                )
        except (cg.CgroupError, OSError, ValueError) as err:
            result.update(failed=True, msg=str(err), writes=fs.log)
            return result
        result.update(changed=changed, hierarchy=h.describe(), writes=fs.log)
        return result

    def _put_back_with_cliffs(self, cg, fs, h, args, caps):
        cliff = role_utils("cliff")
        with open(args["cliff"], encoding="utf-8") as fh:
            config = json.load(fh)
        with cliff.Locked(config["state"]) as locked:
            state = cliff.observe(config, locked.state)
            caps = cliff.with_cliffs(config, state, caps)
            changed = cg.ensure(fs, h, args["name"], None, caps, check_mode=self._task.check_mode)
            if not self._task.check_mode:
                locked.save(state)
        return changed
