/*-------------------------------------------------------------------------
 *
 * relations.h
 *	  The catalog helpers: the extension's relations and columns, and
 *	  direct index scans of its tables (relations.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_RELATIONS_H
#define IDEM_RELATIONS_H

#include "access/genam.h"
#include "access/tableam.h"
#include "executor/tuptable.h"
#include "utils/inval.h"

#include "pg_compat.h"

/* A direct index scan of one of the extension's tables. */
typedef struct IdemIndexScan
{
	Relation	rel;
	Relation	index;
	IndexScanDesc scan;			/* NULL until the first row is asked for */
	ScanKey		keys;			/* the caller's, kept until then */
	int			nkeys;
	TupleTableSlot *slot;		/* the current row */
	Snapshot	snapshot;		/* the scan's, active until the end */
} IdemIndexScan;

extern Oid	idem_relation_oid(const char *relname);
extern void idem_refuse_citus_table(Oid relid, const char *relname);
extern Relation idem_table_open(const char *relname, LOCKMODE lockmode);
/* the library's one relcache callback hands each invalidation on to these */
extern void idem_on_relcache_change(RelcacheCallbackFunction hook);
extern AttrNumber idem_column_attnum(Oid relid, const char *colname);
/* PostgreSQL 18 replaced pg_attribute_noreturn() with the pg_noreturn prefix */
#ifdef pg_attribute_noreturn
extern void idem_refuse_old_extension(void) pg_attribute_noreturn();
#else
extern pg_noreturn void idem_refuse_old_extension(void);
#endif
extern void idem_require_column(const char *relname, const char *attname);
extern Snapshot idem_push_statement_snapshot(void);
extern void idem_index_scan_begin(IdemIndexScan *scan, const char *relname,
								  const char *indexname, LOCKMODE lockmode,
								  ScanKey keys, int nkeys);
extern bool idem_index_scan_next(IdemIndexScan *scan);
extern void idem_index_scan_restart(IdemIndexScan *scan, Snapshot snapshot);
extern void idem_index_scan_end(IdemIndexScan *scan);

/*
 * Where the columns a C file reads are in one of the extension's tables
 * (relations.c).  idem_learn_columns() finds them by name and checks their
 * types (InvalidOid: any); "relid" is cleared by a relcache invalidation
 * of the table, so a changed table is learnt again.  The last "noptional"
 * columns are those of a later version: a table without them (a database
 * not yet updated) leaves their attnums InvalidAttrNumber.
 */
typedef struct IdemColumns
{
	int			ncolumns;
	const char *const *names;
	const Oid  *types;
	AttrNumber *attnums;		/* ncolumns entries */
	Oid			relid;			/* InvalidOid until learnt */
	int			noptional;		/* the last ones, of a later version */
} IdemColumns;

extern bool idem_learn_columns(IdemColumns *columns, Relation rel);

#endif							/* IDEM_RELATIONS_H */
