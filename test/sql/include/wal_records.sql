-- wal_records(sql): the WAL records a statement writes, as EXPLAIN
-- (ANALYZE, WAL) counts them in this backend only (what other sessions
-- write meanwhile does not count).
CREATE FUNCTION pg_temp.wal_records(sql text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  plan json;
BEGIN
  EXECUTE 'EXPLAIN (ANALYZE, WAL, FORMAT JSON, COSTS OFF, TIMING OFF, SUMMARY OFF) ' || sql
     INTO plan;
  RETURN (plan -> 0 -> 'Plan' ->> 'WAL Records')::bigint;
END $$;
