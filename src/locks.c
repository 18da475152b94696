/*-------------------------------------------------------------------------
 *
 * locks.c
 *	  Advisory-lock helpers: lock_key() and try_lock().
 *
 * lock_key() is the first 8 bytes of SHA-256 of the key's bytes, read as a
 * big-endian signed integer: stable across servers, platforms and
 * versions, and easy to compute in any language, in SQL too:
 *	('x' || left(encode(sha256(convert_to(key, 'UTF8')), 'hex'), 16))::bit(64)::bigint
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/sha2.h"
#include "utils/builtins.h"

#include "idempotency.h"

/* SQL-callable functions */
PG_FUNCTION_INFO_V1(idempotency_lock_key);
PG_FUNCTION_INFO_V1(idempotency_try_lock);

/*
 * The 64-bit lock id of argument 0, a key of 1 to 255 characters.
 */
static int64
lock_id(FunctionCallInfo fcinfo)
{
	text	   *key = idem_arg_name(fcinfo, 0, "key", 1, IDEM_MAX_NAME_CHARS);
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	uint64		id = 0;
	int			i;

	idem_sha256(VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key), digest);
	for (i = 0; i < 8; i++)
		id = (id << 8) | digest[i];
	return (int64) id;
}

/*
 * lock_key(key text) RETURNS bigint
 */
Datum
idempotency_lock_key(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(lock_id(fcinfo));
}

/*
 * try_lock(key text) RETURNS boolean: pg_try_advisory_xact_lock(lock_key(key))
 */
Datum
idempotency_try_lock(PG_FUNCTION_ARGS)
{
	return DirectFunctionCall1(pg_try_advisory_xact_lock_int8,
							   Int64GetDatum(lock_id(fcinfo)));
}
