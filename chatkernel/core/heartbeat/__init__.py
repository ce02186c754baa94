"""Heartbeats: the scheduler and runner, the HEARTBEAT_OK contract, HEARTBEAT.md."""
