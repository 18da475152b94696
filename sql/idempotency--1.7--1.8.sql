-- idempotency 1.7 -> 1.8 (see CHANGELOG.md).  CREATE EXTENSION runs the 1.0
-- install script and the update scripts in turn, so a fresh 1.8 and an
-- updated one are the same.
--
-- 1.8 closes what a hostile or merely unusual session could bend: session
-- settings, prepared statements and role bindings that a caller controls,
-- and leases one caller could take from every other (doc/reference.md, "Threat model").
\echo Use "ALTER EXTENSION idempotency UPDATE TO '1.8'" to load this file. \quit

-- [section: no outbox promise rests on a session setting] -------------------

--
-- The portable edition kept what a transaction did so far in settings
-- idempotency_portable.*, which any session may set: a preset 'all' left
-- out the buckets' locks, so a relay could be handed a later event of an
-- aggregate while an earlier one was uncommitted, and a preset time or
-- flag kept a commit from notifying and from being counted quiet.  From
-- 1.8 its helpers take every lock again, decide the notification at each
-- enqueue and keep the session's last notification in two sequences that
-- only the extension's owner may use.  Only helpers change
-- (sql/portable/outbox.sql, blocks "again in 1.8", which the edition's
-- build of this script creates or replaces), no function bound to a C
-- symbol: the C edition reads no such setting and changes nothing here.
--
