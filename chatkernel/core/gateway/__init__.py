"""The gateway process: receive-loop supervision, the HTTP server and its guard,
health endpoints, the control API, the home lock, reload and several processes
on one store."""
