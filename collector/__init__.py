"""drivelab controller side: scenarios, runner, parsers, store, statistics, reports."""

__version__ = "0.1.0"
