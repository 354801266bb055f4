#!/usr/bin/python
"""The DB host's memory as PostgreSQL sees it: the cgroup v1/v2 memory limit of the
process (the lab's DB host runs in one) when lower than MemTotal, else MemTotal."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.drivelab_memory import memory

DOCUMENTATION = r"""
module: host_memory
short_description: memory available to this host's processes (cgroup limit or MemTotal)
options: {}
"""


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.exit_json(changed=False, **memory())


if __name__ == "__main__":
    main()
