-- error_of(sql): run a statement and return its SQLSTATE and message, or
-- 'no error'; lets a test list many failing calls as one table.
CREATE FUNCTION pg_temp.error_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
