/*-------------------------------------------------------------------------
 *
 * cleanup.c
 *	  Expiry: purge_expired_batch(), one batch of deletes of what has
 *	  expired; the procedure purge_expired() repeats it, committing after
 *	  each batch.
 *
 * Each relation is purged by one cached statement per walk:
 *
 *	  DELETE FROM rel WHERE ctid = ANY (ARRAY(SELECT p.ctid FROM rel p
 *		WHERE <may go> AND <not referenced> ORDER BY <time column> LIMIT n
 *		FOR UPDATE OF p SKIP LOCKED))
 *
 * run through SPI as the extension owner, so the executor fires the
 * table's DELETE triggers, applies its rules and checks or cascades the
 * foreign keys that reference it, and refuses in a read-only transaction.
 * A row that a claim, a consumer or a relay is changing or has locked is
 * skipped, not waited for.  What is live is never picked: a key past
 * expires_at whose holder still has a lease, a token neither expired nor
 * consumed, an outbox event not yet published.  The cut-off is one
 * reading of the clock per call, taken when it starts.
 *
 * A batch also drops the answers whose response_expires_at has
 * come, of keys that have not expired (those go whole), with one more
 * walk of the same shape over the table of keys:
 *
 *	  UPDATE idempotency_keys SET response_body = NULL,
 *		response_expires_at = '-infinity' WHERE ctid = ANY (ARRAY(...))
 *
 * which its partial index finds, oldest first; '-infinity' takes the row
 * out of that index and, for claims, still means gone.  An UPDATE keeps
 * every reference to the key, so no <not referenced> applies.  The symbol
 * of 1.5 (idempotency_purge_expired_batch) leaves answers alone, and
 * reports the relations only.
 *
 * <not referenced> leaves out the rows that an application table's
 * foreign key without ON DELETE CASCADE, SET NULL or SET DEFAULT (NO
 * ACTION or RESTRICT, deferrable or not) references: one NOT EXISTS per
 * such key, with the key's own equality operators and the referenced
 * column's collation, as the key's check does.  The keys are those whose
 * DELETE trigger on the relation would fire (a disabled one, or one that
 * session_replication_role silences, does not count); a key on a table
 * the extension owner may not read, or whose row security applies to the
 * owner, is left to the check.  The statements are built again when that
 * set of keys changes, or when one of those tables is altered.  Such rows
 * stay until the references go, at no cost to each purge.
 *
 * A batch whose delete still fails on one row (a user's trigger raises, a
 * foreign key's SET NULL or SET DEFAULT action fails, a reference was
 * added after the statement started) is rolled back to a savepoint and
 * done again row by row, each delete in a subtransaction of its own: the
 * rows that fail stay, are counted in a WARNING, and the others go.  So
 * one such row never stops the scheduled job; it is tried again by every
 * later purge.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/xlog.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/rls.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "idempotency.h"
#include "arguments.h"
#include "bookkeeping.h"
#include "metrics.h"
#include "relations.h"

/*
 * The relations purge_expired_batch() reports on, in its output order,
 * then the answers it drops (not the symbol of 1.5, which leaves them):
 * the rows it returns.
 */
enum
{
	REL_KEYS,
	REL_TOKENS,
	REL_PROCESSED,
	REL_OUTBOX,
	REL_COUNT,
	ROW_ANSWERS = REL_COUNT,
	NROWS
};

#define ANSWERS_ROW_NAME "idempotency_keys.response_body"

/*
 * A purged relation and what its statements were built for: the foreign
 * keys whose referenced rows they leave out, and the tables those keys
 * belong to (a change to one of them makes the statements stale).
 */
typedef struct PurgedRelation
{
	const char *name;			/* in schema idempotency */
	bool		built;			/* its walks' statements are built */
	bool		stale;			/* a referencing table changed since */
	int			nkeys;
	Oid		   *keys;			/* the foreign keys' OIDs, ascending */
	int			ntables;
	Oid		   *tables;			/* their tables */
	MemoryContext cxt;			/* the statements' text and the arrays */
} PurgedRelation;

static PurgedRelation relations[REL_COUNT] = {
	{.name = "idempotency_keys"},
	{.name = "tokens"},
	{.name = "processed_events"},
	{.name = "outbox_events"},
};

/* Shorthands for the qualified operators of the conditions below. */
#define LE " OPERATOR(pg_catalog.<=) "
#define GT " OPERATOR(pg_catalog.>) "
#define PURGE_ARGTYPES {TIMESTAMPTZOID, INT8OID}

/*
 * One walk: the rows "p" of "relation" that may go ("where"), up to the
 * cut-off $1 (now - retention; now when retention is NULL), oldest first
 * ("column"), at most $2 of them, counted in row "row" of the result.
 * They are deleted, or with "set" (dropping answers) updated: "batch" in
 * one statement; "candidates" lists them for the row-by-row fallback,
 * which "one_row" ($1 a ctid) writes one at a time.  All three are built by
 * build_statements().
 */
typedef struct Purge
{
	int			relation;		/* REL_* */
	int			row;			/* the relation's, or ROW_ANSWERS */
	const char *set;			/* NULL: delete */
	const Interval *retention;
	const char *where;
	const char *column;
	IdemQuery	batch;
	IdemQuery	candidates;
	IdemQuery	one_row;
} Purge;

#define WALK(relation, row, set, retention, where, column) \
	{relation, row, set, retention, where, column, \
	 {.nargs = 2, .argtypes = PURGE_ARGTYPES}, \
	 {.nargs = 2, .argtypes = PURGE_ARGTYPES}, \
	 {.nargs = 1, .argtypes = {TIDOID}}}
#define PURGE(relation, retention, where, column) \
	WALK(relation, relation, NULL, retention, where, column)

static Purge purges[] = {
	PURGE(REL_KEYS, NULL,
		  "p.expires_at" LE "$1 AND (p.locked_until IS NULL OR p.locked_until" LE "$1)",
		  "p.expires_at"),
	PURGE(REL_TOKENS, NULL, "p.expires_at" LE "$1", "p.expires_at"),
	PURGE(REL_TOKENS, NULL,
		  "p.consumed_at IS NOT NULL AND p.consumed_at" LE "$1", "p.consumed_at"),
	PURGE(REL_PROCESSED, &idem_processed_retention, "p.processed_at" LE "$1",
		  "p.processed_at"),
	PURGE(REL_OUTBOX, &idem_outbox_retention,
		  "p.published_at IS NOT NULL AND p.published_at" LE "$1", "p.published_at"),
	/* 1.6: answers past response_expires_at, of keys that live on */
	WALK(REL_KEYS, ROW_ANSWERS,
		 "response_body = NULL, response_expires_at = '-infinity'", NULL,
		 "p.response_expires_at" GT "'-infinity' AND p.response_expires_at" LE "$1"
		 " AND p.expires_at" GT "$1", "p.response_expires_at"),
};

/*
 * How deeply purge_expired_batch() is nested in itself (a DELETE trigger
 * that purges): statements are only built again at the outermost level,
 * where none of them runs.
 */
static int	purge_depth = 0;

/*
 * A table that a purged relation's statements read was altered (renamed,
 * a column renamed, its privileges or row security changed) or dropped.
 */
static void
forget_referencing(Datum arg pg_attribute_unused(), Oid relid)
{
	int			i;
	int			j;

	for (i = 0; i < REL_COUNT; i++)
	{
		PurgedRelation *prel = &relations[i];

		if (relid == InvalidOid)
			prel->stale = true;
		for (j = 0; j < prel->ntables; j++)
			if (prel->tables[j] == relid)
				prel->stale = true;
	}
}

static int
oid_order(const void *a, const void *b)
{
	Oid			x = *(const Oid *) a;
	Oid			y = *(const Oid *) b;

	return (x > y) - (x < y);
}

/*
 * The foreign keys that keep a referenced row of "rel": NO ACTION or
 * RESTRICT, whose DELETE trigger on "rel" fires in this session.  Their
 * OIDs, ascending, in *keys; returns their number.
 */
static int
restricting_keys(Relation rel, Oid **keys)
{
	TriggerDesc *trigdesc = rel->trigdesc;
	char		silent = SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA ?
		TRIGGER_FIRES_ON_ORIGIN : TRIGGER_FIRES_ON_REPLICA;
	int			n = 0;
	int			i;

	*keys = NULL;
	if (trigdesc == NULL)
		return 0;
	*keys = palloc(sizeof(Oid) * trigdesc->numtriggers);
	for (i = 0; i < trigdesc->numtriggers; i++)
	{
		Trigger    *trigger = &trigdesc->triggers[i];

		if ((trigger->tgfoid == F_RI_FKEY_NOACTION_DEL ||
			 trigger->tgfoid == F_RI_FKEY_RESTRICT_DEL) &&
			trigger->tgenabled != TRIGGER_DISABLED &&
			trigger->tgenabled != silent)
			(*keys)[n++] = trigger->tgconstraint;
	}
	qsort(*keys, n, sizeof(Oid), oid_order);
	return n;
}

/*
 * OPERATOR(schema.name) of operator "opno", for SQL text.
 */
static char *
operator_sql(Oid opno)
{
	HeapTuple	tuple = SearchSysCache1(OPEROID, ObjectIdGetDatum(opno));
	Form_pg_operator oper;
	char	   *result;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for operator %u", opno);
	oper = (Form_pg_operator) GETSTRUCT(tuple);
	result = psprintf("OPERATOR(%s.%s)",
					  quote_identifier(get_namespace_name(oper->oprnamespace)),
					  NameStr(oper->oprname));
	ReleaseSysCache(tuple);
	return result;
}

/*
 * COLLATE schema.name of collation "collid", for SQL text.
 */
static char *
collation_sql(Oid collid)
{
	HeapTuple	tuple = SearchSysCache1(COLLOID, ObjectIdGetDatum(collid));
	Form_pg_collation coll;
	char	   *result;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for collation %u", collid);
	coll = (Form_pg_collation) GETSTRUCT(tuple);
	result = psprintf(" COLLATE %s",
					  quote_qualified_identifier(get_namespace_name(coll->collnamespace),
												 NameStr(coll->collname)));
	ReleaseSysCache(tuple);
	return result;
}

/*
 * Append " AND NOT EXISTS (...)", the rows "p" of "relid" that foreign key
 * "conoid" does not reference, to "buf", and add the key's table to the
 * tables of "prel"; or append nothing when the key is gone, or when the
 * extension owner (the current user) may not read its table (or reach its
 * schema) or is subject to its row security, and leave the key to its
 * check.  The condition is the key's check: the key's equality operators,
 * the referenced column's collation where the two differ, ONLY the table
 * unless it is partitioned.
 */
static void
append_unreferenced(StringInfo buf, PurgedRelation *prel, Oid relid,
					Oid conoid)
{
	HeapTuple	tuple = SearchSysCache1(CONSTROID, ObjectIdGetDatum(conoid));
	Form_pg_constraint con;
	int			nkeys;
	AttrNumber	fkcols[INDEX_MAX_KEYS];
	AttrNumber	pkcols[INDEX_MAX_KEYS];
	Oid			eqops[INDEX_MAX_KEYS];
	Oid			table;
	int			i;

	if (!HeapTupleIsValid(tuple))
		return;
	con = (Form_pg_constraint) GETSTRUCT(tuple);
	table = con->conrelid;
	/* from here on, a change to the table makes the statements stale */
	prel->tables[prel->ntables++] = table;
	if (con->contype != CONSTRAINT_FOREIGN || con->confrelid != relid ||
		!DatumGetBool(DirectFunctionCall2(has_schema_privilege_id,
										  ObjectIdGetDatum(get_rel_namespace(table)),
										  CStringGetTextDatum("USAGE"))) ||
		pg_class_aclcheck(table, GetUserId(), ACL_SELECT) != ACLCHECK_OK ||
		check_enable_rls(table, InvalidOid, true) == RLS_ENABLED)
	{
		ReleaseSysCache(tuple);
		return;
	}
	DeconstructFkConstraintRow(tuple, &nkeys, fkcols, pkcols, eqops,
							   NULL, NULL, NULL, NULL);
	ReleaseSysCache(tuple);

	appendStringInfo(buf, " AND NOT EXISTS (SELECT 1 FROM %s%s x WHERE ",
					 get_rel_relkind(table) == RELKIND_PARTITIONED_TABLE ? "" : "ONLY ",
					 idem_quote_table(table));
	for (i = 0; i < nkeys; i++)
	{
		Oid			type;
		int32		typmod;
		Oid			pkcoll;
		Oid			fkcoll;

		get_atttypetypmodcoll(relid, pkcols[i], &type, &typmod, &pkcoll);
		get_atttypetypmodcoll(table, fkcols[i], &type, &typmod, &fkcoll);
		appendStringInfo(buf, "%sp.%s %s x.%s%s",
						 i > 0 ? " AND " : "",
						 quote_identifier(get_attname(relid, pkcols[i], false)),
						 operator_sql(eqops[i]),
						 quote_identifier(get_attname(table, fkcols[i], false)),
						 OidIsValid(pkcoll) && pkcoll != fkcoll ?
						 collation_sql(pkcoll) : "");
	}
	appendStringInfoChar(buf, ')');
}

/*
 * Build the statements of the walks of "prel", relation "rel", for the
 * foreign keys "keys".
 */
static void
build_statements(PurgedRelation *prel, Relation rel, int nkeys, Oid *keys)
{
	MemoryContext old;
	StringInfoData unreferenced;
	int			i;

	if (prel->cxt == NULL)
		prel->cxt = AllocSetContextCreate(TopMemoryContext,
										  "idempotency purge statements",
										  ALLOCSET_SMALL_SIZES);
	for (i = 0; i < (int) lengthof(purges); i++)
	{
		Purge	   *purge = &purges[i];

		if (purge->relation != prel - relations)
			continue;
		if (purge->batch.plan != NULL)
			SPI_freeplan(purge->batch.plan);
		if (purge->candidates.plan != NULL)
			SPI_freeplan(purge->candidates.plan);
		if (purge->one_row.plan != NULL)
			SPI_freeplan(purge->one_row.plan);
		purge->batch.plan = purge->candidates.plan = purge->one_row.plan = NULL;
		purge->batch.sql = purge->candidates.sql = purge->one_row.sql = NULL;
	}
	prel->built = false;
	prel->ntables = 0;
	MemoryContextReset(prel->cxt);

	old = MemoryContextSwitchTo(prel->cxt);
	prel->tables = palloc(sizeof(Oid) * Max(nkeys, 1));
	prel->stale = false;
	initStringInfo(&unreferenced);
	for (i = 0; i < nkeys; i++)
		append_unreferenced(&unreferenced, prel, RelationGetRelid(rel), keys[i]);
	for (i = 0; i < (int) lengthof(purges); i++)
	{
		Purge	   *purge = &purges[i];
		const char *table = quote_identifier(prel->name);
		char	   *write;

		if (purge->relation != prel - relations)
			continue;
		/* an update keeps the row, and with it every reference to it */
		purge->candidates.sql =
			psprintf("SELECT p.ctid FROM idempotency.%s p WHERE %s%s ORDER BY %s"
					 " LIMIT $2 FOR UPDATE OF p SKIP LOCKED",
					 table, purge->where,
					 purge->set ? "" : unreferenced.data, purge->column);
		write = purge->set ?
			psprintf("UPDATE idempotency.%s SET %s", table, purge->set) :
			psprintf("DELETE FROM idempotency.%s", table);
		purge->batch.sql =
			psprintf("%s WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY(%s))",
					 write, purge->candidates.sql);
		purge->one_row.sql =
			psprintf("%s WHERE ctid OPERATOR(pg_catalog.=) $1", write);
	}
	prel->keys = palloc(sizeof(Oid) * Max(nkeys, 1));
	if (nkeys > 0)
		memcpy(prel->keys, keys, sizeof(Oid) * nkeys);
	prel->nkeys = nkeys;
	MemoryContextSwitchTo(old);
	prel->built = true;
}

/*
 * Make the statements of "prel" match the foreign keys that reference it
 * now, building them again when they changed.
 */
static void
prepare_relation(PurgedRelation *prel)
{
	static bool callback_set = false;
	Relation	rel;
	Oid		   *keys;
	int			nkeys;

	if (!callback_set)
	{
		idem_on_relcache_change(forget_referencing);
		callback_set = true;
	}
	rel = table_open(idem_relation_oid(prel->name), AccessShareLock);
	nkeys = restricting_keys(rel, &keys);
	if (!prel->built ||
		(purge_depth == 1 &&
		 (prel->stale || nkeys != prel->nkeys ||
		  (nkeys > 0 && memcmp(keys, prel->keys, sizeof(Oid) * nkeys) != 0))))
		build_statements(prel, rel, nkeys, keys);
	table_close(rel, NoLock);
	if (keys != NULL)
		pfree(keys);
}

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
			if (run_in_subtransaction(&purge->one_row, &ctid, &error) < 0)
				skipped++;
			else
				deleted++;
		}
		SPI_freetuptable(rows);
	}
	SPI_cursor_close(portal);
	/* every skipped row left its error; the first one is kept */
	if (skipped > 0 && error != NULL && purge->set != NULL)
		ereport(WARNING,
				(errmsg_plural("purge kept %lld answer past its response_expires_at that could not be dropped",
							   "purge kept %lld answers past their response_expires_at that could not be dropped",
							   skipped, (long long) skipped),
				 errdetail("The first row failed with: %s", error->message),
				 errhint("A trigger on \"idempotency.%s\" that raises an error keeps them; every later purge tries them again.",
						 relations[purge->relation].name)));
	else if (skipped > 0 && error != NULL)
		ereport(WARNING,
				(errmsg_plural("purge kept %lld row of \"idempotency.%s\" that could not be deleted",
							   "purge kept %lld rows of \"idempotency.%s\" that could not be deleted",
							   skipped, (long long) skipped,
							   relations[purge->relation].name),
				 errdetail("The first row failed with: %s", error->message),
				 errhint("A trigger that raises an error, or a foreign key whose ON DELETE action fails, keeps them; every later purge tries them again.")));
	if (error != NULL)
		FreeErrorData(error);
	return deleted;
}

/*
 * Delete (or update) at most "limit" rows of one walk; returns how many
 * went.
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

/*
 * One batch: at most "batch_size" rows of each of the first "nrows" rows
 * of the result, up to the clock reading "now"; how many went into
 * deleted[].  Runs as the owner.
 */
static void
purge_batch(TimestampTz now, int32 batch_size, int nrows, int64 *deleted)
{
	int			i;

	for (i = 0; i < REL_COUNT; i++)
		prepare_relation(&relations[i]);
	for (i = 0; i < (int) lengthof(purges); i++)
	{
		Purge	   *purge = &purges[i];
		int64		room;
		TimestampTz cutoff = now;

		if (purge->row >= nrows)
			continue;
		room = batch_size - deleted[purge->row];
		if (room <= 0)
			continue;
		if (purge->retention != NULL)
			cutoff = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
															 TimestampTzGetDatum(now),
															 IntervalPGetDatum(purge->retention)));
		deleted[purge->row] += purge_walk(purge, cutoff, room);
	}
}

/* SQL-callable functions */
PG_FUNCTION_INFO_V1(idempotency_purge_expired_batch);
PG_FUNCTION_INFO_V1(idempotency_purge_expired_batch_1_6);

/*
 * purge_expired_batch(batch_size int) RETURNS TABLE(relation text,
 * deleted bigint): one batch in the caller's transaction, at most
 * batch_size rows per relation, then (1.6: "nrows" is NROWS) at most
 * batch_size answers dropped.
 */
static Datum
purge_expired_batch(FunctionCallInfo fcinfo, int nrows)
{
	int32		batch_size = idem_arg_positive_int(fcinfo, 0, "batch_size");
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now;
	int64		deleted[NROWS] = {0};
	IdemOwnerRights owner;
	int			i;

	PreventCommandIfReadOnly("idempotency.purge_expired_batch()");
	InitMaterializedSRF(fcinfo, 0);

	now = GetCurrentTimestamp();
	idem_become_owner(&owner);
	purge_depth++;
	PG_TRY();
	{
		purge_batch(now, batch_size, nrows, deleted);
	}
	PG_FINALLY();
	{
		purge_depth--;
	}
	PG_END_TRY();
	idem_restore_user(&owner);
	/* in the row of scope NULL: the delete does not learn the scopes */
	idem_metrics_count(NULL, IDEM_OUTCOME_PURGED, deleted[REL_KEYS]);

	/*
	 * Nothing to delete: purge_expired() is done, and it committed its
	 * earlier batches without waiting for their WAL flush.  This session's
	 * last commit is made durable here, so that what the procedure deleted
	 * stays deleted after a crash once it returns (a no-op when flushed).
	 */
	for (i = 0; i < nrows && deleted[i] == 0; i++)
		;
	if (i == nrows && !XLogRecPtrIsInvalid(XactLastCommitEnd))
		XLogFlush(XactLastCommitEnd);

	for (i = 0; i < nrows; i++)
	{
		Datum		row[2];
		bool		nulls[2] = {false, false};

		row[0] = CStringGetTextDatum(i == ROW_ANSWERS ? ANSWERS_ROW_NAME :
									 relations[i].name);
		row[1] = Int64GetDatum(deleted[i]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, row, nulls);
	}
	return (Datum) 0;
}

Datum
idempotency_purge_expired_batch(PG_FUNCTION_ARGS)
{
	return purge_expired_batch(fcinfo, REL_COUNT);
}

Datum
idempotency_purge_expired_batch_1_6(PG_FUNCTION_ARGS)
{
	return purge_expired_batch(fcinfo, NROWS);
}
