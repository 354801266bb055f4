"""Statistics on records: tps per client, per run and per cell (:mod:`collector.stats.tps`,
:mod:`collector.stats.clientstats`), latency under load (:mod:`collector.stats.latency`)
and the rate search's pure part (:mod:`collector.stats.ratesearch`). Nothing here
knows a host or a store."""
