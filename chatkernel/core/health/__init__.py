"""Health: probes and the snapshot, the health monitor, presence, metrics and
what status and health print."""
