-- purge_expired_batch() deletes through the executor (doc/reference.md,
-- "Expiry and cleanup"): DELETE triggers on the extension's tables fire,
-- a foreign key from an application table cascades or keeps its row, and
-- one row that cannot go never stops the purge of the others.
\set VERBOSITY terse
SET client_min_messages = warning;

-- expired keys, and published outbox events past their retention
INSERT INTO idempotency.idempotency_keys
       (key_hash, scope, idempotency_key, status, fence, expires_at, created_at)
SELECT idempotency.key_hash('', 'old-' || i), '', 'old-' || i, 'completed', i, now() - interval '1 minute', now() - interval '1 day'
  FROM generate_series(1, 5) AS i;
INSERT INTO idempotency.outbox_events (aggregate_type, aggregate_id, event_type, payload, published_at)
SELECT 'order', 'o' || i, 'paid', '{}', now() - interval '30 days'
  FROM generate_series(1, 4) AS i;

-- a DELETE trigger on the table of keys: it fires once per purged row
CREATE TABLE purged_log (key text);
-- the purge deletes as the extension's owner, so the trigger writes as
-- the owner, and the owner reads the referencing tables below to leave
-- referenced rows out (doc/reference.md, "Cleanup": a superuser in the
-- C edition, the installing role in the portable one)
SELECT tableowner AS owner FROM pg_tables
 WHERE schemaname = 'idempotency' AND tablename = 'idempotency_keys' \gset
GRANT INSERT ON purged_log TO :"owner";
CREATE FUNCTION log_purge() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.purged_log VALUES (OLD.idempotency_key);
  RETURN OLD;
END $$;
CREATE TRIGGER log_purge AFTER DELETE ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION log_purge();

-- an application table referencing two events without a cascade, and
-- one referencing another event with ON DELETE CASCADE
CREATE TABLE deliveries (event_id bigint REFERENCES idempotency.outbox_events (id));
CREATE TABLE receipts (event_id bigint REFERENCES idempotency.outbox_events (id) ON DELETE CASCADE);
GRANT SELECT ON deliveries TO :"owner";
INSERT INTO deliveries SELECT id FROM idempotency.outbox_events ORDER BY id LIMIT 2;
INSERT INTO receipts SELECT id FROM idempotency.outbox_events ORDER BY id OFFSET 2 LIMIT 1;

SET client_min_messages = notice;
-- the two referenced events stay (left out up front, without a WARNING);
-- the others go
SELECT * FROM idempotency.purge_expired_batch(100);
SELECT key FROM purged_log ORDER BY key COLLATE "C";
SELECT count(*) AS keys_left FROM idempotency.idempotency_keys;
SELECT count(*) AS events_left,
       count(*) FILTER (WHERE id IN (SELECT event_id FROM deliveries)) AS referenced
  FROM idempotency.outbox_events;
SELECT count(*) AS receipts_left FROM receipts;

-- the batch size counts deleted rows, not the rows kept
INSERT INTO idempotency.outbox_events (aggregate_type, aggregate_id, event_type, payload, published_at)
SELECT 'order', 'n' || i, 'paid', '{}', now() - interval '20 days'
  FROM generate_series(1, 3) AS i;
SELECT * FROM idempotency.purge_expired_batch(2) WHERE relation = 'outbox_events';
SELECT * FROM idempotency.purge_expired_batch(2) WHERE relation = 'outbox_events';

-- once the references go, so do the events
DELETE FROM deliveries;
SELECT * FROM idempotency.purge_expired_batch(100) WHERE relation = 'outbox_events';
SELECT count(*) AS events_left FROM idempotency.outbox_events;

-- a rule on the table is applied: DO INSTEAD NOTHING keeps every key
INSERT INTO idempotency.idempotency_keys
       (key_hash, scope, idempotency_key, status, fence, expires_at, created_at)
VALUES (idempotency.key_hash('', 'ruled'), '', 'ruled', 'completed', 99, now() - interval '1 minute', now() - interval '1 day');
CREATE RULE keep_keys AS ON DELETE TO idempotency.idempotency_keys DO INSTEAD NOTHING;
SELECT * FROM idempotency.purge_expired_batch(100) WHERE relation = 'idempotency_keys';
SELECT idempotency_key FROM idempotency.idempotency_keys;
DROP RULE keep_keys ON idempotency.idempotency_keys;
-- a statement planned under a DO INSTEAD NOTHING rule stays planned so
-- until the session ends, as with PREPARE (doc/operations.md, Limitations)
\c
\set VERBOSITY terse

-- the procedure and a trigger that raises: the row stays, the job goes on
CREATE FUNCTION refuse_purge() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'keep %', OLD.idempotency_key;
END $$;
CREATE TRIGGER refuse_purge BEFORE DELETE ON idempotency.idempotency_keys
  FOR EACH ROW WHEN (OLD.idempotency_key = 'ruled') EXECUTE FUNCTION refuse_purge();
INSERT INTO idempotency.idempotency_keys
       (key_hash, scope, idempotency_key, status, fence, expires_at, created_at)
VALUES (idempotency.key_hash('', 'plain'), '', 'plain', 'completed', 100, now() - interval '1 minute', now() - interval '1 day');
CALL idempotency.purge_expired(100);
SELECT idempotency_key FROM idempotency.idempotency_keys;

-- a trigger that fails in another way ends the purge with its error
DROP TRIGGER refuse_purge ON idempotency.idempotency_keys;
CREATE FUNCTION slow_purge() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'query_canceled', MESSAGE = 'stop';
END $$;
CREATE TRIGGER slow_purge BEFORE DELETE ON idempotency.idempotency_keys
  FOR EACH ROW EXECUTE FUNCTION slow_purge();
SELECT * FROM idempotency.purge_expired_batch(100);
DROP TRIGGER slow_purge ON idempotency.idempotency_keys;

DROP TRIGGER log_purge ON idempotency.idempotency_keys;
DROP TABLE deliveries, receipts, purged_log;
DROP FUNCTION log_purge(), refuse_purge(), slow_purge();
DELETE FROM idempotency.idempotency_keys;
DELETE FROM idempotency.outbox_events;
