-- trigger_log: where the triggers that tests add to the extension's tables
-- write what they saw (what, key); log_statement(), a statement-level
-- trigger function that writes when it fired and for which command; and
-- skip_row(), a BEFORE row trigger function that skips the row.
CREATE TABLE pg_temp.trigger_log (what text, key text);
-- triggers fire as the extension owner (in the portable edition not a superuser)
GRANT INSERT ON pg_temp.trigger_log TO PUBLIC;
CREATE FUNCTION pg_temp.log_statement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO pg_temp.trigger_log VALUES (TG_WHEN || ' ' || TG_LEVEL, TG_OP);
  RETURN NULL;
END $$;
CREATE FUNCTION pg_temp.skip_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RETURN NULL; END $$;
