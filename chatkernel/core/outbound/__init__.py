"""Outbound: agent replies into payloads, the durable outbox, retries, rate limits,
chunking, ordering and what became of each send."""
