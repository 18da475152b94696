-- fence_of(key, scope): the fence in the key's row, which only its holder
-- learns from its claim; tests use it to finish a key as the holder.
CREATE FUNCTION pg_temp.fence_of(k text, sc text DEFAULT '') RETURNS bigint LANGUAGE sql AS $$
  SELECT fence FROM idempotency.idempotency_keys WHERE idempotency_key = k AND scope = sc
$$;
