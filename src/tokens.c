/*-------------------------------------------------------------------------
 *
 * tokens.c
 *	  One-time submit tokens: issue_token() and consume_token().
 *
 * Consuming is one guarded UPDATE: of two concurrent consumers the second
 * waits for the first one's row lock, re-reads the row and finds it
 * consumed, so exactly one gets true.  Consumed rows stay until
 * purge_expired() removes them.
 *
 * Each call reads the clock once, when it starts its work
 * (GetCurrentTimestamp(), not the statement's start), and passes that
 * reading to its statement as "now": a token issued late in a long
 * statement or procedure still lives its whole ttl, and one consumed there
 * is judged expired or not by the time of the consume.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "idempotency.h"
#include "arguments.h"
#include "bookkeeping.h"

/* $1 token, $2 scope, $3 now, $4 ttl */
static IdemQuery insert_token = {
	.sql = "INSERT INTO idempotency.tokens (token, scope, created_at, expires_at)"
	" VALUES ($1, $2, $3, $3 OPERATOR(pg_catalog.+) $4)",
	.nargs = 4, .argtypes = {UUIDOID, TEXTOID, TIMESTAMPTZOID, INTERVALOID}
};

/* $1 token, $2 scope, $3 now */
static IdemQuery consume = {
	.sql = "UPDATE idempotency.tokens SET consumed_at = $3"
	" WHERE token OPERATOR(pg_catalog.=) $1"
	" AND scope OPERATOR(pg_catalog.=) $2"
	" AND consumed_at IS NULL AND expires_at OPERATOR(pg_catalog.>) $3",
	.nargs = 3, .argtypes = {UUIDOID, TEXTOID, TIMESTAMPTZOID}
};

/* SQL-callable functions */
PG_FUNCTION_INFO_V1(idempotency_issue_token);
PG_FUNCTION_INFO_V1(idempotency_consume_token);

/*
 * issue_token(scope text, ttl interval) RETURNS uuid
 */
Datum
idempotency_issue_token(PG_FUNCTION_ARGS)
{
	text	   *scope = idem_arg_scope(fcinfo, 0);
	Interval   *ttl = idem_arg_interval(fcinfo, 1, "ttl", &idem_token_ttl);
	pg_uuid_t  *token = palloc(sizeof(pg_uuid_t));
	Datum		values[4];

	/* A version 4 (random) UUID, RFC 4122. */
	if (!pg_strong_random(token->data, UUID_LEN))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random values")));
	token->data[6] = (token->data[6] & 0x0f) | 0x40;
	token->data[8] = (token->data[8] & 0x3f) | 0x80;

	values[0] = UUIDPGetDatum(token);
	values[1] = PointerGetDatum(scope);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[3] = IntervalPGetDatum(ttl);

	PreventCommandIfReadOnly("idempotency.issue_token()");
	(void) idem_run_as_owner(&insert_token, values, NULL, false, NULL, NULL);
	PG_RETURN_UUID_P(token);
}

/*
 * consume_token(token uuid, scope text) RETURNS boolean: true exactly once
 * per token within its ttl.
 */
Datum
idempotency_consume_token(PG_FUNCTION_ARGS)
{
	text	   *scope;
	Datum		values[3];
	bool		consumed;

	idem_require_arg(fcinfo, 0, "token");
	scope = idem_arg_scope(fcinfo, 1);
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PointerGetDatum(scope);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());

	PreventCommandIfReadOnly("idempotency.consume_token()");
	consumed = idem_run_as_owner(&consume, values, NULL, false, NULL, NULL) == 1;
	PG_RETURN_BOOL(consumed);
}
