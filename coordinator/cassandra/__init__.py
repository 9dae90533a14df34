"""The cluster ``JobStore`` on Apache Cassandra.

``store`` (the store and ``init_schema``: how it keeps the contract), ``schema``
(tables and the schema check), ``statements`` (the prepared statements and the row
encoding), ``session`` (asyncio over the driver: retries, pages, batches),
``writes`` (the phased writes of one call), ``creates`` (idempotency keys on
create), ``reads`` (lookups, listings, the due index) and ``output`` (run output).
"""
