-- bench/scale/outlive_space.sql: the space of the extension's table of
-- keys, one "item|value" line each (psql -At), for the keys that outlive
-- their answers of bench/scale.sh (SCALE_OUTLIVE): the bytes of each fork
-- of the table, of its TOAST table (with its index) and of each of its
-- indexes, in all; the keys, the answers they store and the answers'
-- bytes; pgstattuple's bytes of live rows, of dead rows and free in the
-- heap, and pgstatindex's mean fill of each index's leaf pages (%; none when
-- empty).
WITH t(k) AS (VALUES ('idempotency.idempotency_keys'::regclass))
SELECT 'heap', pg_relation_size(k, 'main') FROM t
UNION ALL
SELECT 'maps', pg_relation_size(k, 'fsm') + pg_relation_size(k, 'vm') FROM t
UNION ALL
SELECT 'toast', coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0)
  FROM t JOIN pg_class c ON c.oid = t.k
UNION ALL
SELECT 'index:' || c.relname, pg_relation_size(c.oid)
  FROM t JOIN pg_index i ON i.indrelid = t.k JOIN pg_class c ON c.oid = i.indexrelid
UNION ALL
SELECT 'total', pg_total_relation_size(k) FROM t
UNION ALL
SELECT x.item, x.value
  FROM (SELECT count(*) AS n, count(response_body) AS answers,
               coalesce(sum(pg_column_size(response_body)), 0) AS bytes
          FROM idempotency.idempotency_keys) s,
       LATERAL (VALUES ('keys', s.n), ('answers', s.answers), ('answer_bytes', s.bytes)) x(item, value)
UNION ALL
SELECT x.item, x.value
  FROM t, pgstattuple(t.k) s,
       LATERAL (VALUES ('tuple_len', s.tuple_len), ('dead_tuple_len', s.dead_tuple_len),
                       ('free_space', s.free_space)) x(item, value)
UNION ALL
SELECT 'leaf_density:' || c.relname,
       CASE WHEN s.avg_leaf_density <> 'NaN' THEN round(s.avg_leaf_density)::bigint END
  FROM t JOIN pg_index i ON i.indrelid = t.k JOIN pg_class c ON c.oid = i.indexrelid,
       pgstatindex(c.oid) s
 ORDER BY 1;
