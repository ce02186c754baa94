"""Health: probes and the snapshot they make, the snapshot's schema, the health
monitor, presence, metrics and what status and health print."""
