/*-------------------------------------------------------------------------
 *
 * pg_compat.h
 *	  The differences between the PostgreSQL majors the extension supports
 *	  (15, 17 and 18; doc/testing.md), each behind one PG_VERSION_NUM
 *	  guard.  Nothing else in src/ tests the server version.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_PG_COMPAT_H
#define IDEM_PG_COMPAT_H

#include "access/genam.h"
#include "executor/executor.h"
#include "parser/parse_relation.h"
#include "replication/message.h"
#include "utils/guc.h"
#include "utils/rel.h"

/*
 * Memory for a GUC check hook's "extra": PostgreSQL 16 and later free it
 * with guc_free(), 15 with free().
 */
#if PG_VERSION_NUM >= 160000
#define idem_guc_malloc(size) guc_malloc(LOG, (size))
#else
#define idem_guc_malloc(size) malloc(size)
#endif

/* PostgreSQL 18 added the instrumentation argument of index_beginscan(). */
#if PG_VERSION_NUM >= 180000
#define idem_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#else
#define idem_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), (norderbys))
#endif

/* PostgreSQL 17 added the "flush" argument of LogLogicalMessage(). */
#if PG_VERSION_NUM >= 170000
#define idem_log_logical_message(prefix, message, size, transactional) \
	LogLogicalMessage((prefix), (message), (size), (transactional), false)
#else
#define idem_log_logical_message(prefix, message, size, transactional) \
	LogLogicalMessage((prefix), (message), (size), (transactional))
#endif

/*
 * The range table of a statement that writes "rel" (writes.c), as the
 * parser gives its target: one entry, with the privileges "perms" that the
 * statement needs and the columns it reads ("selected": its WHERE clause,
 * SET expressions, RETURNING), inserts and updates, each offset by
 * FirstLowInvalidHeapAttributeNumber.  The executor's permission check and
 * its hook (sepgsql, pgaudit) look at all of these, UPDATE OF triggers and
 * the lock mode at the updated columns.  checkAsUser is left unset, as in
 * the statement's entry: the check is for the current user.  PostgreSQL 16
 * moved the privileges and the columns to a list of their own,
 * "*perminfos" (NIL before).
 */
static inline void
idem_make_range_table(Relation rel, AclMode perms, Bitmapset *selected,
					  Bitmapset *inserted, Bitmapset *updated,
					  List **rtable, List **perminfos)
{
	RangeTblEntry *rte = makeNode(RangeTblEntry);

	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = rel->rd_rel->relkind;
	rte->rellockmode = RowExclusiveLock;
	*perminfos = NIL;
#if PG_VERSION_NUM >= 160000
	{
		RTEPermissionInfo *perminfo = addRTEPermissionInfo(perminfos, rte);

		perminfo->requiredPerms = perms;
		perminfo->selectedCols = selected;
		perminfo->insertedCols = inserted;
		perminfo->updatedCols = updated;
	}
#else
	rte->requiredPerms = perms;
	rte->selectedCols = selected;
	rte->insertedCols = inserted;
	rte->updatedCols = updated;
#endif
	*rtable = list_make1(rte);
}

/* PostgreSQL 16 added the permissions, 18 the relations left after pruning. */
#if PG_VERSION_NUM >= 180000
#define idem_exec_init_range_table(estate, rtable, perminfos) \
	ExecInitRangeTable((estate), (rtable), (perminfos), bms_make_singleton(1))
#elif PG_VERSION_NUM >= 160000
#define idem_exec_init_range_table(estate, rtable, perminfos) \
	ExecInitRangeTable((estate), (rtable), (perminfos))
#else
#define idem_exec_init_range_table(estate, rtable, perminfos) \
	ExecInitRangeTable((estate), (rtable))
#endif

/*
 * The executor's permission check of a range table, as a statement's start
 * makes it (an error for a privilege missing), ending with
 * ExecutorCheckPerms_hook: ExecCheckPermissions() since PostgreSQL 16,
 * ExecCheckRTPerms() before.
 */
#if PG_VERSION_NUM >= 160000
#define idem_check_permissions(rtable, perminfos) \
	((void) ExecCheckPermissions((rtable), (perminfos), true))
#else
#define idem_check_permissions(rtable, perminfos) \
	((void) ExecCheckRTPerms((rtable), true))
#endif

/* PostgreSQL 16 added the result relations of EvalPlanQualInit(). */
#if PG_VERSION_NUM >= 160000
#define idem_epq_init(epqstate, estate) \
	EvalPlanQualInit((epqstate), (estate), NULL, NIL, -1, NIL)
#else
#define idem_epq_init(epqstate, estate) \
	EvalPlanQualInit((epqstate), (estate), NULL, NIL, -1)
#endif

/* this backend's local transaction id: PGPROC's vxid.lxid since 17 */
#if PG_VERSION_NUM >= 170000
#define IDEM_MY_LXID (MyProc->vxid.lxid)
#else
#define IDEM_MY_LXID (MyProc->lxid)
#endif

#endif							/* IDEM_PG_COMPAT_H */
