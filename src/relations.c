/*-------------------------------------------------------------------------
 *
 * relations.c
 *	  The catalog helpers: the extension's own relations, their OIDs and
 *	  the positions of the columns C reads, both cached until the catalog
 *	  changes; a column of any relation by name; and direct index scans
 *	  for the reads where starting an executor would cost more than the
 *	  work (the key read of every claim, the inbox probe).  Rows are never
 *	  written here.  Every module's relcache-keyed cache is forgotten
 *	  through the one relcache callback registered here.  A table that
 *	  Citus manages is never opened for its rows (idem_table_open): on a
 *	  Citus node its relation is an empty shell.
 *
 * A scan sees what a non-read-only SPI statement would see: the effects of
 * the earlier commands of this transaction and, under READ COMMITTED,
 * everything committed before it starts.  Its snapshot is the active one
 * until idem_index_scan_end(), so callers may hand it to table AM calls.
 * Locks are kept until the end of the transaction, as the executor does.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "commands/extension.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "idempotency.h"
#include "relations.h"

/*
 * The OIDs of the extension's relations by name, looked up once and
 * forgotten whenever pg_class changes (the extension may have been dropped
 * and created again, or a relation renamed).  The names are string
 * constants of the C files, so comparing pointers would do; strcmp() keeps
 * it safe for any caller.
 */
#define RELATION_CACHE_SIZE 16

typedef struct CachedRelation
{
	const char *relname;
	Oid			relid;
} CachedRelation;

static CachedRelation relation_cache[RELATION_CACHE_SIZE];
static int	relation_cache_used = 0;
static bool relation_cache_callback_set = false;

/*
 * A backend has room for ten relcache callbacks in all, shared with every
 * other library loaded (Citus alone registers five), and a backend that
 * runs out ends with FATAL.  So the library registers one and hands each
 * invalidation to every module that asked for it.
 */
#define MAX_RELCACHE_HOOKS 8
static RelcacheCallbackFunction relcache_hooks[MAX_RELCACHE_HOOKS];
static int	nrelcache_hooks = 0;

static void
forget_relations(Datum arg pg_attribute_unused(), int cacheid pg_attribute_unused(),
				 uint32 hashvalue pg_attribute_unused())
{
	relation_cache_used = 0;
}

/*
 * Refuse a database whose extension is older than the versions the library
 * serves, 1.2 and later (55000, with the hint to update it): the key calls
 * find no key_hash in the table of keys (1.0 and 1.1), the outbox calls no
 * lease_token in the table of events (1.0).
 */
void
idem_refuse_old_extension(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("the idempotency extension of this database is older than its library"),
			 errdetail("The library serves idempotency 1.2 and later; this database has an earlier version."),
			 errhint("Run ALTER EXTENSION idempotency UPDATE in this database.")));
}

/*
 * Refuse the database (idem_refuse_old_extension) when relation "relname"
 * has no column "attname" (one syscache probe).
 */
void
idem_require_column(const char *relname, const char *attname)
{
	HeapTuple	tuple;

	tuple = SearchSysCacheAttName(idem_relation_oid(relname), attname);
	if (!HeapTupleIsValid(tuple))
		idem_refuse_old_extension();
	ReleaseSysCache(tuple);
}

/*
 * The attribute number of a user column of relation "relid", or 42703.
 * System columns and dropped columns do not count.
 */
AttrNumber
idem_column_attnum(Oid relid, const char *colname)
{
	AttrNumber	attnum = InvalidAttrNumber;

	if (strlen(colname) < NAMEDATALEN)
		attnum = get_attnum(relid, colname);
	if (attnum <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist",
						colname, get_rel_name(relid))));
	return attnum;
}

/*
 * Whether "relid" is a Citus table (distributed, reference or Citus local),
 * read from Citus's catalog pg_dist_partition where the citus extension is
 * in this database.  Found by name, so the library neither links with
 * Citus nor needs it.
 */
static bool
is_citus_table(Oid relid)
{
	Oid			catalog;
	AttrNumber	relid_att;
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	bool		found;

	if (!OidIsValid(get_extension_oid("citus", true)))
		return false;
	catalog = get_relname_relid("pg_dist_partition", PG_CATALOG_NAMESPACE);
	if (!OidIsValid(catalog))
		return false;
	relid_att = get_attnum(catalog, "logicalrelid");
	/* a catalog of another shape: no answer, so no access either */
	if (relid_att == InvalidAttrNumber)
		return true;
	rel = table_open(catalog, AccessShareLock);
	ScanKeyInit(&key, relid_att, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(relid));
	scan = systable_beginscan(rel, InvalidOid, false, NULL, 1, &key);
	found = HeapTupleIsValid(systable_getnext(scan));
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * Refuse (0A000) to read or write relation "relname" of the extension,
 * which Citus manages.  On a Citus node such a relation is a shell: its
 * rows are in shards, on this node or others, which the library's direct
 * reads and writes never see, so a claim would find no key and write a
 * second one where nobody looks.
 */
static void
refuse_citus_table(const char *relname)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("relation \"idempotency.%s\" is a Citus table", relname),
			 errdetail("The library reads and writes the relation on this node, where Citus keeps none of its rows."),
			 errhint("Keep the extension's tables out of Citus; see doc/scaling.md, \"Citus\".")));
}

/*
 * The answers of is_citus_table() so far.  Citus says that a relation
 * became, or stopped being, one of its tables with a relcache invalidation
 * of the relation (so does any change of it): that, or an invalidation of
 * every relation, forgets them ("citus_generation" tells an answer being
 * found that one came meanwhile).
 */
typedef struct CitusAnswer
{
	Oid			relid;
	bool		citus;
} CitusAnswer;

static CitusAnswer citus_answers[RELATION_CACHE_SIZE];
static int	ncitus_answers = 0;
static uint64 citus_generation = 0;

static void
forget_citus_answers(Datum arg pg_attribute_unused(), Oid relid)
{
	int			i;

	for (i = 0; i < ncitus_answers; i++)
		if (!OidIsValid(relid) || citus_answers[i].relid == relid)
		{
			ncitus_answers = 0;
			citus_generation++;
			return;
		}
}

/*
 * idem_refuse_citus_table: the error above when Citus manages "relid",
 * relation "relname" of the extension, which the caller is about to read
 * or write directly.  The answer is cached until an invalidation of the
 * relation.
 */
void
idem_refuse_citus_table(Oid relid, const char *relname)
{
	static bool hook_set = false;
	uint64		generation = citus_generation;
	bool		citus;
	int			i;

	for (i = 0; i < ncitus_answers; i++)
		if (citus_answers[i].relid == relid)
		{
			if (citus_answers[i].citus)
				refuse_citus_table(relname);
			return;
		}
	if (!hook_set)
	{
		idem_on_relcache_change(forget_citus_answers);
		hook_set = true;
	}
	citus = is_citus_table(relid);
	if (generation == citus_generation && ncitus_answers < RELATION_CACHE_SIZE)
	{
		citus_answers[ncitus_answers].relid = relid;
		citus_answers[ncitus_answers].citus = citus;
		ncitus_answers++;
	}
	if (citus)
		refuse_citus_table(relname);
}

/*
 * Open table "relname" of the extension to read or write its rows, as
 * table_open() does; refused (0A000) when Citus manages it.
 */
Relation
idem_table_open(const char *relname, LOCKMODE lockmode)
{
	Oid			relid = idem_relation_oid(relname);

	idem_refuse_citus_table(relid, relname);
	return table_open(relid, lockmode);
}

/*
 * The OID of relation "relname" of schema idempotency; an error when it is
 * missing.
 */
Oid
idem_relation_oid(const char *relname)
{
	Oid			relid;
	int			i;

	for (i = 0; i < relation_cache_used; i++)
		if (strcmp(relation_cache[i].relname, relname) == 0)
			return relation_cache[i].relid;

	relid = get_relname_relid(relname,
							  get_namespace_oid("idempotency", false));
	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"idempotency.%s\" does not exist", relname),
				 errhint("Give the relation back its name; the extension finds its relations by name.")));
	if (!relation_cache_callback_set)
	{
		CacheRegisterSyscacheCallback(RELNAMENSP, forget_relations, (Datum) 0);
		relation_cache_callback_set = true;
	}
	if (relation_cache_used < RELATION_CACHE_SIZE)
	{
		relation_cache[relation_cache_used].relname = relname;
		relation_cache[relation_cache_used].relid = relid;
		relation_cache_used++;
	}
	return relid;
}

/*
 * Make the active snapshot the one a statement of its own would take here:
 * the effects of the earlier commands of this transaction and, under READ
 * COMMITTED, everything committed before now.  Pop it with
 * PopActiveSnapshot().
 */
Snapshot
idem_push_statement_snapshot(void)
{
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	UpdateActiveSnapshotCommandId();
	return GetActiveSnapshot();
}

/*
 * Open table "relname" and its index "indexname" with "lockmode" and start
 * a scan with the "nkeys" keys (on index columns) in "keys", which must
 * stay valid until the scan ends.
 */
void
idem_index_scan_begin(IdemIndexScan *scan, const char *relname,
					  const char *indexname, LOCKMODE lockmode,
					  ScanKey keys, int nkeys)
{
	scan->rel = idem_table_open(relname, lockmode);
	scan->index = index_open(idem_relation_oid(indexname), lockmode);

	scan->snapshot = idem_push_statement_snapshot();

	scan->slot = table_slot_create(scan->rel, NULL);
	/* the index scan itself starts with the first row asked for */
	scan->scan = NULL;
	scan->keys = keys;
	scan->nkeys = nkeys;
}

/*
 * The next visible row, in scan->slot; false at the end.
 */
bool
idem_index_scan_next(IdemIndexScan *scan)
{
	if (scan->scan == NULL)
	{
		scan->scan = idem_index_beginscan(scan->rel, scan->index,
										  scan->snapshot, scan->nkeys, 0);
		index_rescan(scan->scan, scan->keys, scan->nkeys, NULL, 0);
	}
	return index_getnext_slot(scan->scan, ForwardScanDirection, scan->slot);
}

/*
 * Let go of the row found and of the index scan, releasing their buffer
 * pins (before a wait, say); the next idem_index_scan_next() scans the
 * same keys again from the start, seeing "snapshot", which must stay
 * valid until the scan ends or restarts again.
 */
void
idem_index_scan_restart(IdemIndexScan *scan, Snapshot snapshot)
{
	ExecClearTuple(scan->slot);
	if (scan->scan != NULL)
		index_endscan(scan->scan);
	scan->scan = NULL;
	scan->snapshot = snapshot;
}

/*
 * End the scan and close the relations, keeping their locks.
 */
void
idem_index_scan_end(IdemIndexScan *scan)
{
	if (scan->scan != NULL)
		index_endscan(scan->scan);
	ExecDropSingleTupleTableSlot(scan->slot);
	PopActiveSnapshot();
	index_close(scan->index, NoLock);
	table_close(scan->rel, NoLock);
}

/*
 * The column sets learnt so far, forgotten on a relcache invalidation of
 * their table (a column added, dropped or retyped, or a drop of the
 * extension).
 */
#define MAX_COLUMN_SETS 8
static IdemColumns *column_sets[MAX_COLUMN_SETS];
static int	ncolumn_sets = 0;

static void
relcache_changed(Datum arg, Oid relid)
{
	int			i;

	for (i = 0; i < nrelcache_hooks; i++)
		relcache_hooks[i] (arg, relid);
}

/*
 * idem_on_relcache_change: HOOK runs at every relcache invalidation from
 * now on in this backend (with the relation's OID, or InvalidOid for all),
 * as a relcache callback would.  Asking twice for one hook is one hook.
 */
void
idem_on_relcache_change(RelcacheCallbackFunction hook)
{
	int			i;

	for (i = 0; i < nrelcache_hooks; i++)
		if (relcache_hooks[i] == hook)
			return;
	if (nrelcache_hooks == MAX_RELCACHE_HOOKS)
		elog(ERROR, "idempotency: out of relcache hooks");
	if (nrelcache_hooks == 0)
		CacheRegisterRelcacheCallback(relcache_changed, (Datum) 0);
	relcache_hooks[nrelcache_hooks++] = hook;
}

static void
forget_columns(Datum arg pg_attribute_unused(), Oid relid)
{
	int			i;

	for (i = 0; i < ncolumn_sets; i++)
		if (relid == InvalidOid || relid == column_sets[i]->relid)
			column_sets[i]->relid = InvalidOid;
}

/*
 * Find the columns of "columns" in "rel", the table they belong to, unless
 * known; returns true when they were known already.  The caller holds a
 * lock on "rel", so its columns cannot change meanwhile; an invalidation
 * that arrives while they are learnt (any change to the table) clears
 * "relid" again, so the next call learns them anew.
 */
bool
idem_learn_columns(IdemColumns *columns, Relation rel)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	int			col;
	int			i;

	if (columns->relid == RelationGetRelid(rel))
		return true;
	if (ncolumn_sets == 0)
		idem_on_relcache_change(forget_columns);
	for (i = 0; i < ncolumn_sets && column_sets[i] != columns; i++)
		;
	if (i == ncolumn_sets)
	{
		if (ncolumn_sets == MAX_COLUMN_SETS)
			elog(ERROR, "too many column sets");
		column_sets[ncolumn_sets++] = columns;
	}

	/* set first: an invalidation processed below clears it again */
	columns->relid = RelationGetRelid(rel);
	for (col = 0; col < columns->ncolumns; col++)
	{
		columns->attnums[col] = InvalidAttrNumber;
		for (i = 0; i < tupdesc->natts; i++)
		{
			Form_pg_attribute attr = TupleDescAttr(tupdesc, i);

			if (!attr->attisdropped &&
				strcmp(NameStr(attr->attname), columns->names[col]) == 0)
			{
				if (OidIsValid(columns->types[col]) &&
					attr->atttypid != columns->types[col])
				{
					columns->relid = InvalidOid;
					ereport(ERROR,
							(errcode(ERRCODE_DATATYPE_MISMATCH),
							 errmsg("column \"%s\" of relation \"idempotency.%s\" has type %s, not %s",
									columns->names[col], RelationGetRelationName(rel),
									format_type_be(attr->atttypid),
									format_type_be(columns->types[col])),
							 errhint("Restore the column's type; the extension reads it as created.")));
				}
				columns->attnums[col] = attr->attnum;
			}
		}
		if (col < columns->ncolumns - columns->noptional &&
			columns->attnums[col] == InvalidAttrNumber)
		{
			columns->relid = InvalidOid;
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("column \"%s\" of relation \"idempotency.%s\" does not exist",
							columns->names[col], RelationGetRelationName(rel)),
					 errhint("Restore the column; the extension reads it as created.")));
		}
	}
	return false;
}
