/*-------------------------------------------------------------------------
 *
 * bookkeeping.h
 *	  The extension's own statements, prepared once and run as the
 *	  extension owner (bookkeeping.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_BOOKKEEPING_H
#define IDEM_BOOKKEEPING_H

#include "executor/spi.h"

/*
 * A statement of the extension's own bookkeeping.  It is prepared on first
 * use, kept for the life of the backend and run as the extension owner.
 * Its SQL qualifies every name, operator and function with its schema, so
 * the caller's search_path can neither change nor hijack it.
 */
#define IDEM_MAX_QUERY_ARGS 14

typedef struct IdemQuery
{
	const char *sql;
	int			nargs;
	Oid			argtypes[IDEM_MAX_QUERY_ARGS];
	SPIPlanPtr	plan;
} IdemQuery;

/* Saved identity while a C function runs as the extension owner. */
typedef struct IdemOwnerRights
{
	Oid			saved_userid;
	int			saved_sec_context;
} IdemOwnerRights;

extern SPIPlanPtr idem_prepare(IdemQuery *query);
extern int	idem_run(IdemQuery *query, Datum *values, const char *nulls,
					 bool read_only, long max_rows);
extern uint64 idem_run_as_owner(IdemQuery *query, Datum *values,
								const char *nulls, bool read_only,
								Datum *result, bool *result_isnull);
extern Oid	idem_extension_owner(void);
extern void idem_become_owner(IdemOwnerRights *saved);
extern void idem_restore_user(const IdemOwnerRights *saved);
extern Datum idem_get_row_column(uint64 row, int colno, bool *isnull);
extern Datum idem_get_column(int colno, bool *isnull);
extern Datum idem_null_jsonb(void);

#endif							/* IDEM_BOOKKEEPING_H */
