"""Inbound: from a platform event to a queued turn (journal, dedupe, commands,
sessions, queue lanes, inbound media)."""
