/*-------------------------------------------------------------------------
 *
 * writes.c
 *	  Inserting one row of the extension's own tables with the executor's
 *	  row primitives, as logical replication's apply worker does
 *	  (ExecSimpleRelationInsert() of execReplication.c, in an executor
 *	  state of our own), instead of starting a prepared INSERT through SPI.
 *	  The row goes through the same code as an INSERT's: BEFORE and AFTER
 *	  row triggers, generated columns, NOT NULL and CHECK constraints,
 *	  index entries (indexes still being built and unique and exclusion
 *	  checks, deferred ones included), foreign keys and WAL; only the
 *	  plan's start-up is saved.
 *
 * Only a row that an INSERT statement would write in exactly that way is
 * written here.  The table must be a plain table without rules, row
 * security, statement-level INSERT triggers or transition tables; every
 * column the caller leaves out must take NULL (no default, identity or
 * domain); and the current user must hold INSERT on the table.  Otherwise
 * idem_insert_row() writes nothing and the caller runs its INSERT through
 * SPI, which handles all of those.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_class.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "idempotency.h"

/*
 * True when an INSERT of "rel" giving the columns of "given" (one flag per
 * attribute) would do nothing that ExecSimpleRelationInsert() leaves out.
 */
static bool
insert_is_plain(Relation rel, const bool *given)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	TriggerDesc *triggers = rel->trigdesc;
	int			i;

	if (rel->rd_rel->relkind != RELKIND_RELATION ||
		rel->rd_rel->relhasrules || rel->rd_rel->relrowsecurity)
		return false;
	if (triggers != NULL &&
		(triggers->trig_insert_before_statement ||
		 triggers->trig_insert_after_statement ||
		 triggers->trig_insert_instead_row ||
		 triggers->trig_insert_new_table))
		return false;
	if (pg_class_aclcheck(RelationGetRelid(rel), GetUserId(),
						  ACL_INSERT) != ACLCHECK_OK)
		return false;
	for (i = 0; i < tupdesc->natts; i++)
	{
		Form_pg_attribute attr = TupleDescAttr(tupdesc, i);

		/* generated columns are computed by ExecSimpleRelationInsert() */
		if (given[i] || attr->attisdropped || attr->attgenerated)
			continue;
		if (attr->atthasdef || attr->attidentity ||
			get_typtype(attr->atttypid) == TYPTYPE_DOMAIN)
			return false;
	}
	return true;
}

/*
 * Insert into "rel", opened by the caller with RowExclusiveLock, the row
 * whose columns flagged in "given" have "values" and "isnull" (arrays of
 * one entry per attribute of the table; the other columns are NULL), as an
 * INSERT statement run by SPI at this point would: it sees the effects of
 * the earlier commands of this transaction, fires the table's row
 * triggers, checks its constraints and maintains its indexes.
 *
 * Like the statement, it refuses to write in a read-only transaction or on
 * a hot standby (25006), whoever calls it.
 *
 * Returns IDEM_INSERT_BY_STATEMENT, having done nothing, when the table or
 * the row needs the INSERT statement (see the header comment);
 * IDEM_INSERT_SKIPPED when a BEFORE trigger skipped the row.
 */
IdemInsertResult
idem_insert_row(Relation rel, const Datum *values, const bool *isnull,
				const bool *given)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	EState	   *estate;
	ResultRelInfo *result_rel;
	TupleTableSlot *slot;
	bool		written;
	int			i;

	/* what the executor's start checks for an INSERT (ExecCheckXactReadOnly) */
	PreventCommandIfReadOnly("INSERT");
	PreventCommandIfParallelMode("INSERT");
	if (!insert_is_plain(rel, given))
		return IDEM_INSERT_BY_STATEMENT;

	estate = CreateExecutorState();
	idem_init_range_table(estate, rel);
	result_rel = makeNode(ResultRelInfo);
	InitResultRelInfo(result_rel, rel, 1, NULL, 0);
	/* where AFTER triggers look for it (ExecGetTriggerResultRel()) */
	estate->es_opened_result_relations =
		lappend(estate->es_opened_result_relations, result_rel);
	estate->es_snapshot = idem_push_statement_snapshot();
	estate->es_output_cid = GetCurrentCommandId(true);
	ExecOpenIndices(result_rel, false);

	slot = ExecInitExtraTupleSlot(estate, tupdesc, &TTSOpsVirtual);
	ExecClearTuple(slot);
	for (i = 0; i < tupdesc->natts; i++)
	{
		slot->tts_values[i] = given[i] ? values[i] : (Datum) 0;
		slot->tts_isnull[i] = given[i] ? isnull[i] : true;
	}
	ExecStoreVirtualTuple(slot);
	ItemPointerSetInvalid(&slot->tts_tid);

	AfterTriggerBeginQuery();
	ExecSimpleRelationInsert(result_rel, estate, slot);
	/* the table AM gives the row its TID; a skipped row has none */
	written = ItemPointerIsValid(&slot->tts_tid);
	AfterTriggerEndQuery(estate);

	ExecCloseIndices(result_rel);
	ExecResetTupleTable(estate->es_tupleTable, false);
	FreeExecutorState(estate);
	PopActiveSnapshot();
	return written ? IDEM_INSERT_WRITTEN : IDEM_INSERT_SKIPPED;
}
