/*-------------------------------------------------------------------------
 *
 * row_write.c
 *	  Direct writes to the extension's own tables, for the hot paths where
 *	  starting an executor for one row would cost more than the write: the
 *	  insert of a claimed key or a processed event, and the update that
 *	  completes a key (which transition() also uses on plain tables).
 *
 * An insert is a speculative insertion, as INSERT ... ON CONFLICT DO
 * NOTHING makes it: the heap tuple is inserted under a speculative token,
 * each unique index is checked and extended in one step, and when another
 * live or in-progress row already holds the value the tuple is killed and
 * the caller learns of the conflict, having written nothing visible.  The
 * caller then takes the slow path (a cached SQL statement), which waits
 * for the other transaction and decides.
 *
 * An update replaces a row that a direct read found; a version that is not
 * HOT gets its index entries through the executor's own routine, which
 * checks unique and exclusion constraints.  When a concurrent transaction
 * changed the row first, the caller reads it again and decides again, as
 * READ COMMITTED's re-check does; under REPEATABLE READ and SERIALIZABLE
 * that is a serialization failure.
 *
 * Both maintain every index of the table.  They do not fire triggers,
 * evaluate CHECK constraints or index expressions, nor fill in defaults:
 * the extension's tables have none of the first three and the callers
 * give every column a value.  idem_learn_table() tells them when a table
 * was given a trigger, a constraint, such an index or another column, and
 * they take the SQL path then.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "storage/lmgr.h"
#include "utils/inval.h"
#include "utils/rel.h"

#include "idempotency.h"

/*
 * The open indexes of a table while one row is written.
 */
typedef struct RowIndexes
{
	int			count;
	Relation   *indexes;
	IndexInfo **infos;
} RowIndexes;

static void
open_row_indexes(Relation rel, RowIndexes *ri)
{
	List	   *oids = RelationGetIndexList(rel);
	ListCell   *lc;
	int			i = 0;

	ri->count = list_length(oids);
	ri->indexes = palloc(sizeof(Relation) * Max(ri->count, 1));
	ri->infos = palloc(sizeof(IndexInfo *) * Max(ri->count, 1));
	foreach(lc, oids)
	{
		ri->indexes[i] = index_open(lfirst_oid(lc), RowExclusiveLock);
		ri->infos[i] = BuildIndexInfo(ri->indexes[i]);
		i++;
	}
	list_free(oids);
}

static void
close_row_indexes(RowIndexes *ri)
{
	int			i;

	for (i = 0; i < ri->count; i++)
		index_close(ri->indexes[i], NoLock);
}

/*
 * Add the entry of the row in "slot" (already in the heap) to index "i".
 * A unique index is only extended when no other live or in-progress row
 * holds the value (UNIQUE_CHECK_PARTIAL); returns false when one might.
 */
static bool
insert_index_entry(Relation rel, RowIndexes *ri, int i, TupleTableSlot *slot)
{
	Datum		values[INDEX_MAX_KEYS];
	bool		isnull[INDEX_MAX_KEYS];

	FormIndexDatum(ri->infos[i], slot, NULL, values, isnull);
	return index_insert(ri->indexes[i], values, isnull, &slot->tts_tid, rel,
						ri->indexes[i]->rd_index->indisunique ?
						UNIQUE_CHECK_PARTIAL : UNIQUE_CHECK_NO,
						false, ri->infos[i]);
}

/*
 * True when rows of "rel" may be written directly: no triggers, no CHECK
 * constraints, and only plain, immediate indexes on columns.
 */
static bool
direct_writes_ok(Relation rel)
{
	RowIndexes	ri;
	bool		ok;
	int			i;

	if (rel->trigdesc != NULL ||
		(rel->rd_att->constr != NULL && rel->rd_att->constr->num_check > 0))
		return false;
	open_row_indexes(rel, &ri);
	ok = true;
	for (i = 0; i < ri.count; i++)
		if (ri.infos[i]->ii_Expressions != NIL ||
			ri.infos[i]->ii_Predicate != NIL ||
			ri.infos[i]->ii_ExclusionOps != NULL ||
			!ri.indexes[i]->rd_index->indimmediate)
			ok = false;
	close_row_indexes(&ri);
	return ok;
}

/*
 * The layouts learnt so far, forgotten on a relcache invalidation of their
 * table (a new column, trigger or index, or a drop of the extension).
 */
#define MAX_LAYOUTS 8
static IdemTableLayout *layouts[MAX_LAYOUTS];
static int	nlayouts = 0;

static void
forget_layouts(Datum arg pg_attribute_unused(), Oid relid)
{
	int			i;

	for (i = 0; i < nlayouts; i++)
		if (relid == InvalidOid || relid == layouts[i]->relid)
			layouts[i]->relid = InvalidOid;
}

/*
 * Learn where the columns of "layout" are in "rel", the table it
 * describes, unless known; and whether its rows may be written directly,
 * which needs every column of the table to be one the C code knows, so
 * that none has a default the C code would skip.
 */
void
idem_learn_table(IdemTableLayout *layout, Relation rel)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	int			live = 0;
	int			col;
	int			i;

	if (layout->relid == RelationGetRelid(rel))
		return;
	if (nlayouts == 0)
		CacheRegisterRelcacheCallback(forget_layouts, (Datum) 0);
	for (i = 0; i < nlayouts && layouts[i] != layout; i++)
		;
	if (i == nlayouts)
	{
		if (nlayouts == MAX_LAYOUTS)
			elog(ERROR, "too many table layouts");
		layouts[nlayouts++] = layout;
	}

	for (col = 0; col < layout->ncolumns; col++)
	{
		layout->attnums[col] = InvalidAttrNumber;
		for (i = 0; i < tupdesc->natts; i++)
		{
			Form_pg_attribute attr = TupleDescAttr(tupdesc, i);

			if (!attr->attisdropped &&
				strcmp(NameStr(attr->attname), layout->columns[col]) == 0)
				layout->attnums[col] = attr->attnum;
		}
		if (layout->attnums[col] == InvalidAttrNumber)
			elog(ERROR, "column \"%s\" of relation \"%s\" does not exist",
				 layout->columns[col], RelationGetRelationName(rel));
	}
	for (i = 0; i < tupdesc->natts; i++)
		if (!TupleDescAttr(tupdesc, i)->attisdropped)
			live++;
	layout->direct_writes = live == layout->ncolumns && direct_writes_ok(rel);
	layout->relid = RelationGetRelid(rel);
}

/*
 * A virtual slot of "rel" holding the row whose columns, in the order of
 * "layout", are "values" and "nulls"; drop it with
 * ExecDropSingleTupleTableSlot().
 */
TupleTableSlot *
idem_row_slot(Relation rel, const IdemTableLayout *layout,
			  const Datum *values, const bool *nulls)
{
	TupleTableSlot *slot = MakeSingleTupleTableSlot(RelationGetDescr(rel),
													&TTSOpsVirtual);
	int			col;

	ExecClearTuple(slot);
	memset(slot->tts_isnull, true,
		   sizeof(bool) * slot->tts_tupleDescriptor->natts);
	for (col = 0; col < layout->ncolumns; col++)
	{
		slot->tts_values[layout->attnums[col] - 1] = values[col];
		slot->tts_isnull[layout->attnums[col] - 1] = nulls[col];
	}
	return ExecStoreVirtualTuple(slot);
}

/*
 * Insert the row in "slot" (a virtual slot of rel's row type) unless a
 * unique index already holds one of its values in a live or in-progress
 * row; returns false, having inserted nothing, in that case.
 */
bool
idem_insert_row(Relation rel, TupleTableSlot *slot)
{
	TransactionId xid = GetCurrentTransactionId();
	RowIndexes	ri;
	uint32		token;
	bool		unique = true;
	int			i;

	open_row_indexes(rel, &ri);
	token = SpeculativeInsertionLockAcquire(xid);
	table_tuple_insert_speculative(rel, slot, GetCurrentCommandId(true), 0,
								   NULL, token);
	for (i = 0; i < ri.count && unique; i++)
		if (ri.indexes[i]->rd_index->indisunique)
			unique = insert_index_entry(rel, &ri, i, slot);
	for (i = 0; i < ri.count && unique; i++)
		if (!ri.indexes[i]->rd_index->indisunique)
			insert_index_entry(rel, &ri, i, slot);
	table_tuple_complete_speculative(rel, slot, token, unique);
	SpeculativeInsertionLockRelease(xid);
	close_row_indexes(&ri);
	return unique;
}

/*
 * The index entries of a new row version that is not HOT, with the checks
 * of unique and exclusion constraints, as the executor makes them.
 */
static void
insert_index_entries(Relation rel, TupleTableSlot *slot, Snapshot snapshot)
{
	EState	   *estate = CreateExecutorState();
	ResultRelInfo *rri = makeNode(ResultRelInfo);

	estate->es_snapshot = snapshot;
	estate->es_output_cid = GetCurrentCommandId(true);
	InitResultRelInfo(rri, rel, 0, NULL, 0);
	ExecOpenIndices(rri, false);
	(void) ExecInsertIndexTuples(rri, slot, estate, false, false, NULL, NIL);
	ExecCloseIndices(rri);
	FreeExecutorState(estate);
}

/*
 * Replace the row at "tid", which "snapshot" sees, with the row in "slot".
 * Returns TM_Ok, or TM_Updated or TM_Deleted when a concurrent transaction
 * changed the row first: under READ COMMITTED the caller reads the row
 * again and decides again; the stricter levels raise a serialization
 * failure here, as the executor does.
 */
TM_Result
idem_update_row(Relation rel, ItemPointer tid, TupleTableSlot *slot,
				Snapshot snapshot)
{
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	bool		update_indexes;
	TM_Result	result;

	result = table_tuple_update(rel, tid, slot, GetCurrentCommandId(true),
								snapshot, InvalidSnapshot, true, &tmfd,
								&lockmode, &update_indexes);
	switch (result)
	{
		case TM_Ok:
			/* a HOT update leaves the index entries as they are */
			if (update_indexes)
				insert_index_entries(rel, slot, snapshot);
			break;
		case TM_Updated:
		case TM_Deleted:
			if (IsolationUsesXactSnapshot())
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not serialize access due to concurrent %s",
								result == TM_Updated ? "update" : "delete")));
			break;
		default:
			elog(ERROR, "unexpected result %d updating a row of \"%s\"",
				 (int) result, RelationGetRelationName(rel));
	}
	return result;
}
