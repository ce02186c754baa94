"""Scheduled jobs and inbound triggers: the agent acting at a time, or when another system
calls (docs/jobs.md). The schedule (``schedule``), the jobs of a kernel (``book``), the
scheduler that claims each due slot once (``scheduler``), one run (``runner``), the
``/hooks`` requests (``triggers``), the start-up checks (``checks``) and what the CLI and
the control API ask (``control``)."""
