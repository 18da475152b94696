/*
 * hook_counter: counts the calls of ExecutorCheckPerms_hook per relation,
 * and keeps what the last call asked of each (privileges and columns), for
 * test/integration/permission_hook.sh.  LOAD it, then:
 *
 *   CREATE FUNCTION hook_counter_calls(OUT rel regclass, OUT calls bigint,
 *     OUT last text) RETURNS SETOF record AS 'hook_counter' LANGUAGE C;
 *   CREATE FUNCTION hook_counter_reset() RETURNS void
 *     AS 'hook_counter' LANGUAGE C;
 */
#include "postgres.h"

#include "access/sysattr.h"
#include "executor/executor.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

PG_MODULE_MAGIC;

#define MAX_RELATIONS 64

static struct
{
	Oid			relid;
	int64		calls;
	char	   *last;
}			counted[MAX_RELATIONS];
static int	ncounted = 0;
static ExecutorCheckPerms_hook_type next_hook = NULL;

void		_PG_init(void);

static void
append_columns(StringInfo buf, const char *what, Oid relid, Bitmapset *cols)
{
	int			col = -1;
	const char *sep = "";

	appendStringInfo(buf, " %s(", what);
	while ((col = bms_next_member(cols, col)) >= 0)
	{
		AttrNumber	attnum = col + FirstLowInvalidHeapAttributeNumber;

		appendStringInfo(buf, "%s%s", sep,
						 attnum > 0 ? get_attname(relid, attnum, false) : "*");
		sep = ",";
	}
	appendStringInfoChar(buf, ')');
}

static void
count(Oid relid, AclMode perms, Bitmapset *selected, Bitmapset *inserted,
	  Bitmapset *updated)
{
	MemoryContext caller = MemoryContextSwitchTo(TopMemoryContext);
	StringInfoData buf;
	int			i;

	for (i = 0; i < ncounted && counted[i].relid != relid; i++)
		;
	if (i == MAX_RELATIONS)
		elog(ERROR, "hook_counter: too many relations");
	if (i == ncounted)
	{
		counted[ncounted].relid = relid;
		counted[ncounted].calls = 0;
		counted[ncounted++].last = NULL;
	}
	initStringInfo(&buf);
	appendStringInfo(&buf, "%s%s%s%s",
					 perms & ACL_INSERT ? ",INSERT" : "",
					 perms & ACL_UPDATE ? ",UPDATE" : "",
					 perms & ACL_DELETE ? ",DELETE" : "",
					 perms & ACL_SELECT ? ",SELECT" : "");
	if (buf.len > 0)
		memmove(buf.data, buf.data + 1, buf.len--);	/* the first comma */
	append_columns(&buf, "selected", relid, selected);
	append_columns(&buf, "inserted", relid, inserted);
	append_columns(&buf, "updated", relid, updated);
	if (counted[i].last != NULL)
		pfree(counted[i].last);
	counted[i].last = buf.data;
	counted[i].calls++;
	MemoryContextSwitchTo(caller);
}

#if PG_VERSION_NUM >= 160000
static bool
check_perms(List *rtable, List *perminfos, bool ereport_on_violation)
{
	ListCell   *lc;

	foreach(lc, perminfos)
	{
		RTEPermissionInfo *p = lfirst_node(RTEPermissionInfo, lc);

		count(p->relid, p->requiredPerms, p->selectedCols, p->insertedCols,
			  p->updatedCols);
	}
	return next_hook == NULL ||
		next_hook(rtable, perminfos, ereport_on_violation);
}
#else
static bool
check_perms(List *rtable, bool ereport_on_violation)
{
	ListCell   *lc;

	foreach(lc, rtable)
	{
		RangeTblEntry *rte = lfirst_node(RangeTblEntry, lc);

		if (rte->rtekind == RTE_RELATION && rte->requiredPerms != 0)
			count(rte->relid, rte->requiredPerms, rte->selectedCols,
				  rte->insertedCols, rte->updatedCols);
	}
	return next_hook == NULL || next_hook(rtable, ereport_on_violation);
}
#endif

void
_PG_init(void)
{
	next_hook = ExecutorCheckPerms_hook;
	ExecutorCheckPerms_hook = check_perms;
}

PG_FUNCTION_INFO_V1(hook_counter_calls);
PG_FUNCTION_INFO_V1(hook_counter_reset);

Datum
hook_counter_calls(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < ncounted; i++)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		values[0] = ObjectIdGetDatum(counted[i].relid);
		values[1] = Int64GetDatum(counted[i].calls);
		values[2] = CStringGetTextDatum(counted[i].last);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

Datum
hook_counter_reset(PG_FUNCTION_ARGS)
{
	int			i;

	for (i = 0; i < ncounted; i++)
		pfree(counted[i].last);
	ncounted = 0;
	PG_RETURN_VOID();
}
