-- fingerprint(): SHA-256 of the canonical jsonb text.
SELECT length(idempotency.fingerprint('{"a": 1}')) AS bytes;
SELECT encode(idempotency.fingerprint('{"amount": 100, "currency": "EUR"}'), 'hex');
-- it is sha256 of the jsonb text
SELECT idempotency.fingerprint('{"b": 2, "a": 1}') = sha256(convert_to('{"b": 2, "a": 1}'::jsonb::text, 'UTF8'))
       AS is_sha256_of_jsonb_text;
-- key order and whitespace do not matter
SELECT idempotency.fingerprint('{"amount":100,"currency":"EUR"}') =
       idempotency.fingerprint(E'{\n  "currency" : "EUR",\n  "amount" : 100\n}') AS same;
SELECT idempotency.fingerprint('{"x": {"b": [1, 2], "a": null}}') =
       idempotency.fingerprint('{"x":{"a":null,"b":[1,2]}}') AS nested_same;
-- duplicate keys: jsonb keeps the last one
SELECT idempotency.fingerprint('{"a": 1, "a": 2}') = idempotency.fingerprint('{"a": 2}') AS last_key_wins;
-- values, array order and types do matter
SELECT idempotency.fingerprint('{"a": 1}') = idempotency.fingerprint('{"a": 2}') AS value_same;
SELECT idempotency.fingerprint('[1, 2]') = idempotency.fingerprint('[2, 1]') AS array_order_same;
SELECT idempotency.fingerprint('{"a": 1}') = idempotency.fingerprint('{"a": "1"}') AS type_same;
SELECT idempotency.fingerprint('1') = idempotency.fingerprint('1.0') AS scale_same;
-- scalars and empty containers
SELECT encode(idempotency.fingerprint('null'), 'hex') AS json_null,
       idempotency.fingerprint('{}') <> idempotency.fingerprint('[]') AS object_is_not_array;
-- labelled immutable and parallel safe
SELECT provolatile, proparallel, proisstrict FROM pg_proc
 WHERE oid = 'idempotency.fingerprint(jsonb)'::regprocedure;
-- this should fail
\set VERBOSITY sqlstate
SELECT idempotency.fingerprint(NULL);
-- the hash agrees with sha256() at every length around the block
-- boundaries (55, 56, 63, 64, 119, 120 bytes and beyond)
SELECT bool_and(idempotency.fingerprint(to_jsonb(repeat('x', n))) =
                sha256(convert_to(to_jsonb(repeat('x', n))::text, 'UTF8'))) AS agrees_everywhere
  FROM generate_series(0, 300) n;
SELECT idempotency.fingerprint(to_jsonb(repeat('é', 5000))) =
       sha256(convert_to(to_jsonb(repeat('é', 5000))::text, 'UTF8')) AS agrees_long;
