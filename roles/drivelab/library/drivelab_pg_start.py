#!/usr/bin/python
"""Start one of drivelab's PostgreSQL clusters when it is not running, and wait only
until it accepts connections (module_utils drivelab_pgstart: under systemd its unit,
else pg_ctlcluster, without pg_ctlcluster's 2 s of sleeps after the server is up).
A running cluster is left as it is (changed false). Only drivelab's own clusters."""

from __future__ import annotations

import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_pgstart import running, start, systemd_runs_here

DOCUMENTATION = r"""
module: drivelab_pg_start
short_description: start a drivelab PostgreSQL cluster, waiting only until it accepts connections
options:
  major: {type: str, required: true, description: PostgreSQL major version of the cluster}
  cluster: {type: str, required: true, description: "drivelab's cluster (drivelab or drivelab_<fs>)"}
  port: {type: int, required: true, description: the cluster's port}
"""

CLUSTER = re.compile(r"^drivelab(_[A-Za-z0-9_-]+)?$")


def main():
    module = AnsibleModule(
        argument_spec={
            "major": {"type": "str", "required": True},
            "cluster": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not CLUSTER.match(p["cluster"]):
        module.fail_json(msg=f"start: {p['cluster']} is not a drivelab cluster: not touched")
    if running(p["major"], p["cluster"]):
        module.exit_json(changed=False)
    if module.check_mode:
        module.exit_json(changed=True)
    systemd = systemd_runs_here()
    rc, _out, err = start(p["major"], p["cluster"], p["port"], systemd)
    if rc != 0:
        last = (err.strip().splitlines() or [f"exit {rc}"])[-1]
        module.fail_json(msg=f"start {p['major']}/{p['cluster']}: {last}", rc=rc)
    module.exit_json(changed=True, systemd=systemd)


if __name__ == "__main__":
    main()
