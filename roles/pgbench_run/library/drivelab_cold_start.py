#!/usr/bin/python
"""The cold start of one measured run, on the DB host, in one module run (each step as a
task of its own cost a module run on the path of every repetition): the steps
and their order are module_utils drivelab_coldstart's. A step that fails ends the module
with one line naming it (the other steps of its stage still end); ``seconds`` says what
each step took, from the start of its stage. playbooks/pgbench.yml has the module
drivelab_environment do the cold start, then read the environment, in one module run;
this module is the entry point ``cold`` on its own."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_coldstart import cold_start, refusal

DOCUMENTATION = r"""
module: drivelab_cold_start
short_description: checkpoint, restart and drop the page cache before a measured run
options:
  major: {type: str, required: true, description: PostgreSQL major version of the cluster}
  cluster: {type: str, required: true, description: "drivelab's cluster (drivelab or drivelab_<fs>)"}
  port: {type: int, required: true, description: the cluster's port}
  databases: {type: list, elements: str, required: true, description: "the client databases (drivelab_<client>)"}
  mode: {type: str, choices: [cold, settled], default: cold, description: "settled: vacuums, CHECKPOINT and sync only (server and caches kept)"}
"""


def main():
    module = AnsibleModule(
        argument_spec={
            "major": {"type": "str", "required": True},
            "cluster": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "databases": {"type": "list", "elements": "str", "required": True},
            "mode": {"type": "str", "choices": ["cold", "settled"], "default": "cold"},
        },
        supports_check_mode=False,
    )
    p = module.params
    refused = refusal(p["cluster"], p["databases"])
    if refused:
        module.fail_json(msg=refused)
    seconds, failed = cold_start(
        p["major"], p["cluster"], p["port"], p["databases"], mode=p["mode"]
    )
    if failed:
        msg, rc = failed
        module.fail_json(msg=msg, rc=rc, seconds=seconds)
    module.exit_json(changed=True, seconds=seconds)


if __name__ == "__main__":
    main()
