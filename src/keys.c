/*-------------------------------------------------------------------------
 *
 * keys.c
 *	  Request keys: claim, the holder calls (complete, fail, checkpoint,
 *	  release) and lookup.
 *
 * A claim is decided by a read and at most two cached statements, all run
 * as the extension owner:
 *
 *	1. a read of the key, a direct probe of the primary key index (every
 *	   claim takes this step, so it skips the executor).  A completed key
 *	   (replay), another request under the key (mismatch) or a live lease
 *	   (in_progress) is answered from it, writing nothing.  Those answers cannot be made stale by a
 *	   concurrent transaction: completed keys only change once they expire,
 *	   and a live lease is only taken over once it runs out.
 *	2. otherwise one INSERT ... ON CONFLICT DO UPDATE ... WHERE <may take
 *	   over> takes the key atomically: a fresh key, an expired key, a crashed
 *	   holder's key or a retryable failure.  A concurrent claim of the same
 *	   key waits on the index entry or row lock and then sees our outcome.
 *	   A key the read found absent is first tried with a plain INSERT ... ON
 *	   CONFLICT DO NOTHING, whose plan starts at a fraction of the upsert's
 *	   cost (no SET list, no WHERE); only a concurrent insert of the same
 *	   key sends it on to the upsert.
 *	3. when the upsert declines, ON CONFLICT has locked the row it
 *	   conflicted with, and a second read, with a new snapshot, classifies
 *	   it.
 *
 * Every holder call is one UPDATE or DELETE guarded by the fence that the
 * claim handed out; fences come from one sequence, so a later holder always
 * has a larger fence than any earlier one, even after the key was purged
 * and created again.  No row means the caller no longer holds the key.
 *
 * All times are the statement's start time, passed as a parameter, so that
 * the C decisions and the SQL agree on "now".
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/htup_details.h"
#include "access/nbtree.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "idempotency.h"

/* Shorthands for the qualified operators of the statements below. */
#define EQ " OPERATOR(pg_catalog.=) "
#define LE " OPERATOR(pg_catalog.<=) "
#define GT " OPERATOR(pg_catalog.>) "
#define PLUS " OPERATOR(pg_catalog.+) "
#define KEY_IS_ARG "scope" EQ "$1 AND idempotency_key" EQ "$2"

/*
 * Columns that a claim reads from the key's row, and their names in
 * idempotency.idempotency_keys.
 */
enum
{
	READ_STATUS,
	READ_REQUEST_HASH,
	READ_ATTEMPTS,
	READ_RECOVERY_POINT,
	READ_RESPONSE_CODE,
	READ_RESPONSE_BODY,
	READ_RETRYABLE,
	READ_LOCKED_UNTIL,
	READ_EXPIRES_AT,
	READ_NCOLUMNS
};

static const char *const read_column_names[READ_NCOLUMNS] = {
	"status", "request_hash", "attempts", "recovery_point", "response_code",
	"response_body", "retryable", "locked_until", "expires_at"
};

/*
 * The columns of the key's row as the last read_key() found it, and the
 * attribute numbers of read_column_names in the table of key_row_relid
 * (resolved once per backend and table).
 */
static Datum key_row_values[READ_NCOLUMNS];
static bool key_row_nulls[READ_NCOLUMNS];
static Oid	key_row_relid = InvalidOid;
static AttrNumber key_row_attnums[READ_NCOLUMNS];

/*
 * $1 scope, $2 key, $3 request hash, $4 now, $5 ttl, $6 lease.  The WHERE
 * clause is the whole rule of when a claim may take an existing key over.
 */
#define NEW_KEY_ROW \
	" (scope, idempotency_key, request_hash, status, fence, attempts," \
	"  recovery_point, locked_until, created_at, updated_at, expires_at)" \
	" VALUES ($1, $2, $3, 'processing'," \
	"  pg_catalog.nextval('idempotency.fence_seq'::pg_catalog.regclass), 1," \
	"  'started', $4" PLUS "$6, $4, $4, $4" PLUS "$5)"
#define CLAIMED_COLUMNS " RETURNING status, fence, attempts, recovery_point"
#define CLAIM_ARGTYPES {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, INTERVALOID, INTERVALOID}

/*
 * The same arguments.  The common case, a key that the read found absent:
 * a plain insert, whose plan is much cheaper to start than the upsert's.
 */
static IdemQuery insert_key = {
	.sql = "INSERT INTO idempotency.idempotency_keys" NEW_KEY_ROW
	" ON CONFLICT (scope, idempotency_key) DO NOTHING" CLAIMED_COLUMNS,
	.nargs = 6, .argtypes = CLAIM_ARGTYPES
};

#define EXPIRED "k.expires_at" LE "$4"
static IdemQuery take_key = {
	.sql = "INSERT INTO idempotency.idempotency_keys AS k" NEW_KEY_ROW
	" ON CONFLICT (scope, idempotency_key) DO UPDATE SET"
	"  request_hash = CASE WHEN " EXPIRED " THEN excluded.request_hash"
	"   ELSE COALESCE(k.request_hash, excluded.request_hash) END,"
	"  status = 'processing',"
	"  fence = excluded.fence,"
	"  attempts = CASE WHEN " EXPIRED " THEN 1"
	"   ELSE k.attempts" PLUS "1 END,"
	"  recovery_point = CASE WHEN " EXPIRED " THEN 'started'"
	"   ELSE k.recovery_point END,"
	"  response_code = NULL, response_body = NULL, retryable = NULL,"
	"  locked_until = excluded.locked_until,"
	"  created_at = CASE WHEN " EXPIRED " THEN excluded.created_at"
	"   ELSE k.created_at END,"
	"  updated_at = excluded.updated_at,"
	"  expires_at = CASE WHEN " EXPIRED " THEN excluded.expires_at"
	"   ELSE GREATEST(k.expires_at, excluded.locked_until) END"
	" WHERE " EXPIRED
	"  OR ((k.request_hash IS NULL OR $3 IS NULL OR k.request_hash" EQ "$3)"
	"      AND ((k.status" EQ "'processing' AND k.locked_until" LE "$4)"
	"           OR (k.status" EQ "'failed' AND k.retryable)))"
	CLAIMED_COLUMNS,
	.nargs = 6, .argtypes = CLAIM_ARGTYPES
};

#define HELD_BY_FENCE KEY_IS_ARG " AND fence" EQ "$3 AND status" EQ "'processing'"

/* $1 scope, $2 key, $3 fence, $4 code, $5 body, $6 now, $7 completed, $8 retryable */
static IdemQuery finish_key = {
	.sql = "UPDATE idempotency.idempotency_keys SET"
	" status = CASE WHEN $7 THEN 'completed'::idempotency.key_status"
	"  ELSE 'failed'::idempotency.key_status END,"
	" response_code = $4, response_body = $5, retryable = $8,"
	" locked_until = NULL, updated_at = $6"
	" WHERE " HELD_BY_FENCE " RETURNING status",
	.nargs = 8, .argtypes = {TEXTOID, TEXTOID, INT8OID, INT4OID, JSONBOID, TIMESTAMPTZOID,
	BOOLOID, BOOLOID}
};

/* $1 scope, $2 key, $3 fence, $4 recovery point or NULL, $5 now, $6 lease */
static IdemQuery checkpoint_key = {
	.sql = "UPDATE idempotency.idempotency_keys SET"
	" recovery_point = COALESCE($4, recovery_point),"
	" locked_until = $5" PLUS "$6,"
	" expires_at = GREATEST(expires_at, $5" PLUS "$6),"
	" updated_at = $5"
	" WHERE " HELD_BY_FENCE,
	.nargs = 6, .argtypes = {TEXTOID, TEXTOID, INT8OID, TEXTOID, TIMESTAMPTZOID, INTERVALOID}
};

/* $1 scope, $2 key, $3 fence */
static IdemQuery release_key = {
	.sql = "DELETE FROM idempotency.idempotency_keys WHERE " HELD_BY_FENCE,
	.nargs = 3, .argtypes = {TEXTOID, TEXTOID, INT8OID}
};

/* $1 scope, $2 key, $3 now */
static IdemQuery lookup_key = {
	.sql = "SELECT k FROM idempotency.idempotency_keys k"
	" WHERE " KEY_IS_ARG " AND expires_at" GT "$3",
	.nargs = 3, .argtypes = {TEXTOID, TEXTOID, TIMESTAMPTZOID}
};

/* SQL-callable functions */
PG_FUNCTION_INFO_V1(idempotency_claim);
PG_FUNCTION_INFO_V1(idempotency_complete);
PG_FUNCTION_INFO_V1(idempotency_fail);
PG_FUNCTION_INFO_V1(idempotency_checkpoint);
PG_FUNCTION_INFO_V1(idempotency_release);
PG_FUNCTION_INFO_V1(idempotency_lookup);

/*
 * Resolve the attribute numbers of read_column_names in "tupdesc".
 */
static void
resolve_read_columns(Oid relid, TupleDesc tupdesc)
{
	int			col;
	int			i;

	for (col = 0; col < READ_NCOLUMNS; col++)
	{
		key_row_attnums[col] = InvalidAttrNumber;
		for (i = 0; i < tupdesc->natts; i++)
		{
			Form_pg_attribute attr = TupleDescAttr(tupdesc, i);

			if (!attr->attisdropped &&
				strcmp(NameStr(attr->attname), read_column_names[col]) == 0)
				key_row_attnums[col] = attr->attnum;
		}
		if (key_row_attnums[col] == InvalidAttrNumber)
			elog(ERROR, "column \"%s\" of relation \"idempotency.idempotency_keys\" does not exist",
				 read_column_names[col]);
	}
	key_row_relid = relid;
}

/*
 * Read the key's row into key_row; false when there is none.
 *
 * This runs on every claim, so it probes the primary key index directly
 * instead of starting an executor for a SELECT.  It sees what a
 * non-read-only SPI statement would see: the effects of the earlier
 * commands of this transaction and, under READ COMMITTED, everything
 * committed before it starts.  The copy of the row lives in the current
 * (SPI) memory context; read_column() returns its columns.
 */
static bool
read_key(text *scope, text *key)
{
	ScanKeyData skey[2];
	IdemIndexScan scan;
	bool		found;
	int			col;

	/* both key columns are text COLLATE "C", as ScanKeyInit() assumes */
	ScanKeyInit(&skey[0], 1, BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(scope));
	ScanKeyInit(&skey[1], 2, BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(key));

	idem_index_scan_begin(&scan, "idempotency_keys", "idempotency_keys_pkey",
						  AccessShareLock, skey, 2);
	if (RelationGetRelid(scan.rel) != key_row_relid)
		resolve_read_columns(RelationGetRelid(scan.rel),
							 RelationGetDescr(scan.rel));
	found = idem_index_scan_next(&scan);
	if (found)
	{
		HeapTuple	row = ExecCopySlotHeapTuple(scan.slot);

		for (col = 0; col < READ_NCOLUMNS; col++)
			key_row_values[col] = heap_getattr(row, key_row_attnums[col],
											   RelationGetDescr(scan.rel),
											   &key_row_nulls[col]);
	}
	idem_index_scan_end(&scan);
	return found;
}

/*
 * Column "col" (READ_*) of the row that the last read_key() found.
 */
static Datum
read_column(int col, bool *isnull)
{
	*isnull = key_row_nulls[col];
	return key_row_values[col];
}

/*
 * Answer a claim from the key's row, as the last read_key() found it, when
 * the row decides it (replay, in_progress, mismatch).  Returns false when
 * the claim may take the key over.
 */
static bool
answer_from_row(bytea *request_hash, TimestampTz now, IdemClaim *claim)
{
	bool		isnull;
	Datum		stored_hash;
	char	   *status;
	TimestampTz locked_until;

	if (DatumGetTimestampTz(read_column(READ_EXPIRES_AT, &isnull)) <= now)
		return false;

	claim->values[CLAIM_STATUS] = read_column(READ_STATUS, &isnull);
	claim->nulls[CLAIM_STATUS] = false;
	stored_hash = read_column(READ_REQUEST_HASH, &isnull);
	if (!isnull && request_hash != NULL &&
		!DatumGetBool(DirectFunctionCall2(byteaeq, stored_hash,
										  PointerGetDatum(request_hash))))
	{
		claim->outcome = "mismatch";
		return true;
	}

	claim->values[CLAIM_ATTEMPTS] = read_column(READ_ATTEMPTS,
												&claim->nulls[CLAIM_ATTEMPTS]);
	claim->values[CLAIM_RECOVERY_POINT] =
		read_column(READ_RECOVERY_POINT, &claim->nulls[CLAIM_RECOVERY_POINT]);

	status = DatumGetCString(DirectFunctionCall1(enum_out,
												 claim->values[CLAIM_STATUS]));
	if (strcmp(status, "completed") == 0 ||
		(strcmp(status, "failed") == 0 &&
		 !DatumGetBool(read_column(READ_RETRYABLE, &isnull))))
	{
		claim->outcome = "replay";
		claim->values[CLAIM_RESPONSE_CODE] =
			read_column(READ_RESPONSE_CODE, &claim->nulls[CLAIM_RESPONSE_CODE]);
		claim->values[CLAIM_RESPONSE_BODY] =
			read_column(READ_RESPONSE_BODY, &claim->nulls[CLAIM_RESPONSE_BODY]);
		return true;
	}

	locked_until = DatumGetTimestampTz(read_column(READ_LOCKED_UNTIL, &isnull));
	if (strcmp(status, "processing") == 0 && !isnull && locked_until > now)
	{
		claim->outcome = "in_progress";
		claim->values[CLAIM_RETRY_AFTER] =
			DirectFunctionCall2(timestamp_mi, TimestampTzGetDatum(locked_until),
								TimestampTzGetDatum(now));
		claim->nulls[CLAIM_RETRY_AFTER] = false;
		return true;
	}
	return false;
}

/*
 * Fill "claim" from the row that insert_key or take_key returned: the key
 * is ours, claimed or resumed.
 */
static void
claim_from_row(IdemClaim *claim)
{
	bool		isnull;

	claim->values[CLAIM_STATUS] = idem_get_column(1, &isnull);
	claim->values[CLAIM_FENCE] = idem_get_column(2, &isnull);
	claim->values[CLAIM_ATTEMPTS] = idem_get_column(3, &isnull);
	claim->values[CLAIM_RECOVERY_POINT] = idem_get_column(4, &isnull);
	claim->nulls[CLAIM_STATUS] = claim->nulls[CLAIM_FENCE] =
		claim->nulls[CLAIM_ATTEMPTS] =
		claim->nulls[CLAIM_RECOVERY_POINT] = false;
	claim->outcome = DatumGetInt32(claim->values[CLAIM_ATTEMPTS]) == 1 ?
		"claimed" : "resumed";
}

/*
 * Claim a key: fill "claim" with the outcome and the columns it reveals.
 * Only the holder learns the fence.
 */
void
idem_claim_key(text *key, text *scope, Jsonb *request, Interval *ttl,
			   Interval *lease, IdemClaim *claim)
{
	TimestampTz now = GetCurrentStatementStartTimestamp();
	bytea	   *request_hash = request ? idem_fingerprint(request) : NULL;
	Datum		values[6];
	char		nulls[6] = {' ', ' ', request_hash ? ' ' : 'n', ' ', ' ', ' '};
	int			attempt;
	bool		found;

	memset(claim->nulls, true, sizeof(claim->nulls));
	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = PointerGetDatum(request_hash);
	values[3] = TimestampTzGetDatum(now);
	values[4] = IntervalPGetDatum(ttl);
	values[5] = IntervalPGetDatum(lease);

	found = read_key(scope, key);
	if (found && answer_from_row(request_hash, now, claim))
		return;

	/* An absent key is most likely still absent: insert it. */
	if (!found && idem_run(&insert_key, values, nulls, false, 1) == 1)
	{
		claim_from_row(claim);
		return;
	}

	/*
	 * The row read may be gone or changed by now; the upsert decides.  When
	 * it declines, it has locked the row, so the read after it is final.
	 * Declining twice in a row cannot happen with a fixed "now"; the loop
	 * only bounds the work if it ever did.
	 */
	for (attempt = 0; attempt < 3; attempt++)
	{
		if (idem_run(&take_key, values, nulls, false, 1) == 1)
		{
			claim_from_row(claim);
			return;
		}
		if (read_key(scope, key) && answer_from_row(request_hash, now, claim))
			return;
	}
	elog(ERROR, "could not claim idempotency key \"%s\"", text_to_cstring(key));
}

/*
 * True when the claim's caller must run the operation.
 */
bool
idem_claim_runs_work(const IdemClaim *claim)
{
	return strcmp(claim->outcome, "claimed") == 0 ||
		strcmp(claim->outcome, "resumed") == 0;
}

/*
 * The claim as an idempotency.claim_result datum, in the caller's memory.
 */
Datum
idem_claim_datum(FunctionCallInfo fcinfo, IdemClaim *claim)
{
	TupleDesc	tupdesc;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	claim->values[CLAIM_OUTCOME] = CStringGetTextDatum(claim->outcome);
	claim->nulls[CLAIM_OUTCOME] = false;
	return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
											 claim->values, claim->nulls));
}

/*
 * Raise the error of a holder call whose fence no longer holds the key.
 */
static void
lease_lost(text *key, text *scope, int64 fence)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("idempotency lease lost for key \"%s\"",
					text_to_cstring(key)),
			 errdetail("Fence " INT64_FORMAT " no longer holds the key in scope \"%s\": its lease ran out and another claim took the key over, or the key was completed, failed, released or purged.",
					   fence, text_to_cstring(scope)),
			 errhint("Abandon this attempt; a retry of the request claims the key again.")));
}

/*
 * Store the final or retryable outcome of a held key; returns its new
 * status.
 */
Datum
idem_finish_key(text *key, text *scope, int64 fence, bool completed,
				Datum body, bool body_isnull, int32 response_code,
				bool retryable)
{
	Datum		values[8];
	char		nulls[8] = {' ', ' ', ' ', ' ', body_isnull ? 'n' : ' ', ' ', ' ',
	completed ? 'n' : ' '};
	bool		isnull;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = Int64GetDatum(fence);
	values[3] = Int32GetDatum(response_code);
	values[4] = body;
	values[5] = TimestampTzGetDatum(GetCurrentStatementStartTimestamp());
	values[6] = BoolGetDatum(completed);
	values[7] = BoolGetDatum(retryable);

	if (idem_run(&finish_key, values, nulls, false, 0) != 1)
		lease_lost(key, scope, fence);
	return idem_get_column(1, &isnull);
}

/*
 * A response body argument, bounded by idempotency.max_response_bytes;
 * NULL when the argument is NULL.
 */
Jsonb *
idem_arg_response(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	Size		size;

	if (PG_ARGISNULL(argno))
		return NULL;
	size = toast_raw_datum_size(PG_GETARG_DATUM(argno));
	if (size > (Size) idem_max_response_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s is too large to store", argname),
				 errdetail("It takes %zu bytes; idempotency.max_response_bytes allows %d.",
						   size, idem_max_response_bytes),
				 errhint("Store a smaller response, or raise idempotency.max_response_bytes.")));
	return PG_GETARG_JSONB_P(argno);
}

/*
 * An HTTP status code argument: 100 to 599.
 */
int32
idem_arg_response_code(FunctionCallInfo fcinfo, int argno)
{
	int32		code;

	idem_require_arg(fcinfo, argno, "response_code");
	code = PG_GETARG_INT32(argno);
	if (code < 100 || code > 599)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("response_code %d is not an HTTP status code", code),
				 errhint("Use a code from 100 to 599.")));
	return code;
}

/*
 * The fence argument of a holder call.
 */
static int64
arg_fence(FunctionCallInfo fcinfo, int argno)
{
	idem_require_arg(fcinfo, argno, "fence");
	return PG_GETARG_INT64(argno);
}

/*
 * claim(key, request, scope, ttl, lease) RETURNS claim_result
 */
Datum
idempotency_claim(PG_FUNCTION_ARGS)
{
	text	   *key = idem_arg_key(fcinfo, 0);
	Jsonb	   *request = PG_ARGISNULL(1) ? NULL : PG_GETARG_JSONB_P(1);
	text	   *scope = idem_arg_scope(fcinfo, 2);
	Interval   *ttl = idem_arg_interval(fcinfo, 3, "ttl", &idem_default_ttl);
	Interval   *lease = idem_arg_interval(fcinfo, 4, "lease",
										  &idem_lease_timeout);
	MemoryContext caller_context = CurrentMemoryContext;
	IdemOwnerRights owner;
	IdemClaim	claim;
	Datum		result;

	idem_check_ttl_covers_lease(ttl, lease);
	idem_become_owner(&owner);
	SPI_connect();
	idem_claim_key(key, scope, request, ttl, lease, &claim);
	MemoryContextSwitchTo(caller_context);
	result = idem_claim_datum(fcinfo, &claim);
	SPI_finish();
	idem_restore_user(&owner);
	PG_RETURN_DATUM(result);
}

/*
 * Shared body of complete() and fail().
 */
static void
finish_held_key(FunctionCallInfo fcinfo, int body_arg, int code_arg,
				int scope_arg, bool completed, bool retryable)
{
	text	   *key = idem_arg_key(fcinfo, 0);
	int64		fence = arg_fence(fcinfo, 1);
	Jsonb	   *body = idem_arg_response(fcinfo, body_arg,
										 completed ? "response_body" : "error");
	int32		code = idem_arg_response_code(fcinfo, code_arg);
	text	   *scope = idem_arg_scope(fcinfo, scope_arg);
	IdemOwnerRights owner;

	idem_become_owner(&owner);
	SPI_connect();
	idem_finish_key(key, scope, fence, completed, JsonbPGetDatum(body),
					body == NULL, code, retryable);
	SPI_finish();
	idem_restore_user(&owner);
}

/*
 * complete(key, fence, response_body, response_code, scope) RETURNS void
 */
Datum
idempotency_complete(PG_FUNCTION_ARGS)
{
	idem_require_arg(fcinfo, 2, "response_body");
	finish_held_key(fcinfo, 2, 3, 4, true, false);
	PG_RETURN_VOID();
}

/*
 * fail(key, fence, error, response_code, retryable, scope) RETURNS void
 */
Datum
idempotency_fail(PG_FUNCTION_ARGS)
{
	idem_require_arg(fcinfo, 4, "retryable");
	finish_held_key(fcinfo, 2, 3, 5, false, PG_GETARG_BOOL(4));
	PG_RETURN_VOID();
}

/*
 * checkpoint(key, fence, recovery_point, lease, scope) RETURNS void
 */
Datum
idempotency_checkpoint(PG_FUNCTION_ARGS)
{
	text	   *key = idem_arg_key(fcinfo, 0);
	int64		fence = arg_fence(fcinfo, 1);
	text	   *recovery_point = PG_ARGISNULL(2) ? NULL :
		idem_arg_name(fcinfo, 2, "recovery_point", 1, IDEM_MAX_NAME_CHARS);
	Interval   *lease = idem_arg_interval(fcinfo, 3, "lease",
										  &idem_lease_timeout);
	text	   *scope = idem_arg_scope(fcinfo, 4);
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', recovery_point ? ' ' : 'n', ' ', ' '};
	IdemOwnerRights owner;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = Int64GetDatum(fence);
	values[3] = PointerGetDatum(recovery_point);
	values[4] = TimestampTzGetDatum(GetCurrentStatementStartTimestamp());
	values[5] = IntervalPGetDatum(lease);

	idem_become_owner(&owner);
	SPI_connect();
	if (idem_run(&checkpoint_key, values, nulls, false, 0) != 1)
		lease_lost(key, scope, fence);
	SPI_finish();
	idem_restore_user(&owner);
	PG_RETURN_VOID();
}

/*
 * release(key, fence, scope) RETURNS void
 */
Datum
idempotency_release(PG_FUNCTION_ARGS)
{
	text	   *key = idem_arg_key(fcinfo, 0);
	int64		fence = arg_fence(fcinfo, 1);
	text	   *scope = idem_arg_scope(fcinfo, 2);
	Datum		values[3];
	IdemOwnerRights owner;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = Int64GetDatum(fence);

	idem_become_owner(&owner);
	SPI_connect();
	if (idem_run(&release_key, values, NULL, false, 0) != 1)
		lease_lost(key, scope, fence);
	SPI_finish();
	idem_restore_user(&owner);
	PG_RETURN_VOID();
}

/*
 * lookup(key, scope) RETURNS idempotency_keys: the row, or NULL when the key
 * is absent or expired.
 */
Datum
idempotency_lookup(PG_FUNCTION_ARGS)
{
	text	   *key = idem_arg_key(fcinfo, 0);
	text	   *scope = idem_arg_scope(fcinfo, 1);
	Datum		values[3];
	Datum		row = (Datum) 0;
	bool		isnull = true;
	IdemOwnerRights owner;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = TimestampTzGetDatum(GetCurrentStatementStartTimestamp());

	idem_become_owner(&owner);
	SPI_connect();
	if (idem_run(&lookup_key, values, NULL, true, 1) == 1)
	{
		row = idem_get_column(1, &isnull);
		row = SPI_datumTransfer(row, false, -1);
	}
	SPI_finish();
	idem_restore_user(&owner);
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(row);
}
