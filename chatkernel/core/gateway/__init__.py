"""The gateway process: the kernel it makes, the receive loops and one HTTP server
(its guard, the health endpoints, the control API's routes), the home lock, signals
and the secrets' hand-over on re-execution."""
