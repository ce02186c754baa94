"""Turns: one agent turn from a lane's batch to its replies; the agent interface;
typing indicators while a turn runs."""
