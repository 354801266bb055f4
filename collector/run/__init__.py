"""The conductor and its stages: a scenario's cells in order on the hosts.

- :mod:`collector.run.conductor`: :class:`ScenarioRun`, the cells in order (lease,
  provisioning, drives, pre-tests, repetitions, resume, retries, adaptive repetitions,
  the rate search).
- :mod:`collector.run.stages`: one playbook per stage and the run folder it fills.
- :mod:`collector.run.storing`: a gathered run into the store.

How a playbook is run (:mod:`collector.hosts.playbook`) is the hosts' room: the lease,
the inventory check and ``lab up`` run playbooks too.
"""
