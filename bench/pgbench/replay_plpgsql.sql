-- the PL/pgSQL claim on a completed key
\set i random(1, :rows)
SELECT outcome, response_code, response_body FROM bench.plpgsql_claim('replay-' || :i::text, '{"amount": 100, "currency": "EUR"}'::jsonb);
