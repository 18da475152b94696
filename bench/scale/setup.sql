--
-- bench/scale/setup.sql: what `make bench-scale` adds to the baselines of
-- bench/setup.sql (loaded first: the business table bench.payments and the
-- hand-written key table bench.seed_keys): that table's own purge, run by
-- pg_cron like ours.
--
-- the hand-written cleanup: expired rows in batches of 10000
CREATE PROCEDURE bench.raw_purge()
LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    LOOP
        DELETE FROM bench.seed_keys
         WHERE ctid = ANY (ARRAY(SELECT ctid FROM bench.seed_keys
                                  WHERE expires_at < now()
                                  ORDER BY expires_at LIMIT 10000));
        GET DIAGNOSTICS n = ROW_COUNT;
        COMMIT;
        EXIT WHEN n < 10000;
    END LOOP;
END
$$;
