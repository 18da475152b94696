/*-------------------------------------------------------------------------
 *
 * locks.c
 *	  Advisory-lock helpers: lock_key() and try_lock().
 *
 * lock_key() is the first 8 bytes of SHA-256 of the key's UTF-8 bytes,
 * read as a big-endian signed integer: stable across servers, platforms,
 * versions and database encodings, and easy to compute in any language,
 * in SQL too:
 *	('x' || left(encode(sha256(convert_to(key, 'UTF8')), 'hex'), 16))::bit(64)::bigint
 *
 * A UTF-8 database hashes the key as stored.  Any other encoding converts
 * it to UTF-8 first, except SQL_ASCII, whose bytes have no known encoding
 * and are hashed as stored (they are UTF-8 when the clients send UTF-8).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/sha2.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"

#include "idempotency.h"
#include "arguments.h"
#include "fingerprint.h"

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
	char	   *bytes = VARDATA_ANY(key);
	int			len = VARSIZE_ANY_EXHDR(key);
	int			encoding = GetDatabaseEncoding();
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	uint64		id = 0;
	int			i;

	if (encoding != PG_UTF8 && encoding != PG_SQL_ASCII)
	{
		char	   *utf8 = pg_server_to_any(bytes, len, PG_UTF8);

		/* a converted string is new and NUL-terminated */
		if (utf8 != bytes)
		{
			bytes = utf8;
			len = (int) strlen(utf8);
		}
	}
	idem_sha256(bytes, len, digest);
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
