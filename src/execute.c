/*-------------------------------------------------------------------------
 *
 * execute.c
 *	  execute(): exactly-once SQL in one round trip.
 *
 * In the caller's transaction: claim the key (as the extension owner); when
 * the claim is ours, run the caller's statement with the caller's rights,
 * store the first column of its first row as jsonb, and complete the key.
 * The statement runs to completion, like any statement the caller runs.
 * An error in the statement aborts the transaction, claim included, so
 * nothing is stored.
 *
 * A new key, the common case, is written once: the claim only takes the
 * lock for creating the key (keys.c), which every claim of an absent key
 * takes, the statement runs, and the key is inserted completed.  A
 * concurrent request with the same key waits for the lock, so for this
 * transaction, and then replays, as it would behind a claimed row.
 *
 * The caller's statements are prepared once per backend and kept in a hash
 * table keyed by (statement text, number of parameters, and the settings
 * that change how the text is read); every parameter is bound as text.  The table is emptied when it reaches
 * STATEMENT_CACHE_SIZE entries, so a client that builds statement texts
 * dynamically cannot make it grow without bound.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parser.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/plancache.h"

#include "idempotency.h"
#include "arguments.h"
#include "bookkeeping.h"
#include "keys.h"
#include "metrics.h"
#include "roles.h"

#define STATEMENT_CACHE_SIZE 1024

/*
 * The session's standard_conforming_strings and backslash_quote are part of
 * the key: the same text is another statement (or several) under another
 * value of them, and must be parsed again.
 */
typedef struct StatementKey
{
	const char *sql;
	int			nparams;
	bool		standard_strings;
	int			backslash_quote;
} StatementKey;

typedef struct StatementEntry
{
	StatementKey key;			/* sql is a copy in StatementCacheContext */
	SPIPlanPtr	plan;
	Oid			result_type;	/* type of the first column to_jsonb is set
								 * up for, or InvalidOid */
	FmgrInfo	to_jsonb;
} StatementEntry;

static HTAB *statement_cache = NULL;
static MemoryContext StatementCacheContext = NULL;

/*
 * Number of execute() statements running in this backend.  A statement may
 * call execute() itself; the cache is only emptied when none runs, since
 * the running ones still use their entries and plans.
 */
static int	statements_running = 0;

/* SQL-callable functions */
PG_FUNCTION_INFO_V1(idempotency_execute);
PG_FUNCTION_INFO_V1(idempotency_execute_1_6);
PG_FUNCTION_INFO_V1(idempotency_execute_1_7);
PG_FUNCTION_INFO_V1(idempotency_execute_1_8);

/* The last arguments, which the older signatures lack. */
#define RESPONSE_TTL_ARG 6
#define WAIT_ARG 7

static uint32
statement_key_hash(const void *key, Size keysize pg_attribute_unused())
{
	const StatementKey *k = (const StatementKey *) key;

	return hash_bytes((const unsigned char *) k->sql, strlen(k->sql)) ^
		(uint32) k->nparams ^ ((uint32) k->standard_strings << 16) ^
		((uint32) k->backslash_quote << 20);
}

static int
statement_key_compare(const void *key1, const void *key2, Size keysize pg_attribute_unused())
{
	const StatementKey *k1 = (const StatementKey *) key1;
	const StatementKey *k2 = (const StatementKey *) key2;

	if (k1->nparams != k2->nparams ||
		k1->standard_strings != k2->standard_strings ||
		k1->backslash_quote != k2->backslash_quote)
		return 1;
	return strcmp(k1->sql, k2->sql);
}

static void *
statement_key_copy(void *dest, const void *src, Size keysize pg_attribute_unused())
{
	StatementKey *d = (StatementKey *) dest;
	const StatementKey *s = (const StatementKey *) src;

	d->sql = MemoryContextStrdup(StatementCacheContext, s->sql);
	d->nparams = s->nparams;
	d->standard_strings = s->standard_strings;
	d->backslash_quote = s->backslash_quote;
	return dest;
}

/*
 * Create the statement cache, or empty it when it is full.
 */
static void
reset_statement_cache(void)
{
	HASHCTL		ctl;

	if (statement_cache != NULL)
	{
		HASH_SEQ_STATUS status;
		StatementEntry *entry;

		hash_seq_init(&status, statement_cache);
		while ((entry = hash_seq_search(&status)) != NULL)
			if (entry->plan != NULL)
				SPI_freeplan(entry->plan);
		hash_destroy(statement_cache);
		MemoryContextDelete(StatementCacheContext);
	}
	StatementCacheContext = AllocSetContextCreate(TopMemoryContext,
												  "idempotency execute() statements",
												  ALLOCSET_DEFAULT_SIZES);
	ctl.keysize = sizeof(StatementKey);
	ctl.entrysize = sizeof(StatementEntry);
	ctl.hash = statement_key_hash;
	ctl.match = statement_key_compare;
	ctl.keycopy = statement_key_copy;
	ctl.hcxt = StatementCacheContext;
	statement_cache = hash_create("idempotency execute() statements", 64, &ctl,
								  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE |
								  HASH_KEYCOPY | HASH_CONTEXT);
}

/*
 * Refuse a statement that SPI cannot run inside a function: transaction
 * control (the key and the work commit or roll back together, with the
 * caller's transaction) and COPY to or from the client.
 */
static void
refuse_statement_kind(Node *stmt)
{
	if (IsA(stmt, TransactionStmt))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_TERMINATION),
				 errmsg("execute() cannot run transaction control statements"),
				 errdetail("The statement runs in the caller's transaction, which commits or rolls back the key with it."),
				 errhint("Commit or roll back in the caller, after execute() returns.")));
	if (IsA(stmt, CopyStmt) && ((CopyStmt *) stmt)->filename == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("execute() cannot run COPY to or from the client")));
}

/*
 * The prepared plan of "sql" with "nparams" text parameters; checks on
 * first use that it is exactly one statement, of a kind it can run.
 */
static StatementEntry *
statement_plan(const char *sql, int nparams)
{
	StatementKey key = {sql, nparams, standard_conforming_strings, backslash_quote};
	StatementEntry *entry;
	bool		found;
	Oid		   *argtypes;
	SPIPlanPtr	plan;
	List	   *sources;
	int			i;

	if (statement_cache == NULL ||
		(statements_running == 0 &&
		 hash_get_num_entries(statement_cache) >= STATEMENT_CACHE_SIZE))
		reset_statement_cache();
	entry = hash_search(statement_cache, &key, HASH_FIND, NULL);
	if (entry != NULL)
		return entry;

	argtypes = palloc(sizeof(Oid) * Max(nparams, 1));
	for (i = 0; i < nparams; i++)
		argtypes[i] = TEXTOID;
	plan = SPI_prepare(sql, nparams, argtypes);
	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
	sources = SPI_plan_get_plan_sources(plan);
	if (list_length(sources) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("statement must not be empty")));
	if (list_length(sources) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("execute() runs exactly one SQL statement"),
				 errdetail("The statement text holds %d statements.",
						   list_length(sources)),
				 errhint("Put the work in one statement, for example with a WITH clause, or use claim() and complete() around several statements.")));
	refuse_statement_kind(((CachedPlanSource *) linitial(sources))->raw_parse_tree->stmt);
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");

	entry = hash_search(statement_cache, &key, HASH_ENTER, &found);
	entry->plan = plan;
	entry->result_type = InvalidOid;
	return entry;
}

/*
 * The first column of the first row of the statement's result, as jsonb:
 * to_jsonb() of it, or JSON null for a NULL or for no row at all.
 */
static Datum
statement_result(StatementEntry *entry)
{
	bool		isnull;
	Datum		value;
	Oid			type;

	if (SPI_tuptable == NULL || SPI_processed == 0 ||
		SPI_tuptable->tupdesc->natts == 0)
		return idem_null_jsonb();
	value = idem_get_column(1, &isnull);
	if (isnull)
		return idem_null_jsonb();

	type = SPI_gettypeid(SPI_tuptable->tupdesc, 1);
	if (type == JSONBOID)
		return value;			/* to_jsonb() of jsonb is the value itself */
	if (type != entry->result_type)
	{
		/* to_jsonb(anyelement) learns its argument type from fn_expr */
		MemoryContext old = MemoryContextSwitchTo(StatementCacheContext);

		fmgr_info_cxt(F_TO_JSONB, &entry->to_jsonb, StatementCacheContext);
		fmgr_info_set_expr((Node *) makeFuncExpr(F_TO_JSONB, JSONBOID,
												 list_make1(makeNullConst(type, -1, InvalidOid)),
												 InvalidOid, InvalidOid,
												 COERCE_EXPLICIT_CALL),
						   &entry->to_jsonb);
		MemoryContextSwitchTo(old);
		entry->result_type = type;
	}
	return FunctionCall1(&entry->to_jsonb, value);
}

/*
 * Run the caller's statement, counted in statements_running while it runs.
 */
static int
run_statement(StatementEntry *entry, Datum *params, const char *nulls)
{
	int			rc = 0;

	statements_running++;
	PG_TRY();
	{
		/* to completion: volatile functions in later rows run too */
		rc = SPI_execute_plan(entry->plan, params, nulls, false, 0);
	}
	PG_FINALLY();
	{
		statements_running--;
	}
	PG_END_TRY();
	return rc;
}

/*
 * execute(key, request, statement, params, scope, ttl, response_ttl, wait)
 * RETURNS claim_result; idempotency_execute is the symbol of the
 * signature before 1.6, without response_ttl, whose claims never answer
 * gone.  The symbols of 1.7 and 1.8 ("holders") record the calling role
 * as the holder of the key they claim (keys.c, "Holders"; 1.8: by name
 * too), and complete it as that role.
 */
static Datum
execute_call(FunctionCallInfo fcinfo, IdemHolders holders)
{
	text	   *key = idem_arg_key(fcinfo, 0);
	Jsonb	   *request = PG_ARGISNULL(1) ? NULL : PG_GETARG_JSONB_P(1);
	char	   *sql;
	Datum	   *params = NULL;
	bool	   *param_nulls = NULL;
	int			nparams = 0;
	text	   *scope = idem_arg_scope(fcinfo, 4);
	Interval   *ttl = idem_arg_interval(fcinfo, 5, "ttl", &idem_default_ttl);
	Interval   *response_ttl = idem_arg_answer_interval(fcinfo, RESPONSE_TTL_ARG,
														"response_ttl", true,
														idem_default_response_ttl);
	Interval   *wait = idem_arg_wait(fcinfo, WAIT_ARG);
	int			flags = IDEM_CLAIM_CREATE_LATER;
	MemoryContext caller_context = CurrentMemoryContext;
	IdemOwnerRights owner;
	IdemClaim	claim;
	StatementEntry *entry;
	Datum		result;

	idem_require_arg(fcinfo, 2, "statement");
	sql = text_to_cstring(PG_GETARG_TEXT_PP(2));
	if (!PG_ARGISNULL(3))
	{
		ArrayType  *array = PG_GETARG_ARRAYTYPE_P(3);

		if (ARR_NDIM(array) > 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("params must be a one-dimensional text array")));
		deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT,
						  &params, &param_nulls, &nparams);
	}
	idem_check_ttl_covers_lease(ttl, &idem_lease_timeout);
	if (PG_NARGS() > RESPONSE_TTL_ARG)
		flags |= IDEM_CLAIM_ANSWERS_EXPIRE;

	SPI_connect();
	entry = statement_plan(sql, nparams);
	/* the role that claims, before the switch to the owner */
	claim.holder = holders != IDEM_HOLDERS_NONE ? GetUserId() : InvalidOid;
	claim.holders = holders;
	idem_become_owner(&owner);
	idem_claim_key_waiting(key, scope, request, ttl, &idem_lease_timeout,
						   flags, wait, &claim);
	idem_restore_user(&owner);

	/* a new key (outcome NULL), or one to take over */
	if (claim.outcome == NULL || idem_claim_runs_work(&claim))
	{
		char	   *nulls = palloc(Max(nparams, 1));
		Jsonb	   *body;
		int			rc;
		int			i;

		for (i = 0; i < nparams; i++)
			nulls[i] = param_nulls[i] ? 'n' : ' ';
		rc = run_statement(entry, params, nulls);
		if (rc < 0)
			elog(ERROR, "SPI_execute_plan failed: %s",
				 SPI_result_code_string(rc));
		body = DatumGetJsonbP(statement_result(entry));
		if (VARSIZE(body) > (Size) idem_max_response_bytes)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("result of the statement is too large to store"),
					 errdetail("It takes %zu bytes; idempotency.max_response_bytes allows %d.",
							   (Size) VARSIZE(body), idem_max_response_bytes)));

		idem_become_owner(&owner);
		if (claim.outcome == NULL)
			idem_insert_completed_key(key, scope, ttl, response_ttl, body,
									  &claim);
		else
		{
			idem_finish_key(key, scope,
							DatumGetInt64(claim.values[CLAIM_FENCE]),
							true, JsonbPGetDatum(body), false, 200, false,
							NULL, response_ttl, claim.holder, holders);
			idem_claim_completed(&claim, body);
		}
		idem_restore_user(&owner);
	}

	idem_metrics_count_claim(scope, claim.outcome);
	MemoryContextSwitchTo(caller_context);
	result = idem_claim_datum(fcinfo, &claim);
	SPI_finish();
	PG_RETURN_DATUM(result);
}

Datum
idempotency_execute_1_8(PG_FUNCTION_ARGS)
{
	return execute_call(fcinfo, IDEM_HOLDERS_BY_NAME);
}

Datum
idempotency_execute_1_7(PG_FUNCTION_ARGS)
{
	return execute_call(fcinfo, IDEM_HOLDERS_BY_OID);
}

Datum
idempotency_execute_1_6(PG_FUNCTION_ARGS)
{
	return execute_call(fcinfo, IDEM_HOLDERS_NONE);
}

Datum
idempotency_execute(PG_FUNCTION_ARGS)
{
	return execute_call(fcinfo, IDEM_HOLDERS_NONE);
}
