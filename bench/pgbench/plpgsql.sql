-- claim/complete written in PL/pgSQL (bench/setup.sql), phased
\set r random(100000000000000, 999999999999999)
SELECT fence FROM bench.plpgsql_claim(:client_id::text || '-' || :r::text, '{"amount": 100, "currency": "EUR"}'::jsonb) \gset
SELECT bench.plpgsql_complete(:client_id::text || '-' || :r::text, :fence, '{"status": "paid"}'::jsonb);
