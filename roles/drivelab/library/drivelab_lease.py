#!/usr/bin/python
"""The lab's lease on the DB host (module_utils/drivelab_lease.py: the file, its rules):
take or renew it, check that a run still holds it, release it, or read it. A take that
finds another live holder fails in one line naming it (refusal code ``lease_held``); a
check that finds the lease gone to someone else fails with ``lease_lost``."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_lease import (  # type: ignore[import-not-found]
    HELD,
    describe,
    query,
    release,
    take,
)

DOCUMENTATION = r"""
module: drivelab_lease
short_description: the lab's lease on the DB host (who measures or writes there now)
options:
  path: {type: path, required: true, description: the lease file (role drivelab's drivelab_lease_file)}
  state:
    type: str
    choices: [held, absent, query]
    default: held
    description: "held: take it or renew it; absent: release it if token holds it; query: read it"
  token: {type: str, description: the holder's token (held and absent)}
  must_hold: {type: bool, default: false, description: "held: renew only; fail with lease_lost when token does not hold it"}
  takeover: {type: str, description: "held: the token of a holder whose process the controller saw gone"}
  ttl: {type: float, default: 120, description: seconds the lease stays valid without renewal}
  expected_seconds: {type: float, description: "held: how long the holder expects to take, from now"}
  holder: {type: dict, default: {}, description: "user, controller, pid, pid_start, purpose, scenario, cell"}
  host: {type: str, default: the DB host, description: "this host's name in messages (inventory_hostname)"}
"""


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["held", "absent", "query"], "default": "held"},
            "token": {"type": "str", "no_log": True},
            "must_hold": {"type": "bool", "default": False},
            "takeover": {"type": "str", "no_log": False},
            "ttl": {"type": "float", "default": 120.0},
            "expected_seconds": {"type": "float"},
            "holder": {"type": "dict", "default": {}},
            "host": {"type": "str", "default": "the DB host"},
        },
        required_if=[("state", "held", ["token"]), ("state", "absent", ["token"])],
        supports_check_mode=True,
    )
    p = module.params
    host = p["host"]
    if p["state"] == "query" or module.check_mode:
        module.exit_json(changed=False, **query(p["path"]))
    if p["state"] == "absent":
        module.exit_json(**release(p["path"], p["token"]))
    holder = dict(p["holder"], token=p["token"])
    out = take(
        p["path"], holder, p["ttl"], expected_seconds=p["expected_seconds"],
        takeover=p["takeover"], must_hold=p["must_hold"],
    )  # fmt: skip
    if out["held"]:
        if out.get("took_over"):
            gone = out["took_over"]
            out["msg"] = (
                f"{host}: took the lab's lease over from {describe(gone['record'])}: {gone['why']}"
            )
        module.exit_json(**out)
    if out["refusal"] == HELD:
        msg = (
            f"{host} is in use: {describe(out['lease'])}; nothing was touched"
            " (drivelab run --wait waits for it; drivelab status shows it)"
        )
    else:
        msg = f"{host}: this run no longer holds the lab's lease: {out['why']}; stopped"
    module.fail_json(msg=msg, **out)


if __name__ == "__main__":
    main()
