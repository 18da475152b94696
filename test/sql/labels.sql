-- Volatility, strictness, parallel safety and security of every function.
SELECT p.oid::regprocedure AS function, provolatile AS vol, proparallel AS par,
       proisstrict AS strict, prosecdef AS definer
  FROM pg_proc p
 WHERE pronamespace = 'idempotency'::regnamespace
   AND p.proname IN ('fingerprint', 'claim', 'complete', 'fail', 'checkpoint',
                     'release', 'lookup', 'execute', 'issue_token', 'consume_token',
                     'lock_key', 'try_lock')
 ORDER BY 1::text COLLATE "C";
-- argument names and defaults are those of doc/reference.md
SELECT p.proname, pg_get_function_arguments(p.oid) AS arguments,
       pg_get_function_result(p.oid) AS result
  FROM pg_proc p
 WHERE pronamespace = 'idempotency'::regnamespace
   AND proname IN ('claim', 'complete', 'fail', 'checkpoint', 'release', 'lookup',
                   'execute', 'issue_token', 'consume_token', 'lock_key', 'try_lock',
                   'fingerprint')
 ORDER BY p.proname COLLATE "C";
SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
 WHERE attrelid = 'idempotency.claim_result'::regclass AND attnum > 0 ORDER BY attnum;
SELECT enum_range(NULL::idempotency.key_status);
