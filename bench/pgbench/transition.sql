-- ours: transition() on a row of this client, toggling s0 <-> s1
\set n :n + 1
\set id :client_id * 1000 + ((:n - 1) / 2) % 1000 + 1
\set from (:n - 1) % 2
\set to 1 - :from
SELECT outcome FROM idempotency.transition('bench.orders_ext', 'id', :id::text, 'state', 's' || :from::text, 's' || :to::text);
