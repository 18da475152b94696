"""pg_idempotency: client and HTTP middleware for the idempotency
PostgreSQL extension.  pg_idempotency.client (sync) and pg_idempotency.aio
(async) wrap the SQL API; relay.Relay publishes the outbox; asgi, flask
and django hold the Idempotency-Key middleware (http.py: its behaviour).
"""
from ._queries import (MIN_EXTENSION_VERSION, ClaimResult, ExtensionVersionError, KeyExpiry,
                       OutboxEvent, TransitionResult)

__version__ = "0.1.0"
__all__ = ["MIN_EXTENSION_VERSION", "ClaimResult", "ExtensionVersionError", "KeyExpiry",
           "OutboxEvent", "TransitionResult", "__version__"]
