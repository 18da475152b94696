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
 * An executor state's range table of the one relation "rel" (writes.c), as
 * logical replication's apply worker builds it, with the columns an update
 * sets ("updated_cols", offset by FirstLowInvalidHeapAttributeNumber, for
 * UPDATE OF triggers and the lock mode): PostgreSQL 16 moved them, with
 * the permission checks, to a list of their own; 18 added the relations
 * left after pruning.
 */
static inline void
idem_init_range_table(EState *estate, Relation rel, Bitmapset *updated_cols)
{
	RangeTblEntry *rte = makeNode(RangeTblEntry);

	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = rel->rd_rel->relkind;
	rte->rellockmode = RowExclusiveLock;
#if PG_VERSION_NUM >= 160000
	{
		List	   *perminfos = NIL;

		addRTEPermissionInfo(&perminfos, rte)->updatedCols = updated_cols;
#if PG_VERSION_NUM >= 180000
		ExecInitRangeTable(estate, list_make1(rte), perminfos,
						   bms_make_singleton(1));
#else
		ExecInitRangeTable(estate, list_make1(rte), perminfos);
#endif
	}
#else
	rte->updatedCols = updated_cols;
	ExecInitRangeTable(estate, list_make1(rte));
#endif
}

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
