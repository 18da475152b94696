/*-------------------------------------------------------------------------
 *
 * state_machine.c
 *	  Named state machines and the trigger that enforces them:
 *	  define_state_machine(), enforce_state_machine(),
 *	  drop_state_machine_enforcement() and state_machine_trigger().
 *
 * A machine is a row of idempotency.state_machines whose transitions are a
 * jsonb object {"from": ["to", ...], ...}.  enforce_state_machine()
 * installs, with the caller's rights, a BEFORE UPDATE row trigger
 *
 *	  zz_idempotency_state_machine_<attnum> ... WHEN (OLD.col IS DISTINCT FROM NEW.col)
 *	  EXECUTE FUNCTION idempotency.state_machine_trigger('col', 'machine')
 *
 * so an update that leaves the state alone never calls us.  BEFORE, not
 * AFTER: an UPDATE that moves a row to another partition runs as a
 * DELETE and an INSERT, and fires no AFTER UPDATE row trigger, but it
 * fires the BEFORE UPDATE row triggers of the source partition before
 * the row is routed.  A row trigger on a partitioned table is cloned to
 * every partition, present and future; a table with inheritance children
 * gets one trigger per table, as a child's rows fire the child's
 * triggers.  BEFORE triggers fire in name order: the "zz_" makes the
 * check see the row as the BEFORE triggers named before it left it.  The
 * name carries the column's attribute number, which survives renames and
 * fits NAMEDATALEN.  Versions up to 1.2 installed an AFTER trigger without
 * the "zz_"; enforcing (or dropping) replaces (or drops) it too.
 *
 * The trigger runs as the updating role, which has no access to our table:
 * it reads a machine as the extension owner, once per backend, and keeps
 * its transitions as a sorted array of (from, to) pairs.  Redefining a
 * machine sends a relcache invalidation for idempotency.state_machines; our
 * relcache callback then forgets every cached machine.  The callback only
 * flags the cache: it is emptied at the next lookup, never while a trigger
 * holds a pointer into it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "idempotency.h"
#include "arguments.h"
#include "bookkeeping.h"
#include "relations.h"

/*
 * Prefix of the trigger names; the column's attnum follows.  The AFTER
 * triggers of versions up to 1.2 lack the "zz_".
 */
#define TRIGGER_PREFIX "zz_idempotency_state_machine_"
#define OLD_TRIGGER_PREFIX "idempotency_state_machine_"

/* Longest machine name in bytes, for the cache's fixed-size keys. */
#define MACHINE_NAME_BYTES (IDEM_MAX_NAME_CHARS * MAX_MULTIBYTE_CHAR_LEN + 1)

typedef struct Transition
{
	const char *from;
	const char *to;
} Transition;

typedef struct MachineEntry
{
	char		name[MACHINE_NAME_BYTES];	/* hash key */
	int			ntransitions;
	Transition *transitions;	/* sorted by (from, to) */
} MachineEntry;

static HTAB *machine_cache = NULL;
static MemoryContext MachineCacheContext = NULL;
static bool machine_cache_stale = false;
static bool callback_registered = false;
static Oid	state_machines_relid = InvalidOid;

/* $1 name, $2 transitions */
static IdemQuery upsert_machine = {
	.sql = "INSERT INTO idempotency.state_machines (name, transitions)"
	" VALUES ($1, $2)"
	" ON CONFLICT (name) DO UPDATE SET transitions = EXCLUDED.transitions,"
	" updated_at = pg_catalog.now()",
	.nargs = 2, .argtypes = {TEXTOID, JSONBOID}
};

/* $1 name */
static IdemQuery select_machine = {
	.sql = "SELECT transitions FROM idempotency.state_machines"
	" WHERE name OPERATOR(pg_catalog.=) $1",
	.nargs = 1, .argtypes = {TEXTOID}
};

/* SQL-callable functions */
PG_FUNCTION_INFO_V1(idempotency_define_state_machine);
PG_FUNCTION_INFO_V1(idempotency_enforce_state_machine);
PG_FUNCTION_INFO_V1(idempotency_drop_state_machine_enforcement);
PG_FUNCTION_INFO_V1(idempotency_state_machine_trigger);

/*
 * Relcache callback: a change to idempotency.state_machines (or a reset of
 * the whole relcache) makes every cached machine stale.
 */
static void
machine_cache_callback(Datum arg pg_attribute_unused(), Oid relid)
{
	if (relid == InvalidOid || relid == state_machines_relid)
		machine_cache_stale = true;
}

/*
 * The OID of idempotency.state_machines, looked up afresh (the extension
 * may have been dropped and created again) and remembered for the
 * callback.
 */
static Oid
machines_table(void)
{
	Oid			relid = idem_relation_oid("state_machines");

	if (!callback_registered)
	{
		idem_on_relcache_change(machine_cache_callback);
		callback_registered = true;
	}
	state_machines_relid = relid;
	return relid;
}

/*
 * qsort and bsearch order of transitions.
 */
static int
transition_cmp(const void *a, const void *b)
{
	const Transition *x = (const Transition *) a;
	const Transition *y = (const Transition *) b;
	int			c = strcmp(x->from, y->from);

	return c != 0 ? c : strcmp(x->to, y->to);
}

/*
 * A JSON string as a C string.
 */
static char *
json_string(const JsonbValue *v)
{
	return pnstrdup(v->val.string.val, v->val.string.len);
}

/*
 * Check the shape of a transitions object and return its pairs, sorted, in
 * the current memory context.  A bad shape raises 22023 with a detail that
 * names the bad part.
 */
static Transition *
parse_transitions(Jsonb *transitions, int *ntransitions)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;
	char	   *from = NULL;
	int			n = 0;
	int			size = 16;
	Transition *result = palloc(size * sizeof(Transition));

	if (!JB_ROOT_IS_OBJECT(transitions))
	{
		JsonbValue	root = {.type = jbvBinary};

		root.val.binary.data = &transitions->root;
		root.val.binary.len = VARSIZE(transitions) - VARHDRSZ;
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("transitions must be a JSON object"),
				 errdetail("The transitions given are a JSON %s; the form is {\"PENDING\": [\"PAID\", \"CANCELLED\"], \"PAID\": [\"SHIPPED\"]}.",
						   JB_ROOT_IS_SCALAR(transitions) ? "scalar" :
						   JsonbTypeName(&root))));
	}

	it = JsonbIteratorInit(&transitions->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		JsonbIterator *elems;
		int			position = 0;

		if (tok == WJB_KEY)
		{
			from = json_string(&v);
			continue;
		}
		if (tok != WJB_VALUE)
			continue;
		if (v.type != jbvBinary || !JsonContainerIsArray(v.val.binary.data))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid transitions of state \"%s\"", from),
					 errdetail("The value of \"%s\" is a JSON %s, not an array of state names.",
							   from, JsonbTypeName(&v))));

		elems = JsonbIteratorInit(v.val.binary.data);
		while ((tok = JsonbIteratorNext(&elems, &v, true)) != WJB_DONE)
		{
			if (tok != WJB_ELEM)
				continue;
			position++;
			if (v.type != jbvString)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("invalid transitions of state \"%s\"", from),
						 errdetail("Element %d of \"%s\" is a JSON %s, not a state name.",
								   position, from, JsonbTypeName(&v))));
			if (n == size)
			{
				size *= 2;
				result = repalloc(result, size * sizeof(Transition));
			}
			result[n].from = from;
			result[n].to = json_string(&v);
			n++;
		}
	}
	qsort(result, n, sizeof(Transition), transition_cmp);
	*ntransitions = n;
	return result;
}

/*
 * The transitions of the machine called "name", read as the extension
 * owner on first use; NULL when there is no such machine.  The caller
 * must not touch the catalogs while it uses the result: that could run
 * the callback, and the next lookup would free the entry.
 */
static MachineEntry *
lookup_machine(const char *name)
{
	MachineEntry *entry;
	bool		found;
	Datum		arg = CStringGetTextDatum(name);
	Datum		transitions;
	Jsonb	   *jb;
	bool		isnull;
	MemoryContext old;
	Transition *pairs;
	int			npairs;

	/* Longer names cannot be defined (nor fit the key). */
	if (strlen(name) >= MACHINE_NAME_BYTES)
		return NULL;

	/* Take in redefinitions committed since this transaction started. */
	AcceptInvalidationMessages();
	if (machine_cache == NULL || machine_cache_stale)
	{
		HASHCTL		ctl;

		if (MachineCacheContext == NULL)
			MachineCacheContext = AllocSetContextCreate(TopMemoryContext,
														"idempotency state machines",
														ALLOCSET_SMALL_SIZES);
		else
			MemoryContextReset(MachineCacheContext);
		ctl.keysize = MACHINE_NAME_BYTES;
		ctl.entrysize = sizeof(MachineEntry);
		ctl.hcxt = MachineCacheContext;
		machine_cache = hash_create("idempotency state machines", 16, &ctl,
									HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		machine_cache_stale = false;
	}
	entry = hash_search(machine_cache, name, HASH_FIND, NULL);
	if (entry != NULL)
		return entry;

	machines_table();
	if (idem_run_as_owner(&select_machine, &arg, NULL, true, &transitions,
						  &isnull) == 0)
		return NULL;

	/* The read may have taken in an invalidation: start again. */
	if (machine_cache_stale)
		return lookup_machine(name);

	/* Parse before entering, so that an error leaves no half entry. */
	jb = DatumGetJsonbP(transitions);
	old = MemoryContextSwitchTo(MachineCacheContext);
	pairs = parse_transitions(jb, &npairs);
	MemoryContextSwitchTo(old);
	entry = hash_search(machine_cache, name, HASH_ENTER, &found);
	entry->transitions = pairs;
	entry->ntransitions = npairs;
	return entry;
}

/*
 * The states the machine allows after "from", for the hint of an error:
 * 'PAID', 'CANCELLED', or NULL when there are none.
 */
static char *
next_states(const MachineEntry *machine, const char *from)
{
	StringInfoData buf;
	int			i;

	initStringInfo(&buf);
	for (i = 0; i < machine->ntransitions; i++)
	{
		if (strcmp(machine->transitions[i].from, from) != 0)
			continue;
		if (buf.len > 0)
			appendStringInfoString(&buf, ", ");
		appendStringInfoString(&buf, quote_literal_cstr(machine->transitions[i].to));
	}
	return buf.len > 0 ? buf.data : NULL;
}

/*
 * The name of the trigger that enforces a machine on column "attnum".
 */
static char *
trigger_name(AttrNumber attnum)
{
	return psprintf(TRIGGER_PREFIX "%d", attnum);
}

/*
 * The name of the AFTER trigger that versions up to 1.2 installed.
 */
static char *
old_trigger_name(AttrNumber attnum)
{
	return psprintf(OLD_TRIGGER_PREFIX "%d", attnum);
}

/*
 * Run a CREATE or DROP TRIGGER with the caller's rights.
 */
static void
run_ddl(const char *sql)
{
	SPI_connect();
	if (SPI_execute(sql, false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "SPI_execute failed for \"%s\"", sql);
	SPI_finish();
}

/*
 * Drop the trigger "name" of a table, if it has one.
 */
static void
drop_trigger(Oid relid, const char *name)
{
	if (OidIsValid(get_trigger_oid(relid, name, true)))
		run_ddl(psprintf("DROP TRIGGER %s ON %s", quote_identifier(name),
						 idem_quote_table(relid)));
}

/*
 * The tables whose triggers guard the rows that an UPDATE of "relid"
 * reaches, "relid" first: a partitioned table alone (its row triggers
 * are cloned to its partitions, including those attached later), any
 * other table with its inheritance children and theirs, which are locked
 * as CREATE TRIGGER locks them.
 */
static List *
guarded_tables(Oid relid)
{
	if (get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE)
		return list_make1_oid(relid);
	return find_all_inheritors(relid, ShareRowExclusiveLock, NULL);
}

/*
 * Install (or replace) the trigger on one table, and drop the AFTER
 * trigger of an older version.
 */
static void
enforce_on(Oid relid, const char *column, const char *machine)
{
	AttrNumber	attnum = idem_column_attnum(relid, column);

	run_ddl(psprintf("CREATE OR REPLACE TRIGGER %s BEFORE UPDATE ON %s FOR EACH ROW"
					 " WHEN (OLD.%s IS DISTINCT FROM NEW.%s)"
					 " EXECUTE FUNCTION idempotency.state_machine_trigger(%s, %s)",
					 quote_identifier(trigger_name(attnum)),
					 idem_quote_table(relid),
					 quote_identifier(column), quote_identifier(column),
					 quote_literal_cstr(column), quote_literal_cstr(machine)));
	drop_trigger(relid, old_trigger_name(attnum));
}

/*
 * define_state_machine(name text, transitions jsonb) RETURNS void
 */
Datum
idempotency_define_state_machine(PG_FUNCTION_ARGS)
{
	text	   *name = idem_arg_name(fcinfo, 0, "name", 1, IDEM_MAX_NAME_CHARS);
	Jsonb	   *transitions;
	int			ntransitions;
	Datum		values[2];

	idem_require_arg(fcinfo, 1, "transitions");
	transitions = PG_GETARG_JSONB_P(1);
	parse_transitions(transitions, &ntransitions);

	values[0] = PointerGetDatum(name);
	values[1] = JsonbPGetDatum(transitions);
	PreventCommandIfReadOnly("idempotency.define_state_machine()");
	(void) idem_run_as_owner(&upsert_machine, values, NULL, false, NULL, NULL);
	/* Other backends forget their copy at commit, this one at its next command. */
	CacheInvalidateRelcacheByRelid(machines_table());
	PG_RETURN_VOID();
}

/*
 * enforce_state_machine(tbl regclass, state_column name, machine text)
 * RETURNS void: create, or replace, the enforcing trigger of the table
 * and of its inheritance children with the caller's rights (CREATE
 * TRIGGER asks for the TRIGGER privilege).  The table's own trigger comes
 * first: it checks the caller's rights and locks the table.
 */
Datum
idempotency_enforce_state_machine(PG_FUNCTION_ARGS)
{
	Oid			relid = idem_arg_table(fcinfo, 0);
	char	   *column;
	text	   *machine;
	char	   *machine_name;
	Datum		arg;
	ListCell   *lc;

	(void) idem_arg_column(fcinfo, 1, "state_column", relid);
	column = NameStr(*PG_GETARG_NAME(1));
	machine = idem_arg_name(fcinfo, 2, "machine", 1, IDEM_MAX_NAME_CHARS);
	machine_name = text_to_cstring(machine);
	arg = PointerGetDatum(machine);

	PreventCommandIfReadOnly("idempotency.enforce_state_machine()");
	if (idem_run_as_owner(&select_machine, &arg, NULL, true, NULL, NULL) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("state machine \"%s\" does not exist", machine_name),
				 errhint("Define it first with idempotency.define_state_machine().")));

	/* the table's lock from here on keeps new inheritance children away */
	enforce_on(relid, column, machine_name);
	foreach(lc, guarded_tables(relid))
	{
		if (lfirst_oid(lc) != relid)
			enforce_on(lfirst_oid(lc), column, machine_name);
	}
	PG_RETURN_VOID();
}

/*
 * drop_state_machine_enforcement(tbl regclass, state_column name) RETURNS
 * void: drop the enforcing trigger of the column from the table and its
 * inheritance children, and the AFTER trigger of an older version, where
 * there is one.
 */
Datum
idempotency_drop_state_machine_enforcement(PG_FUNCTION_ARGS)
{
	Oid			relid = idem_arg_table(fcinfo, 0);
	char	   *column;
	ListCell   *lc;

	(void) idem_arg_column(fcinfo, 1, "state_column", relid);
	column = NameStr(*PG_GETARG_NAME(1));
	foreach(lc, guarded_tables(relid))
	{
		Oid			table = lfirst_oid(lc);
		AttrNumber	attnum = idem_column_attnum(table, column);

		drop_trigger(table, trigger_name(attnum));
		drop_trigger(table, old_trigger_name(attnum));
	}
	PG_RETURN_VOID();
}

/*
 * state_machine_trigger(): BEFORE (or, installed by a version up to 1.2,
 * AFTER) UPDATE FOR EACH ROW, arguments (state column, machine).  Raises
 * 23514 when the state moves along a transition the machine lacks; a move
 * from or to NULL is never one of its transitions.  A BEFORE trigger
 * returns the new row unchanged.
 */
Datum
idempotency_state_machine_trigger(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Relation	rel;
	TupleDesc	tupdesc;
	const char *column;
	const char *machine_name;
	AttrNumber	attnum;
	Transition	move;
	MachineEntry *machine;
	char	   *hint = NULL;
	HeapTuple	result;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		trigdata->tg_trigger->tgnargs != 2)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("state_machine_trigger() must be an UPDATE row trigger with two arguments"),
				 errhint("Install it with idempotency.enforce_state_machine().")));

	/* a BEFORE trigger lets the new row through as it is */
	result = TRIGGER_FIRED_BEFORE(trigdata->tg_event) ? trigdata->tg_newtuple : NULL;
	rel = trigdata->tg_relation;
	tupdesc = RelationGetDescr(rel);
	column = trigdata->tg_trigger->tgargs[0];
	machine_name = trigdata->tg_trigger->tgargs[1];
	attnum = SPI_fnumber(tupdesc, column);
	if (attnum <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist",
						column, RelationGetRelationName(rel)),
				 errhint("After renaming the state column, call idempotency.enforce_state_machine() again.")));

	move.from = SPI_getvalue(trigdata->tg_trigtuple, tupdesc, attnum);
	move.to = SPI_getvalue(trigdata->tg_newtuple, tupdesc, attnum);
	if (move.from != NULL && move.to != NULL && strcmp(move.from, move.to) == 0)
		return PointerGetDatum(result);

	machine = lookup_machine(machine_name);
	if (machine == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("state machine \"%s\" does not exist", machine_name),
				 errdetail("It is enforced on column \"%s\" of table \"%s\".",
						   column, RelationGetRelationName(rel))));
	if (move.from != NULL && move.to != NULL &&
		bsearch(&move, machine->transitions, machine->ntransitions,
				sizeof(Transition), transition_cmp) != NULL)
		return PointerGetDatum(result);

	if (move.from != NULL)
		hint = next_states(machine, move.from);
	ereport(ERROR,
			(errcode(ERRCODE_CHECK_VIOLATION),
			 errmsg("update of \"%s\" violates state machine \"%s\"",
					RelationGetRelationName(rel), machine_name),
			 errdetail("Table \"%s\" cannot change \"%s\" from %s to %s: state machine \"%s\" has no such transition.",
					   RelationGetRelationName(rel), column,
					   move.from ? quote_literal_cstr(move.from) : "NULL",
					   move.to ? quote_literal_cstr(move.to) : "NULL",
					   machine_name),
			 hint ? errhint("From %s the machine allows %s.",
							quote_literal_cstr(move.from), hint) :
			 errhint("The machine allows no transition from %s.",
					 move.from ? quote_literal_cstr(move.from) : "NULL"),
			 errtablecol(rel, attnum)));
	return PointerGetDatum(result);
}
