/*-------------------------------------------------------------------------
 *
 * arguments.c
 *	  Argument checks shared by the SQL-callable functions.
 *
 * The SQL functions are not STRICT: a NULL where the contract gives NULL no
 * meaning is an error (22023), never a silent NULL result.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "idempotency.h"
#include "arguments.h"
#include "relations.h"
#include "scopes.h"

/*
 * Largest ttl or lease given as an argument: 100 years.  Interval
 * comparison counts a year as 12 months of 30 days, so the limit is written
 * in months; 100 years of 365.25 days would let '101 years' through.
 */
#define IDEM_MAX_INTERVAL_MONTHS (100 * MONTHS_PER_YEAR)

/*
 * Raise 22023 when argument "argno" is NULL.
 */
void
idem_require_arg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be null", argname)));
}

/*
 * Check that "value", given as "argname", has min_chars..max_chars
 * characters (not bytes).
 */
static void
check_name_length(text *value, const char *argname, int min_chars,
				  int max_chars)
{
	int			nbytes = VARSIZE_ANY_EXHDR(value);
	int			nchars;

	/* a character takes one byte or more: most names need no counting */
	if (nbytes <= max_chars && nbytes >= min_chars && min_chars <= 1)
		return;
	nchars = pg_mbstrlen_with_len(VARDATA_ANY(value), nbytes);
	if (nchars < min_chars)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", argname)));
	if (nchars > max_chars)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too long", argname),
				 errdetail("It has %d characters; at most %d are allowed.",
						   nchars, max_chars)));
}

/*
 * A text argument of min_chars..max_chars characters (not bytes).
 */
text *
idem_arg_name(FunctionCallInfo fcinfo, int argno, const char *argname,
			  int min_chars, int max_chars)
{
	text	   *value;

	idem_require_arg(fcinfo, argno, argname);
	value = PG_GETARG_TEXT_PP(argno);
	check_name_length(value, argname, min_chars, max_chars);
	return value;
}

/*
 * A one-dimensional array argument of "elemtype" (text or jsonb): its
 * elements in *elems, their number returned.  A NULL array, or a NULL
 * element where "nulls" is NULL, raises 22023; otherwise the elements'
 * NULL flags go to *nulls.  The array is checked against "expected"
 * elements when that is not negative (the other arrays of the call).
 */
int
idem_arg_array(FunctionCallInfo fcinfo, int argno, const char *argname,
			   Oid elemtype, int expected, Datum **elems, bool **nulls)
{
	ArrayType  *array;
	bool	   *elem_nulls;
	int			n;
	int			i;

	idem_require_arg(fcinfo, argno, argname);
	array = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a one-dimensional array", argname)));
	deconstruct_array(array, elemtype, -1, false, TYPALIGN_INT, elems,
					  &elem_nulls, &n);
	if (expected >= 0 && n != expected)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s has %d elements, the other arrays %d", argname, n,
						expected),
				 errhint("Pass one element per event in every array.")));
	if (nulls != NULL)
		*nulls = elem_nulls;
	else
		for (i = 0; i < n; i++)
			if (elem_nulls[i])
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("%s must not contain nulls", argname),
						 errdetail("Element %d is null.", i + 1)));
	return n;
}

/*
 * A text[] argument whose every element has min_chars..max_chars
 * characters; see idem_arg_array().
 */
int
idem_arg_name_array(FunctionCallInfo fcinfo, int argno, const char *argname,
					int min_chars, int max_chars, int expected,
					Datum **elems)
{
	int			n = idem_arg_array(fcinfo, argno, argname, TEXTOID, expected,
								   elems, NULL);
	int			i;

	for (i = 0; i < n; i++)
		check_name_length(DatumGetTextPP((*elems)[i]), argname, min_chars,
						  max_chars);
	return n;
}

/*
 * An idempotency key: 1 to idempotency.max_key_length characters.
 */
text *
idem_arg_key(FunctionCallInfo fcinfo, int argno)
{
	text	   *key;
	int			nchars;

	idem_require_arg(fcinfo, argno, "key");
	key = PG_GETARG_TEXT_PP(argno);
	nchars = VARSIZE_ANY_EXHDR(key);
	/* characters only need counting when there are more bytes than allowed */
	if (nchars > idem_max_key_length)
		nchars = pg_mbstrlen_with_len(VARDATA_ANY(key), nchars);
	if (nchars == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idempotency key must not be empty"),
				 errhint("Send a client-generated unique value, such as a UUID, in the Idempotency-Key header.")));
	if (nchars > idem_max_key_length)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idempotency key is too long"),
				 errdetail("It has %d characters; idempotency.max_key_length allows %d.",
						   nchars, idem_max_key_length)));
	return key;
}

/*
 * A scope: 0 to 255 characters; '' is the default scope.  The calling role
 * must be allowed to use it (scopes.c): 42501 otherwise.
 */
text *
idem_arg_scope(FunctionCallInfo fcinfo, int argno)
{
	text	   *scope = idem_arg_name(fcinfo, argno, "scope", 0,
									  IDEM_MAX_NAME_CHARS);

	idem_check_scope(scope);
	return scope;
}

/*
 * True when the interval is longer than zero.  Months and days count as 30
 * days and 24 hours, as interval comparison does.
 */
bool
idem_interval_is_positive(const Interval *span)
{
	Interval	zero = {0};

	return DatumGetBool(DirectFunctionCall2(interval_gt,
											IntervalPGetDatum(span),
											IntervalPGetDatum(&zero)));
}

/*
 * An interval argument: NULL means default_value when there is one; the
 * value must be positive and at most 100 years.
 */
Interval *
idem_arg_interval(FunctionCallInfo fcinfo, int argno, const char *argname,
				  const Interval *default_value)
{
	Interval   *span;
	Interval	limit = {.month = IDEM_MAX_INTERVAL_MONTHS};

	if (PG_ARGISNULL(argno) && default_value != NULL)
		return (Interval *) default_value;
	idem_require_arg(fcinfo, argno, argname);
	span = PG_GETARG_INTERVAL_P(argno);
	if (!idem_interval_is_positive(span))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be positive", argname),
				 errdetail("The %s given is %s.", argname,
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(span))))));
	if (DatumGetBool(DirectFunctionCall2(interval_gt, IntervalPGetDatum(span),
										 IntervalPGetDatum(&limit))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be at most 100 years", argname)));
	return span;
}

/*
 * The wait argument of claim() and execute() (NULL: do not wait), as an
 * interval argument; NULL for a call of an older signature,
 * which has none.
 */
Interval *
idem_arg_wait(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	return idem_arg_interval(fcinfo, argno, "wait", NULL);
}

/*
 * A positive integer argument (batch sizes).
 */
int32
idem_arg_positive_int(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	int32		value;

	idem_require_arg(fcinfo, argno, argname);
	value = PG_GETARG_INT32(argno);
	if (value <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be positive", argname),
				 errdetail("The %s given is %d.", argname, value)));
	return value;
}

/*
 * A key must live at least as long as the lease that protects it, or it
 * could expire, and be claimed afresh, while its holder still works.
 */
void
idem_check_ttl_covers_lease(const Interval *ttl, const Interval *lease)
{
	if (DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(ttl),
										 IntervalPGetDatum(lease))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must not be shorter than the lease"),
				 errdetail("The ttl is %s and the lease is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(ttl))),
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(lease)))),
				 errhint("Give a longer ttl, or a shorter lease (idempotency.lease_timeout).")));
}

/*
 * A regclass argument naming an existing relation.  regclass input already
 * rejects unknown names; a bare OID that names nothing raises 42P01 here.
 */
Oid
idem_arg_table(FunctionCallInfo fcinfo, int argno)
{
	Oid			relid;

	idem_require_arg(fcinfo, argno, "tbl");
	relid = PG_GETARG_OID(argno);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	return relid;
}

/*
 * The schema-qualified, quoted name of a relation, for SQL text.
 */
char *
idem_quote_table(Oid relid)
{
	char	   *relname = get_rel_name(relid);
	char	   *nspname = get_namespace_name(get_rel_namespace(relid));

	/* the table was dropped since its argument was read */
	if (relname == NULL || nspname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid)));
	return quote_qualified_identifier(nspname, relname);
}

/*
 * A name argument naming a user column of relation "relid".
 */
AttrNumber
idem_arg_column(FunctionCallInfo fcinfo, int argno, const char *argname,
				Oid relid)
{
	idem_require_arg(fcinfo, argno, argname);
	return idem_column_attnum(relid, NameStr(*PG_GETARG_NAME(argno)));
}
