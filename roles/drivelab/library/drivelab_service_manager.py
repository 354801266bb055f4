#!/usr/bin/python
"""Whether this host's services are systemd's (module_utils drivelab_pgstart's
systemd_runs_here): systemd runs and its PID 1 shares this host's network namespace. A
host of the namespace lab on a machine that runs systemd is not: a service started by
that systemd would run in the machine's network, not the host's. Read-only."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_pgstart import systemd_runs_here

DOCUMENTATION = r"""
module: drivelab_service_manager
short_description: whether systemd runs this host's services (not only the machine's)
options: {}
"""


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.exit_json(changed=False, systemd=systemd_runs_here())


if __name__ == "__main__":
    main()
