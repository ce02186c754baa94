"""Heartbeats: the scheduler, one turn's runner, their settings, targets and stored
state, the HEARTBEAT_OK contract, HEARTBEAT.md."""
