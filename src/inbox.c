/*-------------------------------------------------------------------------
 *
 * inbox.c
 *	  The processed-events inbox: process_once, for one event id and for a
 *	  batch of them.
 *
 * A mark is a row (consumer, event_id, processed_at) of processed_events;
 * marking a pair works as INSERT ... ON CONFLICT DO NOTHING does, without
 * starting the statement.  The transaction takes the lock for creating the
 * pair's row (idem_lock_creation() of writes.c, objsubid 5), looks for the
 * pair in the primary key with a dirty snapshot, waiting for any
 * transaction that is inserting it, and then either
 *
 *	- finds it: a duplicate, nothing written.  Under REPEATABLE READ or
 *	  SERIALIZABLE a mark committed after the transaction's snapshot is a
 *	  serialization failure (40001), as for the statement; or
 *	- inserts the row with the executor's row functions (writes.c), its
 *	  processed_at the transaction's start (the column's default, now()),
 *	  and releases the lock: the uncommitted row makes others wait from
 *	  then on.
 *
 * When the table needs the INSERT statement (see writes.c; or processed_at
 * has a default other than now(), or a unique or exclusion index besides
 * the primary key, which the statement's ON CONFLICT takes as an arbiter
 * too), the row is written by the INSERT ... ON CONFLICT DO NOTHING
 * statement instead, under the same lock.  Either way
 * every call takes the lock, so they never race each other to a unique
 * violation; an INSERT of a pair written into the table by hand while a
 * call marks the same pair can.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/nbtree.h"
#include "access/relscan.h"
#include "access/sysattr.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/primnodes.h"
#include "rewrite/rewriteHandler.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "idempotency.h"
#include "arguments.h"
#include "bookkeeping.h"
#include "relations.h"
#include "writes.h"
#include "pg_compat.h"

/* $1 consumer, $2 event id */
static IdemQuery mark_processed = {
	.sql = "INSERT INTO idempotency.processed_events (consumer, event_id)"
	" VALUES ($1, $2) ON CONFLICT DO NOTHING",
	.nargs = 2, .argtypes = {TEXTOID, TEXTOID}
};

/* processed_events' columns, in the table's order (one layout, always) */
enum
{
	MARK_CONSUMER,
	MARK_EVENT_ID,
	MARK_PROCESSED_AT,
	MARK_NCOLUMNS
};

static const char *const mark_column_names[MARK_NCOLUMNS] = {
	"consumer", "event_id", "processed_at"
};
static const Oid mark_column_types[MARK_NCOLUMNS] = {
	TEXTOID, TEXTOID, TIMESTAMPTZOID
};
static AttrNumber mark_attnums[MARK_NCOLUMNS];
static IdemColumns mark_columns = {
	.ncolumns = MARK_NCOLUMNS,
	.names = mark_column_names,
	.types = mark_column_types,
	.attnums = mark_attnums,
};

/* whether processed_at's default is now(); learnt with mark_columns */
static bool processed_at_is_now;

/*
 * Marking the pairs of one call: the table and its primary key, open; the
 * row inserter, or NULL when the rows take the statement; the row's
 * values and where they go.
 */
typedef struct Marker
{
	Relation	rel;
	Relation	pkey;
	TupleTableSlot *found;		/* a mark found, for its visibility */
	IdemRowInserter *inserter;
	EState	   *after_triggers; /* without the inserter: the statements' */
	Datum	   *values;
	bool	   *isnull;
	bool	   *given;
	AttrNumber	listed[2];		/* mark_processed's column list */
	IdemStatementColumns columns;
} Marker;

/* SQL-callable functions */
PG_FUNCTION_INFO_V1(idempotency_process_once);
PG_FUNCTION_INFO_V1(idempotency_process_once_batch);

/*
 * qsort/bsearch order of text Datums by their bytes (event ids are
 * COLLATE "C").
 */
static int
compare_text_bytes(const void *a, const void *b)
{
	text	   *ta = DatumGetTextPP(*(const Datum *) a);
	text	   *tb = DatumGetTextPP(*(const Datum *) b);
	int			la = VARSIZE_ANY_EXHDR(ta);
	int			lb = VARSIZE_ANY_EXHDR(tb);
	int			c = memcmp(VARDATA_ANY(ta), VARDATA_ANY(tb), Min(la, lb));

	return c != 0 ? c : (la > lb) - (la < lb);
}

/*
 * True when the default of column "attnum" of "rel" is now(), which the
 * row functions can give as the transaction's start without evaluating it.
 */
static bool
default_is_now(Relation rel, AttrNumber attnum)
{
	Node	   *expr = build_column_default(rel, attnum);

	return expr != NULL && IsA(expr, FuncExpr) &&
		((FuncExpr *) expr)->funcid == F_NOW;
}

/*
 * Open processed_events and its primary key for marking, as the extension
 * owner (the caller's current user).
 */
static void
begin_marking(Marker *marker, Datum consumer)
{
	TupleDesc	tupdesc;
	int			natts;

	/* what an INSERT takes; a duplicate is a write too */
	PreventCommandIfReadOnly("idempotency.process_once()");
	marker->rel = idem_table_open("processed_events", RowExclusiveLock);
	marker->pkey = index_open(idem_relation_oid("processed_events_pkey"),
							  RowExclusiveLock);
	if (!idem_learn_columns(&mark_columns, marker->rel))
		processed_at_is_now = default_is_now(marker->rel,
											 mark_attnums[MARK_PROCESSED_AT]);
	tupdesc = RelationGetDescr(marker->rel);
	natts = tupdesc->natts;
	marker->found = table_slot_create(marker->rel, NULL);
	marker->values = palloc(natts * sizeof(Datum));
	marker->isnull = palloc0(natts * sizeof(bool));
	marker->given = palloc0(natts * sizeof(bool));
	marker->values[mark_attnums[MARK_CONSUMER] - 1] = consumer;
	marker->given[mark_attnums[MARK_CONSUMER] - 1] = true;
	marker->given[mark_attnums[MARK_EVENT_ID] - 1] = true;
	marker->values[mark_attnums[MARK_PROCESSED_AT] - 1] =
		TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	marker->given[mark_attnums[MARK_PROCESSED_AT] - 1] = true;
	/* the statement lists consumer and event_id; processed_at is its default */
	marker->listed[0] = mark_attnums[MARK_CONSUMER];
	marker->listed[1] = mark_attnums[MARK_EVENT_ID];
	marker->columns.written = marker->listed;
	marker->columns.nwritten = 2;
	marker->columns.read = NULL;
	marker->columns.nread = 0;

	/*
	 * The mark is looked for before it is written, with the event id given;
	 * the statement's ON CONFLICT checks the row its BEFORE INSERT row
	 * triggers return, which may have another id (a trigger that
	 * normalises ids), and refuses a deferrable primary key as its arbiter
	 * (55000).  Either way the statement writes the mark, so that the
	 * table decides the outcome, whichever path would have been taken.
	 */
	marker->inserter = processed_at_is_now &&
		!(marker->rel->trigdesc != NULL &&
		  marker->rel->trigdesc->trig_insert_before_row) &&
		marker->pkey->rd_index->indimmediate ?
		idem_begin_inserts(marker->rel, marker->given, &marker->columns) : NULL;
	/* the statement's ON CONFLICT would take any other unique index too */
	if (marker->inserter != NULL &&
		!idem_inserts_check_only(marker->inserter, marker->pkey))
	{
		idem_end_inserts(marker->inserter);
		marker->inserter = NULL;
	}

	/*
	 * The statements' AFTER row triggers are queued in a query level of
	 * the call's own and fire at end_marking(), as the inserter's would: a
	 * batch's at its end, as for one INSERT.
	 */
	marker->after_triggers = NULL;
	if (marker->inserter == NULL)
	{
		marker->after_triggers = CreateExecutorState();
		AfterTriggerBeginQuery();
	}
}

static void
end_marking(Marker *marker)
{
	if (marker->inserter != NULL)
		idem_end_inserts(marker->inserter);
	if (marker->after_triggers != NULL)
	{
		AfterTriggerEndQuery(marker->after_triggers);
		ExecCloseResultRelations(marker->after_triggers);
		ExecResetTupleTable(marker->after_triggers->es_tupleTable, false);
		FreeExecutorState(marker->after_triggers);
	}
	ExecDropSingleTupleTableSlot(marker->found);
	index_close(marker->pkey, NoLock);
	table_close(marker->rel, NoLock);
}

/*
 * With the lock for creating the mark of the pair in "skey" (of hash
 * "hash") held, look for the mark with a dirty snapshot, waiting for any
 * other transaction that is inserting it; true when it is there
 * (committed, or this transaction's), in marker->found.  A mark that
 * another transaction is deleting (a purge) is still there: the event was
 * processed, and the call does not wait to learn whether it is forgotten.
 */
static bool
find_mark(Marker *marker, ScanKey skey, uint64 hash)
{
	for (;;)
	{
		SnapshotData dirty;
		IndexScanDesc scan;
		TransactionId writer = InvalidTransactionId;
		bool		found;

		InitDirtySnapshot(dirty);
		scan = idem_index_beginscan(marker->rel, marker->pkey, &dirty, 2, 0);
		index_rescan(scan, skey, 2, NULL, 0);
		found = index_getnext_slot(scan, ForwardScanDirection, marker->found);
		if (found)
			writer = dirty.xmin;
		index_endscan(scan);
		if (!TransactionIdIsValid(writer))
			return found;
		idem_wait_for_creator(hash, IDEM_CREATE_MARK_SPACE, writer);
	}
}

/*
 * Refuse a mark found that this transaction's snapshot does not show,
 * under REPEATABLE READ or SERIALIZABLE: as for INSERT ... ON CONFLICT,
 * deciding without it would be a serialization anomaly.
 */
static void
check_mark_visible(Marker *marker)
{
	Datum		xmin;
	bool		isnull;

	if (!IsolationUsesXactSnapshot() ||
		table_tuple_satisfies_snapshot(marker->rel, marker->found,
									   GetTransactionSnapshot()))
		return;
	xmin = slot_getsysattr(marker->found, MinTransactionIdAttributeNumber,
						   &isnull);
	if (!TransactionIdIsCurrentTransactionId(DatumGetTransactionId(xmin)))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access due to concurrent update")));
}

/*
 * Mark (consumer, "event_id"); true when this call marked it, false for a
 * duplicate (or a row that a trigger of the table skipped).
 */
static bool
mark_event(Marker *marker, Datum event_id)
{
	Datum		consumer = marker->values[mark_attnums[MARK_CONSUMER] - 1];
	text	   *c = DatumGetTextPP(consumer);
	text	   *e = DatumGetTextPP(event_id);
	uint64		hash;
	ScanKeyData skey[2];
	bool		marked = false;

	/* both key columns are text COLLATE "C", as ScanKeyInit() assumes */
	ScanKeyInit(&skey[0], 1, BTEqualStrategyNumber, F_TEXTEQ, consumer);
	ScanKeyInit(&skey[1], 2, BTEqualStrategyNumber, F_TEXTEQ, event_id);
	hash = DatumGetUInt64(hash_any_extended((unsigned char *) VARDATA_ANY(c),
											VARSIZE_ANY_EXHDR(c), 0));
	hash = DatumGetUInt64(hash_any_extended((unsigned char *) VARDATA_ANY(e),
											VARSIZE_ANY_EXHDR(e), hash));

	(void) idem_lock_creation(hash, IDEM_CREATE_MARK_SPACE);
	if (find_mark(marker, skey, hash))
		check_mark_visible(marker);
	else if (marker->inserter != NULL)
	{
		marker->values[mark_attnums[MARK_EVENT_ID] - 1] = event_id;
		marked = idem_insert_next(marker->inserter, marker->values,
								  marker->isnull);
	}
	else
	{
		Datum		args[2] = {consumer, event_id};
		int			rc;

		/* the caller runs as the extension owner (begin_marking()) */
		SPI_connect();
		/* AFTER triggers queued to end_marking()'s query level */
		rc = SPI_execute_snapshot(idem_prepare(&mark_processed), args, NULL,
								  InvalidSnapshot, InvalidSnapshot, false,
								  false, 0);
		if (rc < 0)
			elog(ERROR, "SPI_execute_snapshot failed for \"%s\": %s",
				 mark_processed.sql, SPI_result_code_string(rc));
		marked = SPI_processed == 1;
		SPI_finish();
	}
	idem_unlock_creation(hash, IDEM_CREATE_MARK_SPACE);
	return marked;
}

/*
 * process_once(consumer text, event_id text) RETURNS boolean: true the
 * first time, false for a duplicate.  A concurrent duplicate waits for the
 * first one's transaction and gets false if it commits, true if it aborts.
 * Being a write, it raises 25006 in a read-only transaction, even for a
 * duplicate.
 */
Datum
idempotency_process_once(PG_FUNCTION_ARGS)
{
	Datum		consumer;
	Datum		event_id;
	IdemOwnerRights owner;
	Marker		marker;
	bool		first;

	consumer = PointerGetDatum(idem_arg_name(fcinfo, 0, "consumer", 1,
											 IDEM_MAX_NAME_CHARS));
	event_id = PointerGetDatum(idem_arg_name(fcinfo, 1, "event_id", 1,
											 IDEM_MAX_NAME_CHARS));
	idem_become_owner(&owner);
	begin_marking(&marker, consumer);
	first = mark_event(&marker, event_id);
	end_marking(&marker);
	idem_restore_user(&owner);
	PG_RETURN_BOOL(first);
}

/*
 * process_once(consumer text, event_ids text[]) RETURNS SETOF text: the
 * ids of the array seen for the first time, in the order given; the
 * others (seen before, or earlier in the same array) are left out.  The
 * ids are marked in the order of their bytes, each once, so that two
 * batches sharing ids wait for each other instead of deadlocking, whatever
 * order their callers gave; the rows are written as by one INSERT
 * statement (AFTER triggers fire at the end).
 */
Datum
idempotency_process_once_batch(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		consumer;
	Datum	   *ids;
	Datum	   *sorted;
	bool	   *marked;
	bool		isnull = false;
	IdemOwnerRights owner;
	Marker		marker;
	int			n;
	int			nsorted = 0;
	int			i;

	consumer = PointerGetDatum(idem_arg_name(fcinfo, 0, "consumer", 1,
											 IDEM_MAX_NAME_CHARS));
	n = idem_arg_name_array(fcinfo, 1, "event_ids", 1, IDEM_MAX_NAME_CHARS,
							-1, &ids);
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	/* the ids in byte order, each once */
	sorted = palloc(sizeof(Datum) * Max(n, 1));
	memcpy(sorted, ids, sizeof(Datum) * n);
	qsort(sorted, n, sizeof(Datum), compare_text_bytes);
	for (i = 0; i < n; i++)
		if (nsorted == 0 ||
			compare_text_bytes(&sorted[nsorted - 1], &sorted[i]) != 0)
			sorted[nsorted++] = sorted[i];

	marked = palloc0(sizeof(bool) * Max(nsorted, 1));
	idem_become_owner(&owner);
	begin_marking(&marker, consumer);
	for (i = 0; i < nsorted; i++)
		marked[i] = mark_event(&marker, sorted[i]);
	end_marking(&marker);
	idem_restore_user(&owner);

	/* the ids marked now, in the order of their first occurrence */
	for (i = 0; i < n; i++)
	{
		Datum	   *found = bsearch(&ids[i], sorted, nsorted, sizeof(Datum),
									compare_text_bytes);
		bool	   *first = &marked[found - sorted];

		if (*first)
		{
			*first = false;
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &ids[i],
								 &isnull);
		}
	}
	return (Datum) 0;
}
