-- the guarded UPDATE followed by a SELECT
\set n :n + 1
\set id :client_id * 1000 + ((:n - 1) / 2) % 1000 + 1
\set from (:n - 1) % 2
\set to 1 - :from
UPDATE bench.orders_raw SET state = 's' || :to::text WHERE id = :id AND state = 's' || :from::text;
SELECT state FROM bench.orders_raw WHERE id = :id;
