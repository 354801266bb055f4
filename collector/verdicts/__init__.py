"""Verdicts on a run, read by gathering and by the reports alike: could the drive have
done it (:mod:`~collector.verdicts.physics`), were the caches defeated
(:mod:`~collector.verdicts.cachedefeat`), what the raw device did
(:mod:`~collector.verdicts.pretest`), what the hosts' metrics say
(:mod:`~collector.verdicts.telemetry`), and what the figures came from and whether two
results share it (:mod:`~collector.verdicts.environment`)."""
