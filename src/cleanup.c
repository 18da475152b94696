/*-------------------------------------------------------------------------
 *
 * cleanup.c
 *	  Expiry: purge_expired_batch(), one batch of deletes of what has
 *	  expired; the procedure purge_expired() repeats it, committing after
 *	  each batch.
 *
 * Each relation is purged by one cached statement per walk:
 *
 *	  DELETE FROM rel WHERE ctid = ANY (ARRAY(SELECT ctid FROM rel
 *		WHERE <may go> ORDER BY <time column> LIMIT n FOR UPDATE SKIP LOCKED))
 *
 * run through SPI as the extension owner, so the executor fires the
 * table's DELETE triggers, applies its rules and checks or cascades the
 * foreign keys that reference it, and refuses in a read-only transaction.
 * A row that a claim, a consumer or a relay is changing or has locked is
 * skipped, not waited for.  What is live is never picked: a key past
 * expires_at whose holder still has a lease, a token neither expired nor
 * consumed, an outbox event not yet published.
 *
 * A batch whose delete fails on one row (an application table's foreign
 * key without ON DELETE CASCADE still references it, or a user's trigger
 * raises) is rolled back to a savepoint and done again row by row, each
 * delete in a subtransaction of its own: the rows that fail stay, are
 * counted in a WARNING, and the others go.  So one such row never stops
 * the scheduled job; it is tried again by every later purge.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "idempotency.h"

/* The relations purge_expired_batch() reports on, in its output order. */
enum
{
	REL_KEYS,
	REL_TOKENS,
	REL_PROCESSED,
	REL_OUTBOX,
	REL_COUNT
};

static const char *const relation_names[REL_COUNT] = {
	"idempotency_keys", "tokens", "processed_events", "outbox_events"
};

/* Shorthands for the qualified operators of the statements below. */
#define LE " OPERATOR(pg_catalog.<=) "
#define CANDIDATES(rel, where, column) \
	"SELECT ctid FROM idempotency." rel " WHERE " where \
	" ORDER BY " column " LIMIT $2 FOR UPDATE SKIP LOCKED"
#define DELETE_BATCH(rel, where, column) \
	"DELETE FROM idempotency." rel \
	" WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY(" \
	CANDIDATES(rel, where, column) "))"
#define PURGE_ARGTYPES {TIMESTAMPTZOID, INT8OID}

/*
 * One walk: the rows of "relation" that may go, up to the cut-off $1 (now
 * - retention; now when retention is NULL), oldest first, at most $2 of
 * them.  "batch" deletes them in one statement; "candidates" lists them
 * for the row-by-row fallback.
 */
typedef struct Purge
{
	int			relation;		/* REL_* */
	const Interval *retention;
	IdemQuery	batch;
	IdemQuery	candidates;
} Purge;

#define PURGE(relation, retention, rel, where, column) \
	{relation, retention, \
	 {.sql = DELETE_BATCH(rel, where, column), .nargs = 2, .argtypes = PURGE_ARGTYPES}, \
	 {.sql = CANDIDATES(rel, where, column), .nargs = 2, .argtypes = PURGE_ARGTYPES}}

static Purge purges[] = {
	PURGE(REL_KEYS, NULL, "idempotency_keys",
		  "expires_at" LE "$1 AND (locked_until IS NULL OR locked_until" LE "$1)",
		  "expires_at"),
	PURGE(REL_TOKENS, NULL, "tokens", "expires_at" LE "$1", "expires_at"),
	PURGE(REL_TOKENS, NULL, "tokens",
		  "consumed_at IS NOT NULL AND consumed_at" LE "$1", "consumed_at"),
	PURGE(REL_PROCESSED, &idem_processed_retention, "processed_events",
		  "processed_at" LE "$1", "processed_at"),
	PURGE(REL_OUTBOX, &idem_outbox_retention, "outbox_events",
		  "published_at IS NOT NULL AND published_at" LE "$1", "published_at"),
};

/* $1 the row's ctid, for the row-by-row fallback; one per relation */
static IdemQuery delete_row[REL_COUNT] = {
	{.sql = "DELETE FROM idempotency.idempotency_keys WHERE ctid OPERATOR(pg_catalog.=) $1",
	.nargs = 1, .argtypes = {TIDOID}},
	{.sql = "DELETE FROM idempotency.tokens WHERE ctid OPERATOR(pg_catalog.=) $1",
	.nargs = 1, .argtypes = {TIDOID}},
	{.sql = "DELETE FROM idempotency.processed_events WHERE ctid OPERATOR(pg_catalog.=) $1",
	.nargs = 1, .argtypes = {TIDOID}},
	{.sql = "DELETE FROM idempotency.outbox_events WHERE ctid OPERATOR(pg_catalog.=) $1",
	.nargs = 1, .argtypes = {TIDOID}},
};

/*
 * True for the errors that a row-by-row purge skips the row for: a
 * violated constraint (a foreign key that still references the row) and
 * an error raised by a user's trigger or rule.  Anything else (a cancel,
 * a serialization failure, a read-only transaction, running out of
 * resources, an internal error) ends the purge.
 */
static bool
row_error_is_skippable(int sqlerrcode)
{
	switch (ERRCODE_TO_CATEGORY(sqlerrcode))
	{
		case ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION:
		case ERRCODE_TRIGGERED_ACTION_EXCEPTION:
		case ERRCODE_TRIGGERED_DATA_CHANGE_VIOLATION:
		case ERRCODE_PLPGSQL_ERROR:
			return true;
		default:
			return false;
	}
}

/*
 * Run "query" with "args" in a subtransaction of its own; returns the
 * number of rows it processed, or -1, having rolled it back, when it
 * failed with an error that row_error_is_skippable() accepts (a copy of
 * the error, in the caller's memory, is left in "*error" unless one is
 * there already).  The caller is connected to SPI.
 */
static int64
run_in_subtransaction(IdemQuery *query, Datum *args, ErrorData **error)
{
	MemoryContext caller = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile int64 processed = -1;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(caller);
	PG_TRY();
	{
		processed = idem_run(query, args, NULL, false, 0);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(caller);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(caller);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(caller);
		CurrentResourceOwner = owner;
		if (!row_error_is_skippable(edata->sqlerrcode))
			ReThrowError(edata);
		if (*error == NULL)
			*error = edata;
		else
			FreeErrorData(edata);
		processed = -1;
	}
	PG_END_TRY();
	return processed;
}

/*
 * Delete the rows of one walk one by one, each in a subtransaction, until
 * "limit" went or none is left; a row whose delete fails stays.  Returns
 * how many went.
 */
static int64
purge_row_by_row(Purge *purge, Datum *args, int64 limit)
{
	ErrorData  *error = NULL;
	Portal		portal;
	int64		deleted = 0;
	int64		skipped = 0;

	/* every row that may go: the limit counts deletes, not candidates */
	args[1] = Int64GetDatum(PG_INT64_MAX);
	portal = SPI_cursor_open(NULL, idem_prepare(&purge->candidates), args,
							 NULL, false);
	while (deleted < limit)
	{
		uint64		i;
		uint64		fetched;
		SPITupleTable *rows;

		SPI_cursor_fetch(portal, true, 100);
		fetched = SPI_processed;
		rows = SPI_tuptable;
		if (fetched == 0)
			break;
		for (i = 0; i < fetched && deleted < limit; i++)
		{
			bool		isnull;
			Datum		ctid = SPI_getbinval(rows->vals[i], rows->tupdesc, 1,
											 &isnull);

			CHECK_FOR_INTERRUPTS();
			if (run_in_subtransaction(&delete_row[purge->relation], &ctid,
									  &error) < 0)
				skipped++;
			else
				deleted++;
		}
		SPI_freetuptable(rows);
	}
	SPI_cursor_close(portal);
	/* every skipped row left its error; the first one is kept */
	if (skipped > 0 && error != NULL)
		ereport(WARNING,
				(errmsg_plural("purge kept %lld row of \"idempotency.%s\" that could not be deleted",
							   "purge kept %lld rows of \"idempotency.%s\" that could not be deleted",
							   skipped, (long long) skipped,
							   relation_names[purge->relation]),
				 errdetail("The first row failed with: %s", error->message),
				 errhint("A foreign key without ON DELETE CASCADE or SET NULL that references these rows, or a trigger that raises an error, keeps them; every later purge tries them again.")));
	if (error != NULL)
		FreeErrorData(error);
	return deleted;
}

/*
 * Delete at most "limit" rows of one walk; returns how many went.
 */
static int64
purge_walk(Purge *purge, TimestampTz cutoff, int64 limit)
{
	ErrorData  *error = NULL;
	Datum		args[2];
	int64		deleted;

	args[0] = TimestampTzGetDatum(cutoff);
	args[1] = Int64GetDatum(limit);
	SPI_connect();
	deleted = run_in_subtransaction(&purge->batch, args, &error);
	if (deleted < 0)
	{
		FreeErrorData(error);
		deleted = purge_row_by_row(purge, args, limit);
	}
	SPI_finish();
	return deleted;
}

/* SQL-callable functions */
PG_FUNCTION_INFO_V1(idempotency_purge_expired_batch);

/*
 * purge_expired_batch(batch_size int) RETURNS TABLE(relation text,
 * deleted bigint): one batch in the caller's transaction, at most
 * batch_size rows per relation.
 */
Datum
idempotency_purge_expired_batch(PG_FUNCTION_ARGS)
{
	int32		batch_size = idem_arg_positive_int(fcinfo, 0, "batch_size");
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentStatementStartTimestamp();
	int64		deleted[REL_COUNT] = {0};
	IdemOwnerRights owner;
	int			i;

	PreventCommandIfReadOnly("idempotency.purge_expired_batch()");
	InitMaterializedSRF(fcinfo, 0);

	idem_become_owner(&owner);
	for (i = 0; i < (int) lengthof(purges); i++)
	{
		Purge	   *purge = &purges[i];
		int64		room = batch_size - deleted[purge->relation];
		TimestampTz cutoff = now;

		if (room <= 0)
			continue;
		if (purge->retention != NULL)
			cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
															 TimestampTzGetDatum(now),
															 IntervalPGetDatum(purge->retention)));
		deleted[purge->relation] += purge_walk(purge, cutoff, room);
	}
	idem_restore_user(&owner);

	/*
	 * Nothing to delete: purge_expired() is done, and it committed its
	 * earlier batches without waiting for their WAL flush.  This session's
	 * last commit is made durable here, so that what the procedure deleted
	 * stays deleted after a crash once it returns (a no-op when flushed).
	 */
	for (i = 0; i < REL_COUNT && deleted[i] == 0; i++)
		;
	if (i == REL_COUNT && !XLogRecPtrIsInvalid(XactLastCommitEnd))
		XLogFlush(XactLastCommitEnd);

	for (i = 0; i < REL_COUNT; i++)
	{
		Datum		row[2];
		bool		nulls[2] = {false, false};

		row[0] = CStringGetTextDatum(relation_names[i]);
		row[1] = Int64GetDatum(deleted[i]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, row, nulls);
	}
	return (Datum) 0;
}
