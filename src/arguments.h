/*-------------------------------------------------------------------------
 *
 * arguments.h
 *	  Argument checks shared by the SQL-callable functions (arguments.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_ARGUMENTS_H
#define IDEM_ARGUMENTS_H

#include "access/attnum.h"
#include "fmgr.h"
#include "utils/timestamp.h"

/* Each raises 22023 with a useful hint. */
extern void idem_require_arg(FunctionCallInfo fcinfo, int argno,
							 const char *argname);
extern text *idem_arg_name(FunctionCallInfo fcinfo, int argno,
						   const char *argname, int min_chars,
						   int max_chars);
extern int	idem_arg_array(FunctionCallInfo fcinfo, int argno,
						   const char *argname, Oid elemtype, int expected,
						   Datum **elems, bool **nulls);
extern int	idem_arg_name_array(FunctionCallInfo fcinfo, int argno,
								const char *argname, int min_chars,
								int max_chars, int expected, Datum **elems);
extern text *idem_arg_key(FunctionCallInfo fcinfo, int argno);
extern text *idem_arg_scope(FunctionCallInfo fcinfo, int argno);
extern Interval *idem_arg_interval(FunctionCallInfo fcinfo, int argno,
								   const char *argname,
								   const Interval *default_value);
extern int32 idem_arg_positive_int(FunctionCallInfo fcinfo, int argno,
								   const char *argname);
extern void idem_check_ttl_covers_lease(const Interval *ttl,
										const Interval *lease);
extern bool idem_interval_is_positive(const Interval *span);
extern Interval *idem_arg_wait(FunctionCallInfo fcinfo, int argno);
extern Oid	idem_arg_table(FunctionCallInfo fcinfo, int argno);
extern char *idem_quote_table(Oid relid);
extern AttrNumber idem_arg_column(FunctionCallInfo fcinfo, int argno,
								  const char *argname, Oid relid);

#endif							/* IDEM_ARGUMENTS_H */
