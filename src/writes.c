/*-------------------------------------------------------------------------
 *
 * writes.c
 *	  Inserting or updating one row of the extension's own tables with the
 *	  executor's row primitives, as logical replication's apply worker does
 *	  (ExecSimpleRelationInsert() and ExecSimpleRelationUpdate() of
 *	  execReplication.c, in an executor state of our own), instead of
 *	  starting a prepared INSERT or UPDATE through SPI.  The row goes
 *	  through the same code as the statement's: BEFORE and AFTER row
 *	  triggers, generated columns, NOT NULL and CHECK constraints, index
 *	  entries (indexes still being built, HOT updates, unique and exclusion
 *	  checks, deferred ones included), foreign keys and WAL; only the
 *	  plan's start-up is saved.  An update finds its row with a direct
 *	  index scan and locks it as the statement does (lock_row_for_update()).
 *	  What the plan would compute once per table (the defaults, and the
 *	  indexes as ExecOpenIndices() finds them) is kept per session and
 *	  table, and forgotten on the table's or an index's invalidation.
 *
 * The privileges are checked as the statement's start checks them: the
 * executor's permission check (ExecCheckPermissions(), which ends with
 * ExecutorCheckPerms_hook: sepgsql, pgaudit's object audit) of the range
 * table the statement would have, with the privileges and the columns it
 * needs (write_range_table()), once per write: an INSERT's before its
 * first row (the inserts of a call being one statement), an UPDATE's
 * before it looks for its row.
 *
 * An INSERT's left-out columns get their defaults (identity included),
 * evaluated for each row as the apply worker fills the columns that a
 * publisher did not send (slot_fill_defaults() of worker.c), and NULL
 * otherwise.
 *
 * Only a row that the statement would write in exactly that way is
 * written here.  The table must be a plain table without rules, row
 * security, statement-level triggers or transition tables for the
 * command; no column may be of a domain type (the statement checks the
 * domain's constraints on the values it writes); an UPDATE's table must
 * have no stored generated column; and a statement must be running (see
 * table_is_plain()).  Otherwise nothing is written and the caller runs its
 * statement through SPI, which handles all of those.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/sysattr.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_class.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteHandler.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "tcop/pquery.h"
#include "utils/snapmgr.h"

#include "idempotency.h"
#include "relations.h"
#include "writes.h"
#include "pg_compat.h"

/*
 * True when "rel" is a plain table that no statement rewrites or filters
 * (no rules, no row security), and a statement runs: what both kinds of
 * writes below need first.  The permission check's hooks expect to be
 * called within a statement (pgaudit's object audit needs the statement it
 * started; 1.7 and 17 crash without one), which a call outside any does
 * not have: a fast-path function call, or a trigger that fires at an
 * implicit commit or in logical replication's apply worker.  There the
 * statement of the write starts one.
 */
static bool
table_is_plain(Relation rel)
{
	/* idempotency.direct_writes off: every write runs its statement */
	if (!idem_direct_writes)
		return false;
	return ActivePortal != NULL &&
		rel->rd_rel->relkind == RELKIND_RELATION &&
		!rel->rd_rel->relhasrules && !rel->rd_rel->relrowsecurity;
}

/*
 * True when "type" is a domain.  Types made by initdb's bootstrap (OIDs
 * below FirstGenbkiObjectId) never are, which spares the usual columns a
 * syscache probe.
 */
static bool
type_is_domain(Oid type)
{
	return type >= FirstGenbkiObjectId && get_typtype(type) == TYPTYPE_DOMAIN;
}

/*
 * True when an INSERT of "rel" would do nothing that
 * ExecSimpleRelationInsert(), with the defaults of the columns left out
 * filled in, leaves out.
 */
static bool
insert_is_plain(Relation rel)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	TriggerDesc *triggers = rel->trigdesc;
	int			i;

	if (!table_is_plain(rel))
		return false;
	if (triggers != NULL &&
		(triggers->trig_insert_before_statement ||
		 triggers->trig_insert_after_statement ||
		 triggers->trig_insert_instead_row ||
		 triggers->trig_insert_new_table))
		return false;
	for (i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(tupdesc, i);

		if (!attr->attisdropped && type_is_domain(attr->atttypid))
			return false;
	}
	return true;
}

/*
 * True when an UPDATE of "rel" would do nothing that
 * ExecSimpleRelationUpdate() leaves out.  Stored generated columns are
 * left to the statement: PostgreSQL 15 learns which of them an update
 * recomputes from the rewriter.
 */
static bool
update_is_plain(Relation rel)
{
	TriggerDesc *triggers = rel->trigdesc;

	if (!table_is_plain(rel))
		return false;
	if (rel->rd_att->constr && rel->rd_att->constr->has_generated_stored)
		return false;
	return triggers == NULL ||
		!(triggers->trig_update_before_statement ||
		  triggers->trig_update_after_statement ||
		  triggers->trig_update_instead_row ||
		  triggers->trig_update_old_table ||
		  triggers->trig_update_new_table);
}

/*
 * What writing into a table needs that the statement's plan would compute
 * once and the catalogs rarely change, kept per session and table instead
 * of being rebuilt for every write: the defaults of its columns, planned
 * (build_column_default() and expression_planner(): finding an identity's
 * sequence scans pg_depend and a default is parsed from its text), and
 * its indexes as ExecOpenIndices() would find them (their IndexInfo, and
 * the predicates of partial indexes planned as ExecPrepareQual() plans
 * them).  Together these cost more than the row's insert.
 *
 * An entry is forgotten when the relcache entry of its table or of one of
 * its indexes is invalidated (a default, an identity, the columns, the
 * indexes or an index's state changed: CREATE INDEX CONCURRENTLY marks its
 * index ready that way), and every entry when a function is (a planned
 * default may have inlined one), as the plan cache would.  Invalidations
 * arrive when a lock is taken, so an entry is only trusted once the
 * table's and its indexes' locks are held (open_indexes()).
 *
 * Writers use the entry's memory without copying it, and count themselves
 * in the entry while they do (its users, in the transaction users_lxid).
 * A rebuild frees the old memory at once when no writer uses it; an entry
 * rebuilt while a write is under way (a trigger of the write may change
 * the table) gets new memory, and the old is freed at the end of the
 * transaction, by which time no write can use it.  A writer that fails
 * leaves its count behind until the transaction ends: the old memory then
 * waits for the transaction's end too.
 */
typedef struct TableCache
{
	Oid			relid;			/* InvalidOid: unused */
	bool		valid;			/* no invalidation since the build began */
	bool		built;			/* the build completed (did not fail) */
	int			users;			/* writers using cxt, in transaction users_lxid */
	LocalTransactionId users_lxid;
	int			natts;
	int			nindexes;
	MemoryContext cxt;
	Expr	  **defaults;		/* per attribute, planned; NULL: none */
	Oid		   *index_oids;
	IndexInfo **index_infos;	/* as BuildIndexInfo() gives them */
	List	  **predicates;		/* per index, planned; NIL: not partial */
	List	   *range_tables;	/* of WriteRangeTable, as they are asked for */
} TableCache;

#define MAX_TABLE_CACHES 8
static TableCache table_caches[MAX_TABLE_CACHES];
static int	table_caches_evict = 0;
static bool table_caches_callbacks = false;

static void
forget_table_caches(Datum arg pg_attribute_unused(), Oid relid)
{
	int			i,
				j;

	for (i = 0; i < MAX_TABLE_CACHES; i++)
	{
		TableCache *entry = &table_caches[i];

		if (!entry->valid)
			continue;
		if (relid == InvalidOid || entry->relid == relid)
			entry->valid = false;
		for (j = 0; j < entry->nindexes && entry->valid; j++)
			if (entry->index_oids[j] == relid)
				entry->valid = false;
	}
}

static void
forget_all_table_caches(Datum arg, int cacheid pg_attribute_unused(),
						uint32 hashvalue pg_attribute_unused())
{
	forget_table_caches(arg, InvalidOid);
}

/*
 * Fill "entry" for "rel" in its (new) memory.  The indexes are opened, and
 * left locked, as ExecOpenIndices() opens them.
 */
static void
build_table_cache(TableCache *entry, Relation rel)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	List	   *indexes = NIL;
	ListCell   *lc;
	int			i;

	entry->natts = tupdesc->natts;
	entry->defaults = palloc0(sizeof(Expr *) * tupdesc->natts);
	for (i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(tupdesc, i);
		Node	   *expr;

		/* generated columns are computed by ExecSimpleRelationInsert() */
		if (attr->attisdropped || attr->attgenerated ||
			!(attr->atthasdef || attr->attidentity))
			continue;
		expr = build_column_default(rel, i + 1);
		if (expr != NULL)
			entry->defaults[i] = expression_planner((Expr *) expr);
	}

	if (RelationGetForm(rel)->relhasindex)
		indexes = RelationGetIndexList(rel);
	entry->index_oids = palloc(sizeof(Oid) * list_length(indexes));
	entry->index_infos = palloc(sizeof(IndexInfo *) * list_length(indexes));
	entry->predicates = palloc(sizeof(List *) * list_length(indexes));
	i = 0;
	foreach(lc, indexes)
	{
		Relation	index;
		IndexInfo  *info;

		entry->index_oids[i] = lfirst_oid(lc);
		/* seen by forget_table_caches() from here on */
		entry->nindexes = i + 1;
		index = index_open(entry->index_oids[i], RowExclusiveLock);
		info = BuildIndexInfo(index);
		entry->index_infos[i] = info;
		entry->predicates[i] = info->ii_Predicate == NIL ? NIL :
			(List *) expression_planner((Expr *) info->ii_Predicate);
		index_close(index, NoLock);
		i++;
	}
}

/*
 * The cache entry of "rel", which the caller has opened (and so locked),
 * built now unless known.
 */
static TableCache *
table_cache_of(Relation rel)
{
	Oid			relid = RelationGetRelid(rel);
	TableCache *entry = NULL;
	int			i;

	for (i = 0; i < MAX_TABLE_CACHES && entry == NULL; i++)
		if (table_caches[i].relid == relid)
			entry = &table_caches[i];
	if (entry != NULL && entry->valid && entry->built)
		return entry;
	if (!table_caches_callbacks)
	{
		idem_on_relcache_change(forget_table_caches);
		CacheRegisterSyscacheCallback(PROCOID, forget_all_table_caches,
									  (Datum) 0);
		table_caches_callbacks = true;
	}
	for (i = 0; i < MAX_TABLE_CACHES && entry == NULL; i++)
		if (!OidIsValid(table_caches[i].relid))
			entry = &table_caches[i];
	if (entry == NULL)
	{
		entry = &table_caches[table_caches_evict];
		table_caches_evict = (table_caches_evict + 1) % MAX_TABLE_CACHES;
	}
	do
	{
		MemoryContext caller;

		/* a write under way may still use the old memory */
		if (entry->cxt != NULL)
		{
			if (entry->users > 0 && entry->users_lxid == IDEM_MY_LXID)
				MemoryContextSetParent(entry->cxt, TopTransactionContext);
			else
				MemoryContextDelete(entry->cxt);
			entry->cxt = NULL;
		}
		entry->users = 0;
		entry->cxt = AllocSetContextCreate(CacheMemoryContext,
										   "idempotency table cache",
										   ALLOCSET_SMALL_SIZES);
		entry->relid = relid;
		entry->nindexes = 0;
		entry->range_tables = NIL;
		entry->built = false;
		/* set first: an invalidation processed below clears it again */
		entry->valid = true;
		caller = MemoryContextSwitchTo(entry->cxt);
		build_table_cache(entry, rel);
		MemoryContextSwitchTo(caller);
		entry->built = true;
	} while (!entry->valid);
	return entry;
}

/*
 * Open the indexes of the writer's table as ExecOpenIndices() does, with
 * their IndexInfo from the table's cache entry: each writer gets its own
 * copy, whose lazily built parts (expression states, the access method's
 * insert state) live in the writer's memory, and its partial indexes'
 * predicates ready to check.  Returns the entry.
 */
static TableCache *
open_indexes(ResultRelInfo *result_rel)
{
	Relation	rel = result_rel->ri_RelationDesc;
	TableCache *entry;
	Relation   *indexes;
	IndexInfo **infos;
	int			i;

	for (;;)
	{
		entry = table_cache_of(rel);
		indexes = palloc(sizeof(Relation) * Max(entry->nindexes, 1));
		for (i = 0; i < entry->nindexes; i++)
			indexes[i] = index_open(entry->index_oids[i], RowExclusiveLock);
		if (entry->valid)
			break;
		/* an invalidation came with an index's lock: look again */
		for (i = 0; i < entry->nindexes; i++)
			index_close(indexes[i], NoLock);
		pfree(indexes);
	}

	result_rel->ri_NumIndices = entry->nindexes;
	if (entry->nindexes == 0)
		return entry;
	infos = palloc(sizeof(IndexInfo *) * entry->nindexes);
	for (i = 0; i < entry->nindexes; i++)
	{
		infos[i] = makeNode(IndexInfo);
		memcpy(infos[i], entry->index_infos[i], sizeof(IndexInfo));
		infos[i]->ii_ExpressionsState = NIL;
		infos[i]->ii_PredicateState = ExecInitQual(entry->predicates[i], NULL);
		infos[i]->ii_AmCache = NULL;
		infos[i]->ii_Context = CurrentMemoryContext;
	}
	result_rel->ri_IndexRelationDescs = indexes;
	result_rel->ri_IndexRelationInfo = infos;
	return entry;
}

/*
 * The range table of one statement that writes a table (see
 * write_range_table()), and what it was built for.
 */
typedef struct WriteRangeTable
{
	CmdType		command;
	int			nwritten;
	int			nread;
	AttrNumber *attnums;		/* the written columns, then the read ones */
	List	   *rtable;
	List	   *perminfos;
} WriteRangeTable;

/*
 * The range table of the statement "command" (CMD_INSERT or CMD_UPDATE) of
 * "rel", which the caller has opened, that names "columns": it needs the
 * command's privilege, on the columns written, and SELECT on the columns
 * read, as the parser marks them.  Built once per table and statement, in
 * the memory of the table's cache entry: what the permission check's hooks
 * keep of it stays valid until the end of the transaction (pgaudit's
 * log_rows keeps it until the calling statement's end).
 */
static WriteRangeTable *
write_range_table(Relation rel, CmdType command,
				  const IdemStatementColumns *columns)
{
	TableCache *cache = table_cache_of(rel);
	int			n = columns->nwritten + columns->nread;
	Bitmapset  *written = NULL;
	Bitmapset  *read = NULL;
	WriteRangeTable *table;
	MemoryContext caller;
	ListCell   *lc;
	int			i;

	foreach(lc, cache->range_tables)
	{
		table = lfirst(lc);
		if (table->command == command &&
			table->nwritten == columns->nwritten &&
			table->nread == columns->nread &&
			memcmp(table->attnums, columns->written,
				   sizeof(AttrNumber) * columns->nwritten) == 0 &&
			memcmp(table->attnums + columns->nwritten, columns->read,
				   sizeof(AttrNumber) * columns->nread) == 0)
			return table;
	}

	caller = MemoryContextSwitchTo(cache->cxt);
	table = palloc(sizeof(WriteRangeTable));
	table->command = command;
	table->nwritten = columns->nwritten;
	table->nread = columns->nread;
	table->attnums = palloc(sizeof(AttrNumber) * Max(n, 1));
	for (i = 0; i < columns->nwritten; i++)
	{
		table->attnums[i] = columns->written[i];
		written = bms_add_member(written, columns->written[i] -
								 FirstLowInvalidHeapAttributeNumber);
	}
	for (i = 0; i < columns->nread; i++)
	{
		table->attnums[columns->nwritten + i] = columns->read[i];
		read = bms_add_member(read, columns->read[i] -
							  FirstLowInvalidHeapAttributeNumber);
	}
	idem_make_range_table(rel,
						  (command == CMD_INSERT ? ACL_INSERT : ACL_UPDATE) |
						  (read != NULL ? ACL_SELECT : 0),
						  read,
						  command == CMD_INSERT ? written : NULL,
						  command == CMD_UPDATE ? written : NULL,
						  &table->rtable, &table->perminfos);
	cache->range_tables = lappend(cache->range_tables, table);
	MemoryContextSwitchTo(caller);
	return table;
}

/*
 * An executor state for writing rows of one relation, as the apply worker
 * of logical replication sets one up: the relation as the only entry of
 * the range table and its result relation, with its indexes open, seeing
 * "snapshot" and with the AFTER triggers of a query of its own.  Its
 * memory is the executor state's.
 */
typedef struct RowWriter
{
	EState	   *estate;
	ResultRelInfo *result_rel;
	TableCache *cache;			/* the entry whose memory it uses, */
	MemoryContext cache_cxt;	/* which is this one */
} RowWriter;

/* Count "writer" among the users of "cache"'s memory. */
static void
use_table_cache(RowWriter *writer, TableCache *cache)
{
	if (cache->users_lxid != IDEM_MY_LXID)
	{
		cache->users = 0;
		cache->users_lxid = IDEM_MY_LXID;
	}
	cache->users++;
	writer->cache = cache;
	writer->cache_cxt = cache->cxt;
}

/* The writer is done with its entry's memory. */
static void
release_table_cache(RowWriter *writer)
{
	TableCache *cache = writer->cache;

	/* an entry rebuilt meanwhile counts the users of its new memory */
	if (cache->cxt == writer->cache_cxt && cache->users_lxid == IDEM_MY_LXID &&
		cache->users > 0)
		cache->users--;
}

/*
 * Set up "writer" for rel, with the range table of its statement (the
 * columns an update sets are what UPDATE OF triggers and the lock mode
 * look at).  What the writes allocate belongs in the executor state's
 * es_query_cxt, as for a statement.  Returns the table's cache entry, for
 * use before any other write.
 */
static TableCache *
begin_row_writer(RowWriter *writer, Relation rel, Snapshot snapshot,
				 WriteRangeTable *range_table)
{
	EState	   *estate = CreateExecutorState();
	MemoryContext caller = MemoryContextSwitchTo(estate->es_query_cxt);
	TableCache *cache;

	idem_exec_init_range_table(estate, range_table->rtable,
							   range_table->perminfos);
	writer->result_rel = makeNode(ResultRelInfo);
	InitResultRelInfo(writer->result_rel, rel, 1, NULL, 0);
	/* where AFTER triggers look for it (ExecGetTriggerResultRel()) */
	estate->es_opened_result_relations =
		lappend(estate->es_opened_result_relations, writer->result_rel);
	estate->es_snapshot = snapshot;
	estate->es_output_cid = GetCurrentCommandId(true);
	cache = open_indexes(writer->result_rel);
	use_table_cache(writer, cache);
	writer->estate = estate;
	AfterTriggerBeginQuery();
	MemoryContextSwitchTo(caller);
	return cache;
}

/*
 * Fire the AFTER triggers queued by the writes and free the executor
 * state.
 */
static void
end_row_writer(RowWriter *writer)
{
	MemoryContext caller = MemoryContextSwitchTo(writer->estate->es_query_cxt);

	AfterTriggerEndQuery(writer->estate);
	ExecCloseIndices(writer->result_rel);
	ExecResetTupleTable(writer->estate->es_tupleTable, false);
	MemoryContextSwitchTo(caller);
	FreeExecutorState(writer->estate);
	release_table_cache(writer);
}

/*
 * The locks for creating a row that this transaction holds, for
 * idem_holds_creation_lock(); back to zero when the transaction ends,
 * which releases them.  (A subtransaction's abort releases its locks too,
 * and leaves the count too high until the transaction ends.)
 */
static int	creation_locks_held = 0;
static bool creation_callback_registered = false;

static void
forget_creation_locks(XactEvent event, void *arg pg_attribute_unused())
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
		creation_locks_held = 0;
}

/*
 * The lock for creating the row of a unique key whose hash is "hash", in
 * "space" (see writes.h).  Without a statement's ON CONFLICT, a
 * transaction that finds no row and inserts one would fail with a unique
 * violation if another inserted the same key in between; so every creator
 * takes this lock, then looks for the key with a dirty snapshot (waiting
 * for a transaction that writes it), then inserts it, and releases the
 * lock as soon as the row is written, not at commit: from then on the row
 * itself makes concurrent creators wait, as for any unique index.  A
 * transaction therefore holds at most one such lock at a time.
 *
 * Returns true when another transaction held the lock and this one
 * waited.
 */
bool
idem_lock_creation(uint64 hash, uint16 space)
{
	LOCKTAG		tag;
	bool		waited = false;

	if (!creation_callback_registered)
	{
		RegisterXactCallback(forget_creation_locks, NULL);
		creation_callback_registered = true;
	}
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (hash >> 32),
						 (uint32) hash, space);
	if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
	{
		(void) LockAcquire(&tag, ExclusiveLock, false, false);
		waited = true;
	}
	creation_locks_held++;
	return waited;
}

void
idem_unlock_creation(uint64 hash, uint16 space)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (hash >> 32),
						 (uint32) hash, space);
	if (LockRelease(&tag, ExclusiveLock, false) && creation_locks_held > 0)
		creation_locks_held--;
}

/*
 * True while this transaction holds a lock for creating a row: another
 * transaction may be waiting for it (execute() keeps its key's while its
 * statement runs).
 */
bool
idem_holds_creation_lock(void)
{
	return creation_locks_held > 0;
}

/*
 * With the lock for creating the key (hash, space) held: wait for
 * transaction "xid", which has written an uncommitted row of the key, and
 * take the lock again.  The lock is not held while waiting: the writer may
 * need it again (to look for the key again, or to create it anew after
 * deleting it), and would then wait for this transaction, a deadlock.
 * The caller looks for the row again.
 */
void
idem_wait_for_creator(uint64 hash, uint16 space, TransactionId xid)
{
	idem_unlock_creation(hash, space);
	XactLockTableWait(xid, NULL, NULL, XLTW_None);
	(void) idem_lock_creation(hash, space);
}

/*
 * Inserting rows of one table, one at a time, as one INSERT statement run
 * by SPI at idem_begin_inserts() would insert them: its AFTER row triggers
 * fire at idem_end_inserts(), as at the end of the statement.
 */
struct IdemRowInserter
{
	RowWriter	writer;
	WriteRangeTable *range_table;
	bool		checked;		/* the permission check is made */
	TupleTableSlot *slot;
	const bool *given;
	int			ndefaults;		/* columns left out that have a default */
	AttrNumber *default_attnums;
	ExprState **defaults;
};

/*
 * Prepare the defaults of the columns that the rows leave out, as the
 * INSERT's plan computes them (a default, an identity's next value, else
 * nothing: NULL), in the current memory context.
 */
static void
prepare_defaults(IdemRowInserter *inserter, TableCache *cache)
{
	int			i;

	inserter->ndefaults = 0;
	inserter->default_attnums = palloc(sizeof(AttrNumber) * cache->natts);
	inserter->defaults = palloc(sizeof(ExprState *) * cache->natts);
	for (i = 0; i < cache->natts; i++)
	{
		if (inserter->given[i] || cache->defaults[i] == NULL)
			continue;
		inserter->default_attnums[inserter->ndefaults] = (AttrNumber) (i + 1);
		inserter->defaults[inserter->ndefaults] =
			ExecInitExpr(cache->defaults[i], NULL);
		inserter->ndefaults++;
	}
}

/*
 * Start inserting into "rel", opened by the caller with RowExclusiveLock,
 * rows whose columns flagged in "given" (one entry per attribute of the
 * table, kept by the caller until idem_end_inserts()) are set and whose
 * other columns take their defaults, else NULL, for the INSERT statement
 * that names "columns" (its column list, its RETURNING).  The rows see the
 * effects of the earlier commands of this transaction; the table's row
 * triggers fire, its constraints are checked and its indexes maintained.
 * The statement's privileges are checked before the first row.
 *
 * Like the statement, it refuses to write in a read-only transaction or on
 * a hot standby (25006), whoever calls it.
 *
 * Returns NULL, having done nothing, when the table or the rows need the
 * INSERT statement (see the header comment).
 */
IdemRowInserter *
idem_begin_inserts(Relation rel, const bool *given,
				   const IdemStatementColumns *columns)
{
	IdemRowInserter *inserter;
	TableCache *cache;
	MemoryContext caller;

	/* what the executor's start checks for an INSERT (ExecCheckXactReadOnly) */
	PreventCommandIfReadOnly("INSERT");
	PreventCommandIfParallelMode("INSERT");
	if (!insert_is_plain(rel))
		return NULL;

	inserter = palloc(sizeof(IdemRowInserter));
	inserter->given = given;
	inserter->range_table = write_range_table(rel, CMD_INSERT, columns);
	inserter->checked = false;
	cache = begin_row_writer(&inserter->writer, rel,
							 idem_push_statement_snapshot(),
							 inserter->range_table);
	caller = MemoryContextSwitchTo(inserter->writer.estate->es_query_cxt);
	inserter->slot = ExecInitExtraTupleSlot(inserter->writer.estate,
											RelationGetDescr(rel),
											&TTSOpsVirtual);
	prepare_defaults(inserter, cache);
	MemoryContextSwitchTo(caller);
	return inserter;
}

/*
 * True when "index" is the only unique or exclusion index that the inserts
 * check (indexes still being built included): a caller that has looked for
 * the row's key in it knows that no other unique check can fail, where
 * INSERT ... ON CONFLICT DO NOTHING would have taken every such index as
 * an arbiter.
 */
bool
idem_inserts_check_only(IdemRowInserter *inserter, Relation index)
{
	ResultRelInfo *result_rel = inserter->writer.result_rel;
	int			i;

	for (i = 0; i < result_rel->ri_NumIndices; i++)
	{
		IndexInfo  *info = result_rel->ri_IndexRelationInfo[i];

		if ((info->ii_Unique || info->ii_ExclusionOps != NULL) &&
			RelationGetRelid(result_rel->ri_IndexRelationDescs[i]) !=
			RelationGetRelid(index))
			return false;
	}
	return true;
}

/*
 * Insert the row whose given columns have "values" and "isnull" (one entry
 * per attribute); false when a BEFORE trigger skipped it.
 */
bool
idem_insert_next(IdemRowInserter *inserter, const Datum *values,
				 const bool *isnull)
{
	EState	   *estate = inserter->writer.estate;
	TupleTableSlot *slot = inserter->slot;
	MemoryContext caller = MemoryContextSwitchTo(estate->es_query_cxt);
	bool		written;
	int			i;

	if (!inserter->checked)
	{
		idem_check_permissions(inserter->range_table->rtable,
							   inserter->range_table->perminfos);
		inserter->checked = true;
	}
	ExecClearTuple(slot);
	for (i = 0; i < slot->tts_tupleDescriptor->natts; i++)
	{
		slot->tts_values[i] = inserter->given[i] ? values[i] : (Datum) 0;
		slot->tts_isnull[i] = inserter->given[i] ? isnull[i] : true;
	}
	if (inserter->ndefaults > 0)
	{
		ExprContext *econtext = GetPerTupleExprContext(estate);

		/* in the row's memory, which the reset below frees */
		MemoryContextSwitchTo(econtext->ecxt_per_tuple_memory);
		for (i = 0; i < inserter->ndefaults; i++)
		{
			int			att = inserter->default_attnums[i] - 1;

			slot->tts_values[att] = ExecEvalExpr(inserter->defaults[i], econtext,
												 &slot->tts_isnull[att]);
		}
		MemoryContextSwitchTo(estate->es_query_cxt);
	}
	ExecStoreVirtualTuple(slot);
	ItemPointerSetInvalid(&slot->tts_tid);
	/* what CHECK constraints and generated columns see, as ExecInsert() */
	slot->tts_tableOid = RelationGetRelid(inserter->writer.result_rel->ri_RelationDesc);

	ExecSimpleRelationInsert(inserter->writer.result_rel, estate, slot);
	/* the table AM gives the row its TID; a skipped row has none */
	written = ItemPointerIsValid(&slot->tts_tid);
	/* as the statement's loop does after each row */
	ResetPerTupleExprContext(estate);
	MemoryContextSwitchTo(caller);
	return written;
}

/*
 * Column "attnum" of the row the last idem_insert_next() wrote, as the
 * INSERT's RETURNING would give it (after the BEFORE triggers); valid
 * until the next row.
 */
Datum
idem_inserted_value(IdemRowInserter *inserter, AttrNumber attnum,
					bool *isnull)
{
	return slot_getattr(inserter->slot, attnum, isnull);
}

/*
 * Fire the AFTER triggers of the rows inserted and free the executor
 * state.
 */
void
idem_end_inserts(IdemRowInserter *inserter)
{
	end_row_writer(&inserter->writer);
	PopActiveSnapshot();
	pfree(inserter);
}

/*
 * Insert one row: idem_insert_row() is idem_begin_inserts(), one
 * idem_insert_next() and idem_end_inserts().  Returns
 * IDEM_WRITE_BY_STATEMENT, having done nothing, when the table or the row
 * needs the INSERT statement; IDEM_WRITE_SKIPPED when a BEFORE trigger
 * skipped the row.
 */
IdemWriteResult
idem_insert_row(Relation rel, const Datum *values, const bool *isnull,
				const bool *given, const IdemStatementColumns *columns)
{
	IdemRowInserter *inserter = idem_begin_inserts(rel, given, columns);
	bool		written;

	if (inserter == NULL)
		return IDEM_WRITE_BY_STATEMENT;
	written = idem_insert_next(inserter, values, isnull);
	idem_end_inserts(inserter);
	return written ? IDEM_WRITE_DONE : IDEM_WRITE_SKIPPED;
}

/*
 * Lock the latest version of the row in "slot" (the version the writer's
 * snapshot sees) as an UPDATE does before it writes, into "locked"; false
 * when there is none left to update.  Under READ COMMITTED a version
 * updated since is followed to the newest one, which the caller checks
 * again (the statement's EvalPlanQual); under REPEATABLE READ and
 * SERIALIZABLE a concurrent update or delete is a serialization failure
 * (40001), as for the statement.
 */
static bool
lock_row_for_update(RowWriter *writer, TupleTableSlot *slot,
					TupleTableSlot *locked)
{
	EState	   *estate = writer->estate;
	TM_FailureData tmfd;
	TM_Result	result;

	result = table_tuple_lock(writer->result_rel->ri_RelationDesc,
							  &slot->tts_tid, estate->es_snapshot, locked,
							  estate->es_output_cid,
							  ExecUpdateLockMode(estate, writer->result_rel),
							  LockWaitBlock,
							  IsolationUsesXactSnapshot() ? 0 :
							  TUPLE_LOCK_FLAG_FIND_LAST_VERSION,
							  &tmfd);
	switch (result)
	{
		case TM_Ok:
			return true;
		case TM_SelfModified:
			/* changed by this very command: by a trigger it fired */
			if (tmfd.cmax != estate->es_output_cid)
				ereport(ERROR,
						(errcode(ERRCODE_TRIGGERED_DATA_CHANGE_VIOLATION),
						 errmsg("tuple to be updated was already modified by an operation triggered by the current command")));
			return false;
		case TM_Updated:
		case TM_Deleted:
			if (IsolationUsesXactSnapshot())
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not serialize access due to concurrent %s",
								result == TM_Updated ? "update" : "delete")));
			/* READ COMMITTED: deleted, or moved to another partition */
			return false;
		default:
			elog(ERROR, "unexpected table_tuple_lock status: %u", result);
	}
	return false;				/* keep the compiler quiet */
}

/*
 * Update the row of "scan" (a direct index scan of a table opened with
 * RowExclusiveLock, not yet started) that "matches" accepts, as an UPDATE
 * statement run by SPI at this point would update the row its WHERE
 * clause finds: the version the scan's snapshot sees is locked, and under
 * READ COMMITTED the newest version is checked again with "matches"
 * (lock_row_for_update()); "change" then sets the columns the statement
 * writes ("columns", which also lists those it reads) in the row's values,
 * which hold its current ones.  The statement's privileges are checked
 * first.  The table's row triggers fire (UPDATE OF ones for those
 * columns), its constraints are checked and its indexes kept, HOT updates
 * included.
 *
 * Returns IDEM_WRITE_BY_STATEMENT, having read nothing, when the table
 * needs the UPDATE statement (see the header comment); IDEM_WRITE_NO_ROW
 * when no row matches; IDEM_WRITE_SKIPPED when a BEFORE trigger skipped
 * the row.
 */
IdemWriteResult
idem_update_row(IdemIndexScan *scan, const IdemStatementColumns *columns,
				IdemRowTest matches, IdemRowChange change, void *arg)
{
	Relation	rel = scan->rel;
	WriteRangeTable *range_table;
	RowWriter	writer;
	TupleTableSlot *locked;
	TupleTableSlot *slot;
	EPQState	epqstate;
	MemoryContext caller;
	IdemWriteResult result = IDEM_WRITE_NO_ROW;
	bool		found = false;

	PreventCommandIfReadOnly("UPDATE");
	PreventCommandIfParallelMode("UPDATE");
	if (!update_is_plain(rel))
		return IDEM_WRITE_BY_STATEMENT;
	range_table = write_range_table(rel, CMD_UPDATE, columns);
	idem_check_permissions(range_table->rtable, range_table->perminfos);

	while (!found && idem_index_scan_next(scan))
		found = matches(scan->slot, arg);
	if (!found)
		return IDEM_WRITE_NO_ROW;

	(void) begin_row_writer(&writer, rel, scan->snapshot, range_table);
	caller = MemoryContextSwitchTo(writer.estate->es_query_cxt);
	locked = table_slot_create(rel, &writer.estate->es_tupleTable);
	if (lock_row_for_update(&writer, scan->slot, locked) &&
		matches(locked, arg))
	{
		slot = ExecInitExtraTupleSlot(writer.estate, RelationGetDescr(rel),
									  &TTSOpsVirtual);
		ExecCopySlot(slot, locked);
		slot_getallattrs(slot);
		change(slot->tts_values, slot->tts_isnull, arg);
		ItemPointerSetInvalid(&slot->tts_tid);
		/* what CHECK constraints see, as ExecUpdate() */
		slot->tts_tableOid = RelationGetRelid(rel);

		idem_epq_init(&epqstate, writer.estate);
		PG_TRY();
		{
			ExecSimpleRelationUpdate(writer.result_rel, writer.estate,
									 &epqstate, locked, slot);
		}
		PG_CATCH();
		{
			MemoryContext error_cxt = MemoryContextSwitchTo(caller);
			ErrorData  *edata = CopyErrorData();

			/*
			 * The row locked above was changed since by a later command of
			 * this transaction: a BEFORE UPDATE trigger of the row that
			 * updated or deleted it.  The heap refuses the update as an
			 * invisible tuple (55000); the statement's ExecUpdate() finds
			 * the same and raises 27000, as here.
			 */
			if (edata->sqlerrcode == ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE &&
				edata->funcname != NULL &&
				(strcmp(edata->funcname, "heap_update") == 0 ||
				 strcmp(edata->funcname, "simple_heap_update") == 0))
			{
				FlushErrorState();
				ereport(ERROR,
						(errcode(ERRCODE_TRIGGERED_DATA_CHANGE_VIOLATION),
						 errmsg("tuple to be updated was already modified by an operation triggered by the current command"),
						 errhint("Consider using an AFTER trigger instead of a BEFORE trigger to propagate changes to other rows.")));
			}
			FreeErrorData(edata);
			MemoryContextSwitchTo(error_cxt);
			PG_RE_THROW();
		}
		PG_END_TRY();
		EvalPlanQualEnd(&epqstate);
		/* the new version's TID; a skipped row keeps the old one or none */
		result = ItemPointerIsValid(&slot->tts_tid) &&
			!ItemPointerEquals(&slot->tts_tid, &locked->tts_tid) ?
			IDEM_WRITE_DONE : IDEM_WRITE_SKIPPED;
	}
	MemoryContextSwitchTo(caller);
	end_row_writer(&writer);
	return result;
}
