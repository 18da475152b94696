/*-------------------------------------------------------------------------
 *
 * bookkeeping.c
 *	  The extension's own statements on its tables: prepared once per
 *	  backend, executed through SPI, as the extension owner.
 *
 * The SQL-callable functions are SECURITY INVOKER so that execute() and the
 * state-machine helpers run the caller's statements with the caller's
 * rights.  The bookkeeping on the extension's tables runs as the owner of
 * those tables instead: idem_become_owner() switches the user id with
 * SECURITY_LOCAL_USERID_CHANGE (as the RI triggers do), which also forbids
 * SET ROLE meanwhile; an error unwinds it with the (sub)transaction.  That
 * is SECURITY DEFINER without the cost of a per-call search_path GUC: the
 * statements qualify every name instead.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "idempotency.h"
#include "bookkeeping.h"
#include "relations.h"

/*
 * The owner of the extension's tables, which is the extension owner.  It
 * is looked up once and forgotten whenever a pg_class row changes (ALTER
 * EXTENSION ... OWNER TO changes the tables' owner).
 */
static Oid	cached_owner = InvalidOid;
static bool owner_callback_set = false;

static void
forget_owner(Datum arg pg_attribute_unused(), int cacheid pg_attribute_unused(),
			 uint32 hashvalue pg_attribute_unused())
{
	cached_owner = InvalidOid;
}

Oid
idem_extension_owner(void)
{
	Oid			relid;
	HeapTuple	tuple;

	if (OidIsValid(cached_owner))
		return cached_owner;
	relid = idem_relation_oid("idempotency_keys");
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	if (!owner_callback_set)
	{
		CacheRegisterSyscacheCallback(RELOID, forget_owner, (Datum) 0);
		owner_callback_set = true;
	}
	cached_owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return cached_owner;
}

/*
 * Run as the extension owner until idem_restore_user().
 */
void
idem_become_owner(IdemOwnerRights *saved)
{
	GetUserIdAndSecContext(&saved->saved_userid, &saved->saved_sec_context);
	SetUserIdAndSecContext(idem_extension_owner(),
						   saved->saved_sec_context | SECURITY_LOCAL_USERID_CHANGE);
}

void
idem_restore_user(const IdemOwnerRights *saved)
{
	SetUserIdAndSecContext(saved->saved_userid, saved->saved_sec_context);
}

/*
 * Prepare a bookkeeping statement unless prepared; the caller has
 * connected to SPI.  The plan is kept for the life of the backend.
 */
SPIPlanPtr
idem_prepare(IdemQuery *query)
{
	if (query->plan == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare(query->sql, query->nargs,
									   query->argtypes);

		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s",
				 query->sql, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		query->plan = plan;
	}
	return query->plan;
}

/*
 * Execute a bookkeeping statement, preparing it on first use; the caller
 * has connected to SPI.  Returns the number of rows processed; the rows are
 * in SPI_tuptable.
 */
int
idem_run(IdemQuery *query, Datum *values, const char *nulls,
		 bool read_only, long max_rows)
{
	int			rc;

	rc = SPI_execute_plan(idem_prepare(query), values, nulls, read_only,
						  max_rows);
	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed for \"%s\": %s",
			 query->sql, SPI_result_code_string(rc));
	return (int) SPI_processed;
}

/*
 * Run one bookkeeping statement on its own: as the extension owner, in an
 * SPI connection of its own.  Returns the number of rows it processed.
 * When "result" is given, the first column of the first row it returned is
 * copied into it, in the caller's memory, with "*result_isnull" set (true
 * when there was no row).
 */
uint64
idem_run_as_owner(IdemQuery *query, Datum *values, const char *nulls,
				  bool read_only, Datum *result, bool *result_isnull)
{
	IdemOwnerRights owner;
	uint64		rows;

	idem_become_owner(&owner);
	SPI_connect();
	/* every row: a limit would stop an INSERT before its AFTER STATEMENT triggers */
	rows = idem_run(query, values, nulls, read_only, 0);
	if (result != NULL)
	{
		*result_isnull = true;
		if (rows > 0 && SPI_tuptable != NULL)
		{
			Form_pg_attribute attr = TupleDescAttr(SPI_tuptable->tupdesc, 0);
			Datum		value = idem_get_column(1, result_isnull);

			if (!*result_isnull)
				*result = SPI_datumTransfer(value, attr->attbyval, attr->attlen);
		}
	}
	SPI_finish();
	idem_restore_user(&owner);
	return rows;
}

/*
 * Column "colno" (1-based) of row "row" (0-based) of the last statement.
 */
Datum
idem_get_row_column(uint64 row, int colno, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc,
						 colno, isnull);
}

/*
 * Column "colno" (1-based) of the first row the last statement returned.
 */
Datum
idem_get_column(int colno, bool *isnull)
{
	return idem_get_row_column(0, colno, isnull);
}

/*
 * The jsonb value 'null', built once.
 */
Datum
idem_null_jsonb(void)
{
	static Jsonb *null_value = NULL;

	if (null_value == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		null_value = DatumGetJsonbP(DirectFunctionCall1(jsonb_in,
														CStringGetDatum("null")));
		MemoryContextSwitchTo(old);
	}
	return JsonbPGetDatum(null_value);
}
