/*-------------------------------------------------------------------------
 *
 * transition.c
 *	  transition(): the guarded state update, in one call.
 *
 * It runs, with the caller's rights,
 *
 *	  UPDATE tbl AS t SET state = $3::type [, col = s.col ...]
 *	  [FROM pg_catalog.jsonb_to_record($4) AS s(col type, ...)]
 *	  WHERE t.key = $1::keytype AND t.state = $2::type
 *
 * and only when that hits no row, reads the row's state to tell
 * "already" (it is in to_state) from "rejected" and "not_found".  Of two
 * concurrent calls on one row, the second UPDATE waits for the first one's
 * row lock and then re-checks the new row version; the read that follows
 * takes a fresh snapshot (READ COMMITTED), so it reports the winner's
 * state.  Should the read find the row in from_state after all (a commit
 * slipped in between), the UPDATE is tried again.  When from_state and
 * to_state are the same text there is nothing to move: only the read runs.
 *
 * The key is cast to the key column's type and compared with that type's
 * default equality operator, so the table's index on the column is used.
 * Both statements are prepared once per (table, key column, state column,
 * set of set_columns) and kept in a hash table.  A relcache invalidation
 * of the table (ALTER, DROP, a rename, ANALYZE) flags its entries; a
 * flagged entry is prepared again on its next use, from the current
 * names and types.  Plans that a running call still executes (a trigger
 * calling transition() on the same table) are never freed under it.
 *
 * The direct path.  Without set_columns, on a plain heap table that has
 * no triggers, rules, row security, CHECK constraints, generated columns
 * or inheritance children and is not a partition, whose key column (text,
 * smallint, integer, bigint or uuid) leads a valid B-tree index of its
 * type's default operator class and collation, and whose state column is
 * text, and when the caller holds SELECT and UPDATE on the whole table,
 * the same statement runs without an executor: the row is found through
 * that index, its state compared with the column's collation, and the row
 * updated with table_tuple_update() (new index entries only when the
 * update is not HOT).  That is everything the UPDATE above would do on
 * such a table; any other case, or a read-only or parallel transaction,
 * takes the statements.  A row moved by a concurrent commit is found
 * again with a fresh snapshot under READ COMMITTED, and raises 40001
 * under REPEATABLE READ and SERIALIZABLE, as the UPDATE would.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/nbtree.h"
#include "access/relation.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "idempotency.h"

/* How often a call retries when concurrent commits keep moving the row. */
#define TRANSITION_MAX_RETRIES 100

/* Parameters of both statements: $1 key, $2 from, $3 to, $4 set_columns. */
#define TRANSITION_NARGS 4

typedef struct TransitionPlanKey
{
	Oid			relid;
	AttrNumber	key_attnum;
	AttrNumber	state_attnum;
	uint32		set_hash;		/* bms_hash_value() of the set columns */
} TransitionPlanKey;

typedef struct TransitionPlan
{
	TransitionPlanKey key;
	bool		valid;			/* false after an invalidation of relid */
	int			refcount;		/* executions under way */
	Bitmapset  *set_columns;	/* attnums set from set_columns */
	SPIPlanPtr	update;
	SPIPlanPtr	read;
	/* the direct path, filled by direct_setup() */
	bool		direct_checked; /* the fields below are filled */
	Oid			direct_index;	/* InvalidOid: no direct path */
	Oid			key_type;
	RegProcedure key_eq_proc;
	Oid			key_collation;
	Oid			state_collation;
	Oid			key_ioparam;
	FmgrInfo	key_input;
} TransitionPlan;

/* What one transition() call found and did. */
typedef struct TransitionResult
{
	const char *outcome;		/* NULL until decided */
	text	   *current_state;	/* the row's state, when not applied */
} TransitionResult;

static HTAB *plan_cache = NULL;
static MemoryContext PlanCacheContext = NULL;

static const Oid transition_argtypes[TRANSITION_NARGS] = {
	TEXTOID, TEXTOID, TEXTOID, JSONBOID
};

/* SQL-callable functions */
PG_FUNCTION_INFO_V1(idempotency_transition);

/*
 * Relcache callback: flag the plans of the changed table (of every table
 * when relid is InvalidOid).  Nothing is freed here.
 */
static void
plan_cache_callback(Datum arg pg_attribute_unused(), Oid relid)
{
	HASH_SEQ_STATUS status;
	TransitionPlan *entry;

	hash_seq_init(&status, plan_cache);
	while ((entry = hash_seq_search(&status)) != NULL)
		if (relid == InvalidOid || entry->key.relid == relid)
			entry->valid = false;
}

/*
 * The schema-qualified, quoted name of the default equality operator of
 * a type, as OPERATOR(schema.=): the operator of its B-tree opclass, which
 * is the one an index on a column of that type serves.
 */
static char *
equality_operator(Oid typid)
{
	TypeCacheEntry *typentry = lookup_type_cache(getBaseType(typid),
												 TYPECACHE_EQ_OPR);
	HeapTuple	tuple;
	Form_pg_operator operator;
	char	   *result;

	if (!OidIsValid(typentry->eq_opr))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("could not identify an equality operator for type %s",
						format_type_be(typid))));
	tuple = SearchSysCache1(OPEROID, ObjectIdGetDatum(typentry->eq_opr));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for operator %u", typentry->eq_opr);
	operator = (Form_pg_operator) GETSTRUCT(tuple);
	result = psprintf("OPERATOR(%s.%s)",
					  quote_identifier(get_namespace_name(operator->oprnamespace)),
					  NameStr(operator->oprname));
	ReleaseSysCache(tuple);
	return result;
}

/*
 * A type name for a cast of a parameter, schema-qualified and without a
 * type modifier: "character" alone would mean character(1), "bpchar" does
 * not truncate.
 */
static char *
cast_type(Oid typid)
{
	return format_type_extended(typid, -1, FORMAT_TYPE_TYPEMOD_GIVEN |
								FORMAT_TYPE_FORCE_QUALIFY);
}

/*
 * Prepare and keep one statement; it runs with the rights of whoever
 * executes it.
 */
static SPIPlanPtr
prepare_kept(const char *sql)
{
	SPIPlanPtr	plan = SPI_prepare(sql, TRANSITION_NARGS,
								   (Oid *) transition_argtypes);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s",
			 sql, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	return plan;
}

/*
 * Build and prepare the UPDATE and the follow-up read of an entry, from
 * the table's current names and types.  Every identifier is quoted, every
 * type and operator schema-qualified.
 */
static void
prepare_plans(TransitionPlan *entry)
{
	Oid			relid = entry->key.relid;
	char	   *table = idem_quote_table(relid);
	const char *key = quote_identifier(get_attname(relid, entry->key.key_attnum, false));
	const char *state = quote_identifier(get_attname(relid, entry->key.state_attnum, false));
	Oid			key_type = get_atttype(relid, entry->key.key_attnum);
	Oid			state_type = get_atttype(relid, entry->key.state_attnum);
	char	   *key_cond;
	char	   *state_cast = cast_type(state_type);
	char	   *state_eq = equality_operator(state_type);
	StringInfoData sets;
	StringInfoData record;
	StringInfoData sql;
	int			attnum = -1;
	SPIPlanPtr	update;

	key_cond = psprintf("t.%s %s $1::%s", key, equality_operator(key_type),
						cast_type(key_type));

	/* SET col = s.col ... FROM jsonb_to_record($4) AS s(col type, ...) */
	initStringInfo(&sets);
	initStringInfo(&record);
	while ((attnum = bms_next_member(entry->set_columns, attnum)) >= 0)
	{
		const char *column = quote_identifier(get_attname(relid, attnum, false));
		Oid			typid;
		int32		typmod;
		Oid			collid;

		get_atttypetypmodcoll(relid, attnum, &typid, &typmod, &collid);
		appendStringInfo(&sets, ", %s = s.%s", column, column);
		appendStringInfo(&record, "%s%s %s", record.len > 0 ? ", " : "",
						 column,
						 format_type_extended(typid, typmod,
											  FORMAT_TYPE_TYPEMOD_GIVEN |
											  FORMAT_TYPE_FORCE_QUALIFY));
	}

	initStringInfo(&sql);
	appendStringInfo(&sql, "UPDATE %s AS t SET %s = $3::%s%s", table, state,
					 state_cast, sets.data);
	if (record.len > 0)
		appendStringInfo(&sql, " FROM pg_catalog.jsonb_to_record($4) AS s(%s)",
						 record.data);
	appendStringInfo(&sql, " WHERE %s AND t.%s %s $2::%s",
					 key_cond, state, state_eq, state_cast);
	update = prepare_kept(sql.data);

	resetStringInfo(&sql);
	appendStringInfo(&sql, "SELECT t.%s::pg_catalog.text,"
					 " t.%s %s $2::%s, t.%s %s $3::%s"
					 " FROM %s AS t WHERE %s",
					 state, state, state_eq, state_cast,
					 state, state_eq, state_cast, table, key_cond);
	entry->read = prepare_kept(sql.data);
	entry->update = update;
}

/*
 * The entry of this table, columns and set of set_columns.  An entry
 * flagged by an invalidation is reset: its plans are freed (unless a
 * running call still executes them) and its direct-path data dropped, so
 * both are made again from the current catalog.
 */
static TransitionPlan *
transition_entry(Oid relid, AttrNumber key_attnum, AttrNumber state_attnum,
				 Bitmapset *set_columns)
{
	TransitionPlanKey key;
	TransitionPlan *entry;
	bool		found;
	MemoryContext old;

	if (plan_cache == NULL)
	{
		HASHCTL		ctl;

		PlanCacheContext = AllocSetContextCreate(TopMemoryContext,
												 "idempotency transition() plans",
												 ALLOCSET_SMALL_SIZES);
		ctl.keysize = sizeof(TransitionPlanKey);
		ctl.entrysize = sizeof(TransitionPlan);
		ctl.hcxt = PlanCacheContext;
		plan_cache = hash_create("idempotency transition() plans", 64, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		CacheRegisterRelcacheCallback(plan_cache_callback, (Datum) 0);
	}

	memset(&key, 0, sizeof(key));
	key.relid = relid;
	key.key_attnum = key_attnum;
	key.state_attnum = state_attnum;
	key.set_hash = bms_hash_value(set_columns);
	entry = hash_search(plan_cache, &key, HASH_ENTER, &found);
	if (found && entry->valid && bms_equal(entry->set_columns, set_columns))
		return entry;

	if (!found)
		entry->refcount = 0;
	else
	{
		/* Plans still executed by an outer call are left to it (leaked). */
		if (entry->refcount == 0)
		{
			if (entry->update != NULL)
				SPI_freeplan(entry->update);
			if (entry->read != NULL)
				SPI_freeplan(entry->read);
		}
		bms_free(entry->set_columns);
	}
	entry->update = entry->read = NULL;
	entry->direct_checked = false;
	old = MemoryContextSwitchTo(PlanCacheContext);
	entry->set_columns = bms_copy(set_columns);
	MemoryContextSwitchTo(old);

	/* An invalidation from here on resets the entry again. */
	entry->valid = true;
	return entry;
}

/*
 * The entry's prepared statements, prepared now if needed.  The caller is
 * connected to SPI.
 */
static void
transition_plans(TransitionPlan *entry)
{
	if (entry->update == NULL || entry->read == NULL)
		prepare_plans(entry);
}

/*
 * The columns set_columns names, as attnums; unknown ones raise 42703.
 */
static Bitmapset *
set_column_numbers(Jsonb *set_columns, Oid relid, AttrNumber state_attnum)
{
	Bitmapset  *result = NULL;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;

	if (!JB_ROOT_IS_OBJECT(set_columns))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("set_columns must be a JSON object"),
				 errdetail("Its keys are column names and its values their new values, as in {\"paid_at\": \"2024-01-01T00:00:00Z\"}.")));

	it = JsonbIteratorInit(&set_columns->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		AttrNumber	attnum;

		if (tok != WJB_KEY)
			continue;
		attnum = idem_column_attnum(relid, pnstrdup(v.val.string.val,
													v.val.string.len));
		if (attnum == state_attnum)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("set_columns must not set the state column"),
					 errhint("The state column is set to to_state.")));
		result = bms_add_member(result, attnum);
	}
	return result;
}

/*
 * Execute one of the entry's statements, keeping the entry's plans from
 * being freed while it runs.  Returns the number of rows processed.
 */
static uint64
run_plan(TransitionPlan *entry, SPIPlanPtr plan, Datum *values,
		 const char *nulls, long max_rows)
{
	int			rc;

	entry->refcount++;
	PG_TRY();
	{
		/* Not read-only: each statement takes a fresh snapshot. */
		rc = SPI_execute_plan(plan, values, nulls, false, max_rows);
	}
	PG_FINALLY();
	{
		entry->refcount--;
	}
	PG_END_TRY();
	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	return SPI_processed;
}

/*
 * Raise 21000 when the key matches more than one row.
 */
static void
check_one_row(uint64 rows, Oid relid, AttrNumber key_attnum)
{
	if (rows > 1)
		ereport(ERROR,
				(errcode(ERRCODE_CARDINALITY_VIOLATION),
				 errmsg("key of transition() matches more than one row of \"%s\"",
						get_rel_name(relid)),
				 errhint("Give a key column that is unique, such as the primary key (\"%s\" is not).",
						 get_attname(relid, key_attnum, false))));
}

/*
 * Whether the UPDATE on "rel" would do no more than update the row and
 * its index entries: a plain heap table, alone in its hierarchy, without
 * triggers, rules, row security, CHECK constraints or generated columns.
 */
static bool
direct_table_ok(Relation rel)
{
	Form_pg_class form = rel->rd_rel;
	TupleConstr *constr = RelationGetDescr(rel)->constr;

	return form->relkind == RELKIND_RELATION &&
		form->relam == HEAP_TABLE_AM_OID &&
		!form->relhassubclass && !form->relispartition &&
		!form->relrowsecurity &&
		rel->trigdesc == NULL && rel->rd_rules == NULL &&
		(constr == NULL ||
		 (constr->num_check == 0 && !constr->has_generated_stored));
}

/*
 * Fill the direct-path data of an entry from its open table: the B-tree
 * index to find the row by, the key's equality and input functions and
 * the collations of the comparisons.  direct_index stays InvalidOid when
 * the table or the columns rule the direct path out.
 */
static void
direct_setup(TransitionPlan *entry, Relation rel)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	Form_pg_attribute keyatt = TupleDescAttr(tupdesc, entry->key.key_attnum - 1);
	Form_pg_attribute stateatt = TupleDescAttr(tupdesc, entry->key.state_attnum - 1);
	TypeCacheEntry *typentry;
	List	   *indexes;
	ListCell   *lc;
	Oid			typinput;

	entry->direct_checked = true;
	entry->direct_index = InvalidOid;
	if (!direct_table_ok(rel) ||
		keyatt->attisdropped || stateatt->attisdropped ||
		stateatt->atttypid != TEXTOID)
		return;
	/* types whose cast from text is their input function, or none */
	if (keyatt->atttypid != TEXTOID && keyatt->atttypid != INT2OID &&
		keyatt->atttypid != INT4OID && keyatt->atttypid != INT8OID &&
		keyatt->atttypid != UUIDOID)
		return;
	typentry = lookup_type_cache(keyatt->atttypid,
								 TYPECACHE_EQ_OPR | TYPECACHE_BTREE_OPFAMILY);
	if (!OidIsValid(typentry->eq_opr) || !OidIsValid(typentry->btree_opf))
		return;

	/* a B-tree index led by the key column, as the planner would use */
	indexes = RelationGetIndexList(rel);
	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = index->rd_index;

		if (index->rd_rel->relam == BTREE_AM_OID &&
			form->indisvalid && form->indisready && form->indislive &&
			form->indkey.values[0] == entry->key.key_attnum &&
			index->rd_opfamily[0] == typentry->btree_opf &&
			index->rd_opcintype[0] == keyatt->atttypid &&
			index->rd_indcollation[0] == keyatt->attcollation &&
			heap_attisnull(index->rd_indextuple, Anum_pg_index_indpred, NULL) &&
			(!OidIsValid(entry->direct_index) || form->indisunique))
			entry->direct_index = RelationGetRelid(index);
		index_close(index, AccessShareLock);
	}
	list_free(indexes);

	entry->key_type = keyatt->atttypid;
	entry->key_eq_proc = get_opcode(typentry->eq_opr);
	entry->key_collation = keyatt->attcollation;
	entry->state_collation = stateatt->attcollation;
	getTypeInputInfo(keyatt->atttypid, &typinput, &entry->key_ioparam);
	fmgr_info_cxt(typinput, &entry->key_input, PlanCacheContext);
}

/*
 * Whether a text value equals state text "state" under "collation".
 */
static bool
state_equals(Datum value, text *state, Oid collation)
{
	return DatumGetBool(DirectFunctionCall2Coll(texteq, collation, value,
												PointerGetDatum(state)));
}

/*
 * The new version of the row in "slot": the same columns, with the state
 * column set to "to_state".
 */
static HeapTuple
new_version(TupleTableSlot *slot, AttrNumber state_attnum, text *to_state)
{
	TupleDesc	tupdesc = slot->tts_tupleDescriptor;
	Datum	   *values = palloc(tupdesc->natts * sizeof(Datum));
	bool	   *nulls = palloc(tupdesc->natts * sizeof(bool));
	HeapTuple	tuple;

	slot_getallattrs(slot);
	memcpy(values, slot->tts_values, tupdesc->natts * sizeof(Datum));
	memcpy(nulls, slot->tts_isnull, tupdesc->natts * sizeof(bool));
	values[state_attnum - 1] = PointerGetDatum(to_state);
	nulls[state_attnum - 1] = false;
	tuple = heap_form_tuple(tupdesc, values, nulls);
	pfree(values);
	pfree(nulls);
	return tuple;
}

/*
 * Update the row at "tid" to "newtuple".  Returns false when a concurrent
 * commit moved the row under READ COMMITTED (find it again); raises 40001
 * under REPEATABLE READ and SERIALIZABLE.
 */
static bool
update_row(Relation rel, ItemPointer tid, HeapTuple newtuple,
		   Snapshot snapshot)
{
	TupleTableSlot *slot = MakeSingleTupleTableSlot(RelationGetDescr(rel),
													&TTSOpsHeapTuple);
	TM_Result	result;

	ExecStoreHeapTuple(newtuple, slot, true);
	result = idem_update_row(rel, tid, slot, snapshot);
	ExecDropSingleTupleTableSlot(slot);
	return result == TM_Ok;
}

/*
 * transition() without an executor (see the file header).  Returns false,
 * having changed nothing, when the table, the transaction or the caller's
 * rights rule the direct path out; the statements do the work then.
 */
static bool
transition_direct(TransitionPlan *entry, Oid relid, text *key,
				  text *from_state, text *to_state, bool no_move,
				  TransitionResult *result)
{
	AttrNumber	state_attnum = entry->key.state_attnum;
	Relation	rel;
	Relation	index;
	Datum		key_value;
	ScanKeyData skey;
	TupleTableSlot *slot;
	int			attempt;

	if (XactReadOnly || IsInParallelMode() || ExecutorCheckPerms_hook != NULL)
		return false;
	/*
	 * A table found unfit stays so until an invalidation resets its entry
	 * (a relation never becomes a table).
	 */
	if (entry->valid && entry->direct_checked &&
		!OidIsValid(entry->direct_index))
		return false;
	/* a table known fit is a table (re-checked once it is locked) */
	if (!(entry->valid && entry->direct_checked) &&
		get_rel_relkind(relid) != RELKIND_RELATION)
	{
		entry->direct_checked = true;
		entry->direct_index = InvalidOid;
		return false;
	}
	rel = table_open(relid, RowExclusiveLock);
	/* The lock took in invalidations: a changed table resets the entry. */
	if (!entry->valid)
		(void) transition_entry(relid, entry->key.key_attnum, state_attnum,
								NULL);
	if (!entry->direct_checked)
		direct_setup(entry, rel);
	if (!OidIsValid(entry->direct_index) || !direct_table_ok(rel) ||
		pg_class_aclmask(relid, GetUserId(), ACL_SELECT | ACL_UPDATE,
						 ACLMASK_ALL) != (ACL_SELECT | ACL_UPDATE))
	{
		table_close(rel, NoLock);
		return false;
	}
	/* an index dropped or made unusable meanwhile: look again next time */
	index = try_relation_open(entry->direct_index, RowExclusiveLock);
	if (index == NULL || index->rd_rel->relkind != RELKIND_INDEX ||
		index->rd_index->indrelid != relid || !index->rd_index->indisvalid ||
		!index->rd_index->indisready || !index->rd_index->indislive)
	{
		if (index != NULL)
			relation_close(index, NoLock);
		table_close(rel, NoLock);
		entry->direct_checked = false;
		return false;
	}
	/* the UPDATE's check, when it runs (for a published table) */
	if (!no_move)
		CheckCmdReplicaIdentity(rel, CMD_UPDATE);

	if (entry->key_type == TEXTOID)
		key_value = PointerGetDatum(key);
	else
		key_value = InputFunctionCall(&entry->key_input, text_to_cstring(key),
									  entry->key_ioparam, -1);
	ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   entry->key_collation, entry->key_eq_proc,
						   key_value);
	slot = table_slot_create(rel, NULL);

	for (attempt = 0; result->outcome == NULL; attempt++)
	{
		Snapshot	snapshot;
		IndexScanDesc scan;
		HeapTuple	newtuple = NULL;
		ItemPointerData tid;
		uint64		rows = 0;
		uint64		movable = 0;

		CHECK_FOR_INTERRUPTS();
		/* what a statement of its own would see */
		snapshot = idem_push_statement_snapshot();
		result->current_state = NULL;

		scan = index_beginscan(rel, index, snapshot, 1, 0);
		index_rescan(scan, &skey, 1, NULL, 0);
		while (index_getnext_slot(scan, ForwardScanDirection, slot))
		{
			bool		isnull;
			Datum		state = slot_getattr(slot, state_attnum, &isnull);

			CHECK_FOR_INTERRUPTS();
			if (!no_move && !isnull &&
				state_equals(state, from_state, entry->state_collation))
			{
				/* the UPDATE would move them all, and raise 21000 */
				check_one_row(++movable, relid, entry->key.key_attnum);
				newtuple = new_version(slot, state_attnum, to_state);
				tid = slot->tts_tid;
			}
			else if (rows == 0 && !isnull)
				result->current_state = DatumGetTextPCopy(state);
			rows++;
		}
		index_endscan(scan);

		if (newtuple != NULL)
		{
			if (update_row(rel, &tid, newtuple, snapshot))
				result->outcome = "applied";
			else if (attempt >= TRANSITION_MAX_RETRIES)
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not apply transition() due to concurrent updates")));
		}
		else
		{
			check_one_row(rows, relid, entry->key.key_attnum);
			if (rows == 0)
				result->outcome = "not_found";
			else if (result->current_state != NULL &&
					 state_equals(PointerGetDatum(result->current_state),
								  to_state, entry->state_collation))
				result->outcome = "already";
			else
				result->outcome = "rejected";
		}
		PopActiveSnapshot();
	}

	ExecDropSingleTupleTableSlot(slot);
	index_close(index, NoLock);
	table_close(rel, NoLock);
	return true;
}

/*
 * transition() through its prepared statements.
 */
static void
transition_spi(TransitionPlan *entry, Oid relid, Datum *values,
			   const char *nulls, bool no_move, TransitionResult *result)
{
	MemoryContext caller_context = CurrentMemoryContext;
	SPIPlanPtr	update;
	SPIPlanPtr	read;
	int			attempt;

	SPI_connect();
	transition_plans(entry);
	/* Ours even if a nested call prepares the entry again meanwhile. */
	update = entry->update;
	read = entry->read;
	for (attempt = 0; result->outcome == NULL; attempt++)
	{
		uint64		rows;
		bool		isnull;
		bool		in_from;
		char	   *current_state;

		CHECK_FOR_INTERRUPTS();
		/* from_state = to_state moves nothing: only read the row. */
		if (!no_move)
		{
			rows = run_plan(entry, update, values, nulls, 0);
			check_one_row(rows, relid, entry->key.key_attnum);
			if (rows == 1)
			{
				result->outcome = "applied";
				break;
			}
		}

		rows = run_plan(entry, read, values, nulls, 2);
		check_one_row(rows, relid, entry->key.key_attnum);
		if (rows == 0)
		{
			result->outcome = "not_found";
			break;
		}
		current_state = SPI_getvalue(SPI_tuptable->vals[0],
									 SPI_tuptable->tupdesc, 1);
		result->current_state = NULL;
		if (current_state != NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(caller_context);

			result->current_state = cstring_to_text(current_state);
			MemoryContextSwitchTo(old);
		}
		if (DatumGetBool(idem_get_column(3, &isnull)) && !isnull)
			result->outcome = "already";
		else
		{
			in_from = DatumGetBool(idem_get_column(2, &isnull)) && !isnull;
			/* In from_state after all: a concurrent commit came in between. */
			if (!in_from)
				result->outcome = "rejected";
			else if (attempt >= TRANSITION_MAX_RETRIES)
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not apply transition() due to concurrent updates")));
		}
	}
	SPI_finish();
	MemoryContextSwitchTo(caller_context);
}

/*
 * The row type of transition()'s result, idempotency.transition_result,
 * from the type cache, which keeps it current.  Its OID is looked up once
 * per function OID (a re-created extension has new ones).
 */
static TupleDesc
result_tupdesc(FunctionCallInfo fcinfo)
{
	static Oid	fn_oid = InvalidOid;
	static Oid	result_type = InvalidOid;
	TypeCacheEntry *typentry;

	if (fcinfo->flinfo->fn_oid != fn_oid)
	{
		result_type = get_func_rettype(fcinfo->flinfo->fn_oid);
		fn_oid = fcinfo->flinfo->fn_oid;
	}
	typentry = lookup_type_cache(result_type, TYPECACHE_TUPDESC);
	if (typentry->tupDesc == NULL)
		elog(ERROR, "return type must be a row type");
	return typentry->tupDesc;
}

/*
 * transition(tbl, key_column, key, state_column, from_state, to_state,
 * set_columns) RETURNS transition_result
 */
Datum
idempotency_transition(PG_FUNCTION_ARGS)
{
	Oid			relid = idem_arg_table(fcinfo, 0);
	AttrNumber	key_attnum = idem_arg_column(fcinfo, 1, "key_column", relid);
	AttrNumber	state_attnum = idem_arg_column(fcinfo, 3, "state_column", relid);
	Bitmapset  *set_columns = NULL;
	text	   *key;
	text	   *from_state;
	text	   *to_state;
	bool		no_move;
	Datum		values[TRANSITION_NARGS];
	char		nulls[TRANSITION_NARGS] = {' ', ' ', ' ', 'n'};
	TransitionPlan *entry;
	TransitionResult outcome = {NULL, NULL};
	TupleDesc	tupdesc;
	Datum		result[2];
	bool		result_nulls[2] = {false, false};

	idem_require_arg(fcinfo, 2, "key");
	idem_require_arg(fcinfo, 4, "from_state");
	idem_require_arg(fcinfo, 5, "to_state");
	key = PG_GETARG_TEXT_PP(2);
	from_state = PG_GETARG_TEXT_PP(4);
	to_state = PG_GETARG_TEXT_PP(5);
	no_move = VARSIZE_ANY_EXHDR(from_state) == VARSIZE_ANY_EXHDR(to_state) &&
		memcmp(VARDATA_ANY(from_state), VARDATA_ANY(to_state),
			   VARSIZE_ANY_EXHDR(to_state)) == 0;
	values[0] = PointerGetDatum(key);
	values[1] = PointerGetDatum(from_state);
	values[2] = PointerGetDatum(to_state);
	values[3] = (Datum) 0;
	if (!PG_ARGISNULL(6))
	{
		Jsonb	   *jb = PG_GETARG_JSONB_P(6);

		set_columns = set_column_numbers(jb, relid, state_attnum);
		values[3] = JsonbPGetDatum(jb);
		nulls[3] = ' ';
	}
	entry = transition_entry(relid, key_attnum, state_attnum, set_columns);
	if (set_columns != NULL ||
		!transition_direct(entry, relid, key, from_state, to_state, no_move,
						   &outcome))
		transition_spi(entry, relid, values, nulls, no_move, &outcome);

	result[0] = CStringGetTextDatum(outcome.outcome);
	if (strcmp(outcome.outcome, "applied") == 0)
		result[1] = PointerGetDatum(to_state);
	else if (outcome.current_state != NULL)
		result[1] = PointerGetDatum(outcome.current_state);
	else
		result_nulls[1] = true;
	/* nothing between here and the copy takes in invalidations */
	tupdesc = result_tupdesc(fcinfo);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, result,
													  result_nulls)));
}
