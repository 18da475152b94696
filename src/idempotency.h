/*-------------------------------------------------------------------------
 *
 * idempotency.h
 *	  Declarations shared by the C files of the idempotency extension:
 *	  settings, argument checks, cached plans and owner rights.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEMPOTENCY_H
#define IDEMPOTENCY_H

#include "fmgr.h"
#include "access/genam.h"
#include "access/tableam.h"
#include "access/xlogdefs.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "pg_compat.h"

/* Longest scope, consumer and event id, in characters (doc/reference.md). */
#define IDEM_MAX_NAME_CHARS 255

/* Settings, defined in idempotency.c. */
extern Interval idem_default_ttl;
extern Interval idem_lease_timeout;
extern Interval idem_token_ttl;
extern Interval idem_outbox_retry_backoff;
extern Interval idem_processed_retention;
extern Interval idem_outbox_retention;
extern Interval *idem_default_response_ttl;	/* NULL: unset */
extern int	idem_max_key_length;
extern int	idem_max_response_bytes;
extern int	idem_outbox_max_attempts;
extern bool idem_outbox_notify;
extern int	idem_outbox_notify_interval;
extern int	idem_metrics_max_scopes;
extern int	idem_metrics_max_scopes_per_role;
extern Interval idem_outbox_max_lease;
extern int	idem_outbox_max_batch;
extern bool idem_track_outcomes;
extern bool idem_direct_writes;
extern int	idem_max_waiters_per_key;

/* Argument checks, in arguments.c; each raises 22023 with a useful hint. */
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
extern AttrNumber idem_column_attnum(Oid relid, const char *colname);

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

/*
 * The answer of a claim: the columns of idempotency.claim_result, in order.
 */
typedef enum ClaimResultColumn
{
	CLAIM_OUTCOME,
	CLAIM_FENCE,
	CLAIM_STATUS,
	CLAIM_RESPONSE_CODE,
	CLAIM_RESPONSE_BODY,
	CLAIM_RECOVERY_POINT,
	CLAIM_ATTEMPTS,
	CLAIM_RETRY_AFTER,
	CLAIM_RESULT_NATTS
} ClaimResultColumn;

/*
 * How the holder of a key is recorded and checked (keys.c, "Holders"), and
 * likewise the role of an outbox lease, by the SQL of each version.
 */
typedef enum IdemHolders
{
	IDEM_HOLDERS_NONE,			/* before 1.7: not recorded, not checked */
	IDEM_HOLDERS_BY_OID,		/* 1.7: holder_role, an OID */
	IDEM_HOLDERS_BY_NAME		/* 1.8: and holder_role_name, the binding
								 * checked (roles.c) */
} IdemHolders;

typedef struct IdemClaim
{
	const char *outcome;		/* claimed, resumed, replay, gone,
								 * in_progress, mismatch */
	Datum		values[CLAIM_RESULT_NATTS];
	bool		nulls[CLAIM_RESULT_NATTS];
	bytea	   *request_hash;	/* fingerprint of the request, or NULL */
	TimestampTz now;			/* the claim's clock reading */
	Oid			holder;			/* set by the caller: the role recorded as
								 * holder_role of a key the claim takes
								 * (1.7), or InvalidOid: none */
	IdemHolders holders;		/* set by the caller: how it is recorded */
} IdemClaim;

/* idem_claim_key()'s flags */
#define IDEM_CLAIM_CREATE_LATER 0x01	/* execute(): see keys.c */
#define IDEM_CLAIM_ANSWERS_EXPIRE 0x02	/* the SQL of 1.6: gone */

/* keys.c; the caller is connected to SPI and runs as the owner. */
extern void idem_claim_key(text *key, text *scope, Jsonb *request,
						   Interval *ttl, Interval *lease, int flags,
						   IdemClaim *claim);
extern void idem_claim_key_waiting(text *key, text *scope, Jsonb *request,
								   Interval *ttl, Interval *lease, int flags,
								   Interval *wait, IdemClaim *claim);
extern void idem_finish_key(text *key, text *scope, int64 fence,
							bool completed, Datum body, bool body_isnull,
							int32 response_code, bool retryable,
							Interval *ttl, Interval *response_ttl,
							Oid caller, IdemHolders holders);
extern void idem_claim_completed(IdemClaim *claim, Jsonb *body);
extern void idem_insert_completed_key(text *key, text *scope, Interval *ttl,
									  Interval *response_ttl, Jsonb *body,
									  IdemClaim *claim);
extern bool idem_claim_runs_work(const IdemClaim *claim);
extern Datum idem_claim_datum(FunctionCallInfo fcinfo, IdemClaim *claim);
extern Jsonb *idem_arg_response(FunctionCallInfo fcinfo, int argno,
								const char *argname);
extern int32 idem_arg_response_code(FunctionCallInfo fcinfo, int argno);
extern Interval *idem_arg_answer_interval(FunctionCallInfo fcinfo, int argno,
										  const char *argname, bool final,
										  Interval *default_value);

/* waits.c: waiting for the holder of a key (claim's wait) */
extern Size idem_wait_shmem_size(void);
extern void idem_wait_shmem_init(void);
extern bool idem_wait_available(void);
extern void idem_wake_waiters_at_commit(const pg_uuid_t *key_hash);
extern uint64 idem_wait_generation(const pg_uuid_t *key_hash);
extern bool idem_wait_for_holder(const pg_uuid_t *key_hash, uint64 seen,
								 TimestampTz until);
extern void idem_wait_count_unchanged(void);
extern int	idem_wait_take_ticket(const pg_uuid_t *key_hash);
extern void idem_wait_return_ticket(const pg_uuid_t *key_hash, int ticket);

/* standby.c: waiting for the holder on a hot standby, by watching replay */
extern bool idem_wait_watches_replay(void);
extern XLogRecPtr idem_replay_position(void);
extern bool idem_wait_for_replay(XLogRecPtr seen, TimestampTz until);

/* fingerprint.c */
extern bytea *idem_fingerprint(Jsonb *request);
extern void idem_sha256(const char *data, size_t len, uint8 *digest);
extern uint64 idem_hash_pair(text *a, text *b);
extern void idem_key_hash(text *scope, text *key, pg_uuid_t *hash);

/* relations.c: the library's one relcache callback hands on to these */
extern void idem_on_relcache_change(RelcacheCallbackFunction hook);

/* A direct index scan of one of the extension's tables (relations.c). */
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

/* The outcome of idem_insert_row() and idem_update_row() (writes.c). */
typedef enum IdemWriteResult
{
	IDEM_WRITE_DONE,
	IDEM_WRITE_SKIPPED,			/* by a BEFORE trigger */
	IDEM_WRITE_NO_ROW,			/* no row to update */
	IDEM_WRITE_BY_STATEMENT		/* nothing done: run the statement */
} IdemWriteResult;

/* Whether a row found by idem_update_row() is the one to update. */
typedef bool (*IdemRowTest) (TupleTableSlot *slot, void *arg);

/* Set the updated columns in a row's values (one per attribute). */
typedef void (*IdemRowChange) (Datum *values, bool *isnull, void *arg);

/*
 * The columns that the statement a direct write stands for names, as its
 * permission check sees them (writes.c): those it writes (an INSERT's
 * column list, an UPDATE's SET list) and those it reads (a WHERE clause,
 * SET expressions, RETURNING), by attribute number, in an order of the
 * caller's that stays the same from call to call.
 */
typedef struct IdemStatementColumns
{
	const AttrNumber *written;
	int			nwritten;
	const AttrNumber *read;
	int			nread;
} IdemStatementColumns;

typedef struct IdemRowInserter IdemRowInserter;

extern IdemWriteResult idem_insert_row(Relation rel, const Datum *values,
									   const bool *isnull, const bool *given,
									   const IdemStatementColumns *columns);
extern IdemRowInserter *idem_begin_inserts(Relation rel, const bool *given,
										   const IdemStatementColumns *columns);
extern bool idem_insert_next(IdemRowInserter *inserter, const Datum *values,
							 const bool *isnull);
extern Datum idem_inserted_value(IdemRowInserter *inserter, AttrNumber attnum,
								 bool *isnull);
extern bool idem_inserts_check_only(IdemRowInserter *inserter,
									Relation index);
extern void idem_end_inserts(IdemRowInserter *inserter);
extern IdemWriteResult idem_update_row(IdemIndexScan *scan,
									   const IdemStatementColumns *columns,
									   IdemRowTest matches, IdemRowChange change,
									   void *arg);

/*
 * The lock a transaction holds while it creates the row of a unique key
 * that no ON CONFLICT guards (writes.c): an advisory lock on 64 bits of a
 * hash of the key, in a space (pg_locks objsubid) of its own per table,
 * where pg_advisory_lock uses 1 and 2 and the outbox's locks 4.
 */
#define IDEM_CREATE_KEY_SPACE 3
#define IDEM_CREATE_MARK_SPACE 5

extern bool idem_lock_creation(uint64 hash, uint16 space);
extern void idem_unlock_creation(uint64 hash, uint16 space);
extern bool idem_holds_creation_lock(void);
extern void idem_wait_for_creator(uint64 hash, uint16 space,
								  TransactionId xid);

extern Oid	idem_relation_oid(const char *relname);
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

/*
 * roles.c: role bindings by name (1.8).  IDEM_BINDING_ALLOWS is the SQL of
 * idem_binding_allows() on the columns "oidcol" (the regrole) and "namecol"
 * (the name), with $oid the calling role's OID, $name its name and $priv
 * idem_role_privileged() of it (parameter numbers).
 */
#define IDEM_BINDING_ALLOWS(oidcol, namecol, oid, name, priv) \
	"((" oidcol " IS NULL AND " namecol " IS NULL)" \
	" OR " namecol " OPERATOR(pg_catalog.=) $" #name \
	" OR $" #priv \
	" OR EXISTS (SELECT FROM pg_catalog.pg_roles r" \
	"  WHERE r.rolname OPERATOR(pg_catalog.=) " namecol \
	"  AND pg_catalog.pg_has_role($" #oid ", r.oid, 'MEMBER')))"

extern Datum idem_role_name(Oid role);
extern bool idem_role_privileged(Oid role);
extern bool idem_role_exists(const char *name);
extern bool idem_binding_allows(Oid caller, bool oid_set, const char *name);

/* bookkeeping.c */
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

/*
 * The outcomes metrics.c counts, in the order of idempotency.metrics()'s
 * columns: the outcomes of a claim, then lease_lost (a holder call whose
 * fence no longer holds its key) and purged (keys purge deleted).
 */
typedef enum IdemOutcome
{
	IDEM_OUTCOME_CLAIMED,
	IDEM_OUTCOME_REPLAY,
	IDEM_OUTCOME_MISMATCH,
	IDEM_OUTCOME_IN_PROGRESS,
	IDEM_OUTCOME_RESUMED,
	IDEM_OUTCOME_GONE,
	IDEM_OUTCOME_LEASE_LOST,
	IDEM_OUTCOME_PURGED,
	IDEM_NOUTCOMES
} IdemOutcome;

/* scopes.c: the scopes a role may use (grant_scopes) */
extern void idem_check_scope(text *scope);
extern bool idem_scope_allowed(const char *scope, int len);

/* metrics.c; the counts are no-ops unless the library was preloaded */
extern void idem_metrics_shmem_request(void);
extern void idem_metrics_shmem_init(void);
extern void idem_metrics_install_hooks(void);
extern void idem_metrics_count(text *scope, IdemOutcome outcome, int64 n);
extern void idem_metrics_count_claim(text *scope, const char *outcome);

#endif							/* IDEMPOTENCY_H */
