/*-------------------------------------------------------------------------
 *
 * cleanup.c
 *	  Expiry: purge_expired_batch(), one batch of deletes of what has
 *	  expired; the procedure purge_expired() repeats it, committing after
 *	  each batch.
 *
 * Each relation is purged by a walk of the index on its time column, up to
 * the cut-off, deleting each row directly with table_tuple_delete() and
 * without waiting: a row that a claim, a consumer or a relay is changing
 * or has locked is skipped, not waited for, and a row changed since the
 * walk's snapshot is left alone.  A row is written once (its delete), not
 * locked first, and no executor is started per batch.  What is live is
 * never picked: a key past expires_at whose holder still has a lease, a
 * token neither expired nor consumed, an outbox event not yet published
 * (the partial indexes hold only consumed tokens and published events).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/nbtree.h"
#include "access/tableam.h"
#include "access/xlog.h"
#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
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

/*
 * One walk: the rows of "relation" whose "column" is at most the cut-off
 * (now - retention; now when retention is NULL), in the order of "index",
 * whose first column is "column".  A key also needs its lease run out.
 */
typedef struct Purge
{
	const char *index;
	const char *column;
	const Interval *retention;
	int			relation;		/* REL_* */
	bool		lease_must_be_over; /* locked_until NULL or <= cut-off */
} Purge;

static const Purge purges[] = {
	{"idempotency_keys_expires_at_idx", "expires_at", NULL, REL_KEYS, true},
	{"tokens_expires_at_idx", "expires_at", NULL, REL_TOKENS, false},
	{"tokens_consumed_at_idx", "consumed_at", NULL, REL_TOKENS, false},
	{"processed_events_processed_at_idx", "processed_at",
	&idem_processed_retention, REL_PROCESSED, false},
	{"outbox_events_published_at_idx", "published_at",
	&idem_outbox_retention, REL_OUTBOX, false},
};

/*
 * Delete at most "limit" rows of one walk; returns how many went.
 */
static int64
purge_walk(const Purge *purge, TimestampTz cutoff, int64 limit)
{
	AttrNumber	column;
	AttrNumber	locked_until = InvalidAttrNumber;
	ScanKeyData skey;
	IdemIndexScan scan;
	int64		deleted = 0;

	ScanKeyInit(&skey, 1, BTLessEqualStrategyNumber, F_TIMESTAMPTZ_LE,
				TimestampTzGetDatum(cutoff));
	idem_index_scan_begin(&scan, relation_names[purge->relation],
						  purge->index, RowExclusiveLock, &skey, 1);
	column = get_attnum(RelationGetRelid(scan.rel), purge->column);
	if (purge->lease_must_be_over)
		locked_until = get_attnum(RelationGetRelid(scan.rel), "locked_until");
	if (column == InvalidAttrNumber ||
		(purge->lease_must_be_over && locked_until == InvalidAttrNumber))
		elog(ERROR, "relation \"idempotency.%s\" lacks a purge column",
			 relation_names[purge->relation]);
	while (deleted < limit && idem_index_scan_next(&scan))
	{
		TM_FailureData tmfd;
		bool		isnull;
		Datum		value;

		CHECK_FOR_INTERRUPTS();
		/* recheck: the index entry may be of an older version of the row */
		value = slot_getattr(scan.slot, column, &isnull);
		if (isnull || DatumGetTimestampTz(value) > cutoff)
			continue;
		if (purge->lease_must_be_over)
		{
			value = slot_getattr(scan.slot, locked_until, &isnull);
			if (!isnull && DatumGetTimestampTz(value) > cutoff)
				continue;
		}
		/* a row being changed, locked or changed since the snapshot stays */
		if (table_tuple_delete(scan.rel, &scan.slot->tts_tid,
							   GetCurrentCommandId(true), scan.snapshot,
							   InvalidSnapshot, false, &tmfd,
							   false) == TM_Ok)
			deleted++;
	}
	idem_index_scan_end(&scan);
	CommandCounterIncrement();
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
	int			i;

	InitMaterializedSRF(fcinfo, 0);

	for (i = 0; i < (int) lengthof(purges); i++)
	{
		const Purge *purge = &purges[i];
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
