-- forget_rows(pattern): delete, from every table of the extension, the rows
-- whose text matches the regular expression; a test cleans up after itself.
CREATE FUNCTION pg_temp.forget_rows(pattern text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t regclass;
BEGIN
    FOR t IN SELECT c.oid FROM pg_class c
             WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind IN ('r', 'p')
    LOOP
        EXECUTE format('DELETE FROM %s x WHERE x::text ~ %L', t, pattern);
    END LOOP;
END $$;
