"""Webhook notifications of runs' ends (docs/notifications.md).

The path, in order: a run ends in the poller (``poller/ends``), its job's
``NotifyPolicy`` decides which rules it matches (``rules.decide``: pure), each match
becomes a ``Delivery`` record in the turn, written in the same store commit as the
run's final record (``JobStore.commit(deliveries=...)``); once durable, the
poller's ``Sender`` (``sender``) POSTs it, signed (``signing``), to an address it
checked is allowed (``addresses``), and records each attempt's outcome until it is
DELIVERED or DROPPED (``retries``). A poller that takes over a shard, or starts
again, sends what the shard's PENDING deliveries still owe (``pending_deliveries``).
"""
