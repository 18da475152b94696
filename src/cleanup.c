/*-------------------------------------------------------------------------
 *
 * cleanup.c
 *	  Expiry: purge_expired_batch(), one batch of deletes of what has
 *	  expired; the procedure purge_expired() repeats it, committing after
 *	  each batch.
 *
 * Each relation is purged by one statement that picks at most batch_size
 * rows in the order of an index (so no sequential scan, however large the
 * table), locks them FOR UPDATE SKIP LOCKED (so a row that a claim, a
 * consumer or a relay holds is skipped, not waited for) and deletes them
 * by ctid (a TID scan).  The outer DELETE repeats the condition, so a row
 * that changed between the two is left alone.  What is live is never
 * picked: a key past expires_at whose holder still has a lease, a token
 * neither expired nor consumed, an outbox event not yet published.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "idempotency.h"

/*
 * The purge statement of one table: $1 is the cut-off time, $2 the batch
 * size.  "cond" selects what may go, "order" is the indexed column that
 * drives the scan.
 */
#define LE " OPERATOR(pg_catalog.<=) "
#define PURGE_SQL(table, cond, order) \
	"DELETE FROM idempotency." table \
	" WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY(" \
	"  SELECT ctid FROM idempotency." table " WHERE " cond \
	"  ORDER BY " order " LIMIT $2 FOR UPDATE SKIP LOCKED))" \
	" AND " cond
#define PURGE_QUERY(table, cond, order) \
	{.sql = PURGE_SQL(table, cond, order), .nargs = 2, \
	 .argtypes = {TIMESTAMPTZOID, INT4OID}}

/* The relations purge_expired_batch() reports on, in its output order. */
enum
{
	REL_KEYS,
	REL_TOKENS,
	REL_PROCESSED,
	REL_OUTBOX,
	REL_COUNT
};

static const char *const relation_names[REL_COUNT] = {
	"idempotency_keys", "tokens", "processed_events", "outbox_events"
};

typedef struct Purge
{
	int			relation;		/* REL_* this statement deletes from */
	const Interval *retention;	/* cut-off is now - retention; NULL: now */
	IdemQuery	query;
} Purge;

/*
 * The statements, each driven by an index: idempotency_keys_expires_at_idx,
 * tokens_expires_at_idx, tokens_consumed_at_idx (partial),
 * processed_events_processed_at_idx and outbox_events_published_at_idx
 * (partial).  A key goes once expired and not held under a live lease.
 */
static Purge purges[] = {
	{REL_KEYS, NULL,
		PURGE_QUERY("idempotency_keys",
					"expires_at" LE "$1"
					" AND (locked_until IS NULL OR locked_until" LE "$1)",
					"expires_at")},
	{REL_TOKENS, NULL,
	PURGE_QUERY("tokens", "expires_at" LE "$1", "expires_at")},
	{REL_TOKENS, NULL,
	PURGE_QUERY("tokens", "consumed_at" LE "$1", "consumed_at")},
	{REL_PROCESSED, &idem_processed_retention,
	PURGE_QUERY("processed_events", "processed_at" LE "$1", "processed_at")},
	{REL_OUTBOX, &idem_outbox_retention,
	PURGE_QUERY("outbox_events", "published_at" LE "$1", "published_at")},
};

/* SQL-callable functions */
PG_FUNCTION_INFO_V1(idempotency_purge_expired_batch);

/*
 * purge_expired_batch(batch_size int) RETURNS TABLE(relation text,
 * deleted bigint): one batch in the caller's transaction, at most
 * batch_size rows per relation.
 */
Datum
idempotency_purge_expired_batch(PG_FUNCTION_ARGS)
{
	int32		batch_size = idem_arg_positive_int(fcinfo, 0, "batch_size");
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentStatementStartTimestamp();
	int64		deleted[REL_COUNT] = {0};
	IdemOwnerRights owner;
	int			i;

	InitMaterializedSRF(fcinfo, 0);

	idem_become_owner(&owner);
	SPI_connect();
	for (i = 0; i < (int) lengthof(purges); i++)
	{
		Purge	   *purge = &purges[i];
		int64		room = batch_size - deleted[purge->relation];
		Datum		values[2];

		CHECK_FOR_INTERRUPTS();
		if (room <= 0)
			continue;
		values[0] = TimestampTzGetDatum(now);
		if (purge->retention != NULL)
			values[0] = DirectFunctionCall2(timestamptz_mi_interval, values[0],
											IntervalPGetDatum(purge->retention));
		values[1] = Int32GetDatum((int32) room);
		deleted[purge->relation] += idem_run(&purge->query, values, NULL,
											 false, 0);
	}
	SPI_finish();
	idem_restore_user(&owner);

	for (i = 0; i < REL_COUNT; i++)
	{
		Datum		row[2];
		bool		nulls[2] = {false, false};

		row[0] = CStringGetTextDatum(relation_names[i]);
		row[1] = Int64GetDatum(deleted[i]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, row, nulls);
	}
	return (Datum) 0;
}
