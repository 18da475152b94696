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
 * set of set_columns, current user) and kept in a hash table: each role
 * parses its own, so the parser's check of USAGE on the table's schema
 * applies to every caller.  A relcache invalidation
 * of the table (ALTER, DROP, a rename, ANALYZE) flags its entries; a
 * flagged entry is prepared again on its next use, from the current
 * names and types.  Plans that a running call still executes (a trigger
 * calling transition() on the same table) are never freed under it.
 *
 * Both statements run through SPI with the caller's rights, so the
 * executor applies every rule of the table (privileges, row security,
 * triggers, constraints, indexes being built, the planner's index choice)
 * and refuses in a read-only transaction (25006).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "idempotency.h"
#include "arguments.h"
#include "bookkeeping.h"
#include "relations.h"

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
	Oid			userid;			/* who prepared it: the parser checks schema
								 * USAGE for that role only */
} TransitionPlanKey;

typedef struct TransitionPlan
{
	TransitionPlanKey key;
	bool		valid;			/* false after an invalidation of relid */
	int			refcount;		/* executions under way */
	Bitmapset  *set_columns;	/* attnums set from set_columns */
	SPIPlanPtr	update;
	SPIPlanPtr	read;
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
 * running call still executes them), so they are prepared again from
 * the current catalog.
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
		idem_on_relcache_change(plan_cache_callback);
	}

	memset(&key, 0, sizeof(key));
	key.relid = relid;
	key.userid = GetUserId();
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
