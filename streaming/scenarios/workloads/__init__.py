"""Client workloads run as their own processes (``python -m streaming.scenarios.workloads.X``),
so a monitor attributes each one to a distinct process; ``--app NAME`` marks it in argv."""
