"""Gathering: a run folder in, records out, nothing stored.

- :mod:`collector.gather.folder`: the run folder read into a :class:`GatheredRun`.
- :mod:`collector.gather.client`: one client host's folder read into its result.
- :mod:`collector.gather.startsync`: start skew and connection spread from the clients'
  own records.
- :mod:`collector.gather.serverstats`: the server's statistics and checkpoints.

What the figures came from (PostgreSQL, kernel, storage) is read with
:mod:`collector.verdicts.environment`, which the reports also use to say whether two
results are comparable.

The conductor stores what gathering returns (:mod:`collector.run.storing`).
"""
