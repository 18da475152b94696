/*-------------------------------------------------------------------------
 *
 * relcache_hog.c
 *	  Takes relcache callback slots of the backend, as other libraries
 *	  loaded beside the extension do (Citus takes five), so that a test can
 *	  leave the extension only one.  Not part of the extension.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/inval.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(relcache_hog_take);

static void
ignore_relcache(Datum arg, Oid relid)
{
}

/* relcache_hog_take(n): registers n relcache callbacks; returns n */
Datum
relcache_hog_take(PG_FUNCTION_ARGS)
{
	int32		n = PG_GETARG_INT32(0);
	int32		i;

	for (i = 0; i < n; i++)
		CacheRegisterRelcacheCallback(ignore_relcache, (Datum) 0);
	PG_RETURN_INT32(n);
}
