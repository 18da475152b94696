/*-------------------------------------------------------------------------
 *
 * fingerprint.c
 *	  fingerprint(jsonb): SHA-256 of the canonical text of a request body.
 *
 * jsonb already stores objects with sorted, de-duplicated keys and prints
 * them with fixed spacing, so bodies that differ only in key order or
 * whitespace print, and hash, the same.  Numbers keep their written scale:
 * 1 and 1.0 differ.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/sha2.h"
#include "utils/jsonb.h"

#include "idempotency.h"

PG_FUNCTION_INFO_V1(idempotency_fingerprint);

/*
 * SHA-256 of "len" bytes at "data", into digest[PG_SHA256_DIGEST_LENGTH],
 * with PostgreSQL's own cryptohash API (OpenSSL when built with it).
 */
void
idem_sha256(const char *data, size_t len, uint8 *digest)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

	if (ctx == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0 ||
		pg_cryptohash_final(ctx, digest, PG_SHA256_DIGEST_LENGTH) < 0)
		elog(ERROR, "could not compute SHA-256: %s", pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
}

/*
 * SHA-256 of the canonical text of "request", as a 32-byte bytea.
 */
bytea *
idem_fingerprint(Jsonb *request)
{
	char	   *canonical = JsonbToCString(NULL, &request->root,
										   VARSIZE(request));
	bytea	   *result = (bytea *) palloc(VARHDRSZ + PG_SHA256_DIGEST_LENGTH);

	idem_sha256(canonical, strlen(canonical), (uint8 *) VARDATA(result));
	SET_VARSIZE(result, VARHDRSZ + PG_SHA256_DIGEST_LENGTH);
	pfree(canonical);
	return result;
}

/*
 * fingerprint(request jsonb) RETURNS bytea
 */
Datum
idempotency_fingerprint(PG_FUNCTION_ARGS)
{
	idem_require_arg(fcinfo, 0, "request");
	PG_RETURN_BYTEA_P(idem_fingerprint(PG_GETARG_JSONB_P(0)));
}
