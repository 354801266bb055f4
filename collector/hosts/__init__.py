"""The hosts as the controller reaches them: Ansible (:mod:`~collector.hosts.playbook`,
started ahead by :mod:`~collector.hosts.warmstart`), SSH trust and the hosts asked over
SSH (:mod:`~collector.hosts.trust`, :mod:`~collector.hosts.sshhosts`), an inventory's
hosts checked before a run (:mod:`~collector.hosts.hostcheck`), the local lab
(:mod:`~collector.hosts.lab`) and the lab's lease (:mod:`~collector.hosts.lease`)."""
