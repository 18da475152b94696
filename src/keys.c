/*-------------------------------------------------------------------------
 *
 * keys.c
 *	  Request keys: claim, the holder calls (complete, fail, checkpoint,
 *	  release) and lookup.
 *
 * A claim is decided by a read and at most one write, run as the extension
 * owner:
 *
 *	1. a read of the key, a direct probe of the primary key index (every
 *	   claim takes this step, so it skips the executor).  A completed key
 *	   (replay, or gone once its answer's response_expires_at has come),
 *	   another request under the key (mismatch) or a live lease
 *	   (in_progress) is answered from it, writing nothing.  Those answers
 *	   cannot be made stale by a concurrent transaction: completed keys only
 *	   change once they expire, and a live lease is only taken over once it
 *	   runs out.
 *	2. a key the read found absent, and still absent once the lock for
 *	   creating it is held (see "Creating a key" below), is inserted as a
 *	   plain INSERT would insert it: every other creator waits for that
 *	   lock, so the speculative insertion of ON CONFLICT would buy nothing.
 *	   The row goes through the executor's row primitives (writes.c) when
 *	   the table takes them, else through the cached INSERT.  A row
 *	   of the key written around the functions at that very moment (by
 *	   hand, by a subscription's apply worker) makes the claim fail with
 *	   the unique index's 23505, as any INSERT would.
 *	3. otherwise one cached INSERT ... ON CONFLICT DO UPDATE ... WHERE <may
 *	   take over> takes the key atomically: an expired key, a crashed
 *	   holder's key, a retryable failure, or the key a concurrent insert
 *	   won.  It waits for a concurrent holder of the index entry or row
 *	   lock; when it declines, it has locked the row, and a second read,
 *	   with a new snapshot, classifies it.
 *
 * complete(), fail(), checkpoint() and release() are each one cached
 * UPDATE or DELETE guarded by the fence; complete() and fail() write their
 * update with the executor's row primitives when the table takes them
 * (writes.c: the row found through the primary key and locked as the
 * UPDATE locks it, the fence checked again on the version locked).  Fences
 * come from one sequence, so a later holder always has a larger fence than
 * any earlier one, even after the key was purged and created again.  No
 * row means the caller no longer holds the key.  They also check,
 * on the same row, that the calling role is the one that claimed it (or a
 * member of it), before the fence: see "Holders" below.
 *
 * Every other write is a statement run through SPI.  Either way the
 * executor applies every rule a user may add to the table (triggers,
 * constraints, indexes being built, row security), and nothing is written
 * in a read-only transaction or on a hot standby (25006).  The read of
 * step 1 skips the executor: a claim that it answers writes nothing, and
 * works on a standby.
 *
 * The clock.  A call reads the clock once, when it starts its work (not the
 * statement's or the transaction's start: a claim late in a long statement
 * or in a procedure after a COMMIT would otherwise be granted a lease that
 * has already run out), and passes the reading to its statements as "now",
 * so that the C decisions and the SQL agree.  A claim that had to wait for
 * another transaction creating the same key reads the clock again after
 * the wait, and an upsert that waited for a row lock grants the lease from
 * the clock after the wait: every lease, expiry and retention written is at
 * least the reading plus its interval.
 *
 * Creating a key.  execute() runs its statement before the key's row
 * exists, so every transaction that creates a key first takes the lock for
 * creating it (idem_lock_creation() of writes.c, objsubid 3) and then
 * waits for any transaction whose uncommitted row of the key it finds (a
 * dirty read of the index).  The lock is released as soon as the key's row
 * is written, not at commit: from then on the row itself makes concurrent
 * creators wait, as for any unique index.  So a transaction holds at most
 * one such lock at a time, however many keys it claims.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/htup_details.h"
#include "access/nbtree.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "idempotency.h"
#include "arguments.h"
#include "bookkeeping.h"
#include "fingerprint.h"
#include "keys.h"
#include "metrics.h"
#include "relations.h"
#include "roles.h"
#include "standby.h"
#include "waits.h"
#include "writes.h"

/* Shorthands for the qualified operators of the statements below. */
#define EQ " OPERATOR(pg_catalog.=) "
#define LT " OPERATOR(pg_catalog.<) "
#define LE " OPERATOR(pg_catalog.<=) "
#define GT " OPERATOR(pg_catalog.>) "
#define PLUS " OPERATOR(pg_catalog.+) "

/*
 * The table of keys is indexed by key_hash, a 16-byte hash of (scope, key)
 * (idempotency.key_hash()), whatever the key's length; the reads and the
 * claiming statements still compare scope and key (the holder calls compare
 * the fence instead: see HELD_BY_FENCE).  The library serves the layout of
 * the version it ships and of the versions before it back to 1.2, so that a
 * database keeps working between the installation of a new library and its
 * ALTER EXTENSION ... UPDATE:
 * - [KEYS_NAME_HOLDER] 1.8: as 1.7, and the holder's name too, in
 *   holder_role_name (see "Holders" below).  Only the symbols of 1.8 use
 *   this layout;
 * - [KEYS_RECORD_HOLDER] 1.7: as 1.6, and a claim that makes a holder
 *   records the role that claimed in holder_role (see "Holders" below).
 *   Only the symbols of 1.7 use this layout;
 * - [KEYS_EXPIRE_ANSWERS] 1.6: as 1.3 to 1.5, and an answer may go before
 *   its key (response_expires_at): a claim that takes a key over sets it
 *   back to NULL, and a key created completed may have one.  Only the
 *   symbols of 1.6 use this layout (and claims of 1.6 answer gone), so
 *   the older ones behave as they did for a database not yet updated;
 * - [KEYS_WRITE_HASH] 1.3 to 1.5: key_hash is a plain column, which every
 *   INSERT writes (a trigger, a CHECK constraint in 1.3, holds it to the
 *   hash), so that logical replication sends it like any column;
 * - [KEYS_GENERATE_HASH] 1.2: key_hash is a stored generated column, which
 *   INSERTs leave out (pgoutput of 15 and 17 does not send it).
 * Only the statements that create or take over a key differ.  A table of
 * 1.0 or 1.1, keyed by (scope, idempotency_key), is refused until the
 * database is updated.
 */
typedef enum KeyLayout
{
	KEYS_NAME_HOLDER,
	KEYS_RECORD_HOLDER,
	KEYS_EXPIRE_ANSWERS,
	KEYS_WRITE_HASH,
	KEYS_GENERATE_HASH,
	NLAYOUTS
} KeyLayout;

/* key_hash is $7 in the statements that create a key */
#define HASH_COLUMN_KEYS_NAME_HOLDER "key_hash, "
#define HASH_VALUE_KEYS_NAME_HOLDER "$7, "
#define HASH_COLUMN_KEYS_RECORD_HOLDER "key_hash, "
#define HASH_VALUE_KEYS_RECORD_HOLDER "$7, "
#define HASH_COLUMN_KEYS_EXPIRE_ANSWERS "key_hash, "
#define HASH_VALUE_KEYS_EXPIRE_ANSWERS "$7, "
#define HASH_COLUMN_KEYS_WRITE_HASH "key_hash, "
#define HASH_VALUE_KEYS_WRITE_HASH "$7, "
#define HASH_COLUMN_KEYS_GENERATE_HASH ""
#define HASH_VALUE_KEYS_GENERATE_HASH ""
#define HASH_COLUMN(layout) HASH_COLUMN_##layout
#define HASH_VALUE(layout) HASH_VALUE_##layout

/*
 * When the answer stored at "at" goes: at that time, unless it is not
 * before "key_expiry", when the key goes too: an answer never outlives
 * its key, and then the column stays NULL (and out of its index).
 */
#define ANSWER_EXPIRY(at, key_expiry) \
	"CASE WHEN " at LT key_expiry " THEN " at " END"

/* 1.6: a claim that takes a key over leaves no answer expiry behind */
#define RESET_ANSWER_EXPIRY_KEYS_NAME_HOLDER "  response_expires_at = NULL,"
#define RESET_ANSWER_EXPIRY_KEYS_RECORD_HOLDER "  response_expires_at = NULL,"
#define RESET_ANSWER_EXPIRY_KEYS_EXPIRE_ANSWERS "  response_expires_at = NULL,"
#define RESET_ANSWER_EXPIRY_KEYS_WRITE_HASH ""
#define RESET_ANSWER_EXPIRY_KEYS_GENERATE_HASH ""
#define RESET_ANSWER_EXPIRY(layout) RESET_ANSWER_EXPIRY_##layout

/* 1.6: a key created completed, $10 the answer's expiry (or NULL) */
#define EXPIRY_COLUMN_KEYS_NAME_HOLDER ", response_expires_at"
#define EXPIRY_VALUE_KEYS_NAME_HOLDER ", $10"
#define EXPIRY_COLUMN_KEYS_RECORD_HOLDER ", response_expires_at"
#define EXPIRY_VALUE_KEYS_RECORD_HOLDER ", $10"
#define EXPIRY_COLUMN_KEYS_EXPIRE_ANSWERS ", response_expires_at"
#define EXPIRY_VALUE_KEYS_EXPIRE_ANSWERS ", $10"
#define EXPIRY_COLUMN_KEYS_WRITE_HASH ""
#define EXPIRY_VALUE_KEYS_WRITE_HASH ""
#define EXPIRY_COLUMN_KEYS_GENERATE_HASH ""
#define EXPIRY_VALUE_KEYS_GENERATE_HASH ""
#define EXPIRY_COLUMN(layout) EXPIRY_COLUMN_##layout
#define EXPIRY_VALUE(layout) EXPIRY_VALUE_##layout

/*
 * 1.7: the role that claimed, $11, is the key's holder_role; a claim that
 * takes a key over records the new holder's.  1.8: and its name, in
 * holder_role_name (pg_get_userbyid() reads what GetUserNameFromId() does
 * on the direct path).
 */
#define HOLDER_COLUMN_KEYS_NAME_HOLDER ", holder_role, holder_role_name"
#define HOLDER_VALUE_KEYS_NAME_HOLDER ", $11, pg_catalog.pg_get_userbyid($11)"
#define SET_HOLDER_KEYS_NAME_HOLDER "  holder_role = excluded.holder_role," \
	"  holder_role_name = excluded.holder_role_name,"
#define HOLDER_COLUMN_KEYS_RECORD_HOLDER ", holder_role"
#define HOLDER_VALUE_KEYS_RECORD_HOLDER ", $11"
#define SET_HOLDER_KEYS_RECORD_HOLDER "  holder_role = excluded.holder_role,"
#define HOLDER_COLUMN_KEYS_EXPIRE_ANSWERS ""
#define HOLDER_VALUE_KEYS_EXPIRE_ANSWERS ""
#define SET_HOLDER_KEYS_EXPIRE_ANSWERS ""
#define HOLDER_COLUMN_KEYS_WRITE_HASH ""
#define HOLDER_VALUE_KEYS_WRITE_HASH ""
#define SET_HOLDER_KEYS_WRITE_HASH ""
#define HOLDER_COLUMN_KEYS_GENERATE_HASH ""
#define HOLDER_VALUE_KEYS_GENERATE_HASH ""
#define SET_HOLDER_KEYS_GENERATE_HASH ""
#define HOLDER_COLUMN(layout) HOLDER_COLUMN_##layout
#define HOLDER_VALUE(layout) HOLDER_VALUE_##layout
#define SET_HOLDER(layout) SET_HOLDER_##layout

/*
 * Holders.  A holder call (complete, fail, checkpoint, release) of a
 * key whose live row records a holder_role is refused (42501) unless the
 * calling role is that role or a member of it (is_member_of_role():
 * superusers are members of every role), whatever fence it passes: the
 * fence names the holder, the role proves it.  The check is made on the
 * row the call reads and locks anyway, before its fence is compared, so a
 * refused call learns nothing about the fence and writes nothing.  A key
 * claimed by a symbol of 1.6 or older (holder_role NULL) takes any role's
 * holder calls.  $n is the calling role's OID.
 *
 * With the symbols of 1.8 the role is the one holder_role_name names,
 * and the owner of the extension's tables and superusers may act too, on
 * every key: an OID may name another role after a restore or on a logical
 * subscriber, a name does not (roles.c).  $n is the calling role's OID, $n+1 its name,
 * $n+2 whether it is the owner's or a superuser (idem_role_privileged()).
 */
#define MAY_ACT_AS_HOLDER(n) "(holder_role IS NULL" \
	" OR holder_role::pg_catalog.oid" EQ "$" #n \
	" OR pg_catalog.pg_has_role($" #n ", holder_role::pg_catalog.oid, 'MEMBER'))"
#define MAY_ACT_BY_NAME(n, name, priv) \
	IDEM_BINDING_ALLOWS("holder_role", "holder_role_name", n, name, priv)

/* The key's row, with its key_hash in parameter $n */
#define KEY_IS_ARG(n) "key_hash" EQ "$" #n \
	" AND scope" EQ "$1 AND idempotency_key" EQ "$2"
#define ON_KEY " ON CONFLICT (key_hash)"

/* Every form of a statement whose text is SQL(layout). */
#define ALL_LAYOUTS(SQL, n, ...) { \
	{.sql = SQL(KEYS_NAME_HOLDER), .nargs = n, .argtypes = __VA_ARGS__}, \
	{.sql = SQL(KEYS_RECORD_HOLDER), .nargs = n, .argtypes = __VA_ARGS__}, \
	{.sql = SQL(KEYS_EXPIRE_ANSWERS), .nargs = n, .argtypes = __VA_ARGS__}, \
	{.sql = SQL(KEYS_WRITE_HASH), .nargs = n, .argtypes = __VA_ARGS__}, \
	{.sql = SQL(KEYS_GENERATE_HASH), .nargs = n, .argtypes = __VA_ARGS__} \
}

/*
 * The columns of idempotency.idempotency_keys that the C code knows.
 */
enum
{
	COL_SCOPE,
	COL_KEY,
	COL_REQUEST_HASH,
	COL_STATUS,
	COL_FENCE,
	COL_ATTEMPTS,
	COL_RECOVERY_POINT,
	COL_RESPONSE_CODE,
	COL_RESPONSE_BODY,
	COL_RETRYABLE,
	COL_LOCKED_UNTIL,
	COL_CREATED_AT,
	COL_UPDATED_AT,
	COL_EXPIRES_AT,
	COL_RESPONSE_EXPIRES_AT,	/* 1.6; absent before */
	COL_HOLDER_ROLE,			/* 1.7; absent before */
	COL_HOLDER_ROLE_NAME,		/* 1.8; absent before */
	KEY_NCOLUMNS
};

static const char *const key_column_names[KEY_NCOLUMNS] = {
	"scope", "idempotency_key", "request_hash", "status", "fence", "attempts",
	"recovery_point", "response_code", "response_body", "retryable",
	"locked_until", "created_at", "updated_at", "expires_at",
	"response_expires_at", "holder_role", "holder_role_name"
};

/* The values of idempotency.key_status. */
enum
{
	STATUS_PROCESSING,
	STATUS_COMPLETED,
	STATUS_FAILED,
	NSTATUSES
};

static const char *const status_names[NSTATUSES] = {
	"processing", "completed", "failed"
};

/* Their types; the status is of the extension's enum, checked below. */
static const Oid key_column_types[KEY_NCOLUMNS] = {
	TEXTOID, TEXTOID, BYTEAOID, InvalidOid, INT8OID, INT4OID,
	TEXTOID, INT4OID, JSONBOID, BOOLOID,
	TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, REGROLEOID, NAMEOID
};

/*
 * Where the columns of the table of keys are, and the OIDs of the status
 * labels, learnt for the table of "statuses_relid".
 */
static AttrNumber key_attnums[KEY_NCOLUMNS];
static IdemColumns key_table = {
	.ncolumns = KEY_NCOLUMNS, .noptional = 3, .names = key_column_names,
	.types = key_column_types, .attnums = key_attnums
};
static Datum key_statuses[NSTATUSES];
static Oid	key_statuses_relid = InvalidOid;

/* Where key_hash is, for the rows written directly (insert_key_row()). */
static const char *const key_hash_column_name[] = {"key_hash"};
static const Oid key_hash_column_type[] = {UUIDOID};
static AttrNumber key_hash_attnum[1];
static IdemColumns key_hash_column = {
	.ncolumns = 1, .noptional = 0, .names = key_hash_column_name,
	.types = key_hash_column_type, .attnums = key_hash_attnum
};

/*
 * A key to look up: its scope and key and, once a probe has computed it,
 * its key_hash (a claim probes up to three times).
 */
typedef struct KeyName
{
	text	   *scope;
	text	   *key;
	bool		hashed;
	pg_uuid_t	hash;
} KeyName;

/*
 * The key's row as the last read_key() found it: its known columns.
 */
typedef struct KeyRow
{
	Datum		values[KEY_NCOLUMNS];
	bool		nulls[KEY_NCOLUMNS];
} KeyRow;

/*
 * $1 scope, $2 key, $3 request hash, $4 now, $5 ttl, $6 lease, $7 key_hash;
 * the new row's $8 fence, $9 locked_until (now + lease) and $10 expires_at
 * (now + ttl), computed by new_key_row(); $11 the claiming role (1.7): operators and functions in a
 * statement are looked up and checked again each time it starts.
 * The WHERE clause of TAKE_KEY is the whole rule of when a claim may take
 * an existing key over; its first line keeps a key from taking over another
 * key's row, should their hashes ever be equal (read_key() then raises the
 * error).
 */
#define NEW_KEY_ROW(layout) \
	" (" HASH_COLUMN(layout) "scope, idempotency_key, request_hash, status," \
	"  fence, attempts, recovery_point, locked_until, created_at, updated_at," \
	"  expires_at" HOLDER_COLUMN(layout) ")" \
	" VALUES (" HASH_VALUE(layout) "$1, $2, $3, 'processing', $8, 1," \
	"  'started', $9, $4, $4, $10" HOLDER_VALUE(layout) ")"
#define CLAIMED_COLUMNS " RETURNING status, fence, attempts, recovery_point"
#define CLAIM_NARGS 11
#define CLAIM_ARGTYPES {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, INTERVALOID, \
	INTERVALOID, UUIDOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, OIDOID}

/*
 * The same arguments.  The common case, a key that the read found absent
 * and that no one else may create meanwhile: a plain insert, whose plan is
 * much cheaper to start and to run than the upsert's, and which returns
 * nothing: the new row's columns are known (run_insert_statement()).
 */
#define INSERT_KEY(layout) "INSERT INTO idempotency.idempotency_keys" \
	NEW_KEY_ROW(layout)
static IdemQuery insert_key[NLAYOUTS] = ALL_LAYOUTS(INSERT_KEY, CLAIM_NARGS, CLAIM_ARGTYPES);

/*
 * The upsert may wait for the row lock of a holder in flight: the lease it
 * grants runs from the clock after the wait.
 */
#define EXPIRED "k.expires_at" LE "$4"
#define LEASE_END "GREATEST(excluded.locked_until," \
	" pg_catalog.clock_timestamp()" PLUS "$6)"
#define TAKE_KEY(layout) "INSERT INTO idempotency.idempotency_keys AS k" \
	NEW_KEY_ROW(layout) ON_KEY " DO UPDATE SET" \
	"  request_hash = CASE WHEN " EXPIRED " THEN excluded.request_hash" \
	"   ELSE COALESCE(k.request_hash, excluded.request_hash) END," \
	"  status = 'processing'," \
	"  fence = excluded.fence," \
	"  attempts = CASE WHEN " EXPIRED " THEN 1" \
	"   ELSE k.attempts" PLUS "1 END," \
	"  recovery_point = CASE WHEN " EXPIRED " THEN 'started'" \
	"   ELSE k.recovery_point END," \
	"  response_code = NULL, response_body = NULL, retryable = NULL," \
	RESET_ANSWER_EXPIRY(layout) \
	SET_HOLDER(layout) \
	"  locked_until = " LEASE_END "," \
	"  created_at = CASE WHEN " EXPIRED " THEN excluded.created_at" \
	"   ELSE k.created_at END," \
	"  updated_at = excluded.updated_at," \
	"  expires_at = CASE WHEN " EXPIRED " THEN GREATEST(excluded.expires_at, " LEASE_END ")" \
	"   ELSE GREATEST(k.expires_at, " LEASE_END ") END" \
	" WHERE k.scope" EQ "$1 AND k.idempotency_key" EQ "$2" \
	"  AND (" EXPIRED \
	"   OR ((k.request_hash IS NULL OR $3 IS NULL OR k.request_hash" EQ "$3)" \
	"       AND ((k.status" EQ "'processing' AND k.locked_until" LE "$4)" \
	"            OR (k.status" EQ "'failed' AND k.retryable))))" \
	CLAIMED_COLUMNS
static IdemQuery take_key[NLAYOUTS] = ALL_LAYOUTS(TAKE_KEY, CLAIM_NARGS, CLAIM_ARGTYPES);

/*
 * The key, its key_hash in $n, is held by fence $3 at "now": an expired key
 * is gone, whatever its fence (claim and lookup treat it as absent too).
 * Fences come from one sequence, so fence $3 was given to one claim of one
 * key: with that key's key_hash it names the row, and scope and key need
 * no comparison.
 */
#define HELD_BY_FENCE(n, now) "key_hash" EQ "$" #n " AND fence" EQ "$3" \
	" AND status" EQ "'processing' AND expires_at" GT now

/*
 * $1 scope, $2 key, $3 fence, $4 code, $5 body, $6 now, $7 completed,
 * $8 retryable, $9 the new expires_at (NULL: keep it), $10 key_hash,
 * $11 when the answer goes (now + 1.6's response_ttl), $12 the calling
 * role (1.7), $13 its name and $14 whether it is privileged (1.8).  The first form of each pair leaves response_expires_at
 * alone (NULL in a held row: the answer lives as long as the key), so
 * that a completion without response_ttl stays a HOT update; the second
 * sets it, unless the key goes first: before $9, or the expires_at the
 * row keeps.  The forms of 1.7 also check the holder's role.
 */
#define FINISH_KEY(answer_expiry, holder) "UPDATE idempotency.idempotency_keys SET" \
	" status = CASE WHEN $7 THEN 'completed'::idempotency.key_status" \
	"  ELSE 'failed'::idempotency.key_status END," \
	" response_code = $4, response_body = $5, retryable = $8," \
	" locked_until = NULL, updated_at = $6," answer_expiry \
	" expires_at = COALESCE($9, expires_at)" \
	" WHERE " HELD_BY_FENCE(10, "$6") holder
#define FINISH_NARGS 14
#define FINISH_ARGTYPES {TEXTOID, TEXTOID, INT8OID, INT4OID, JSONBOID, \
	TIMESTAMPTZOID, BOOLOID, BOOLOID, TIMESTAMPTZOID, UUIDOID, TIMESTAMPTZOID, \
	OIDOID, NAMEOID, BOOLOID}
#define SET_ANSWER_EXPIRY " response_expires_at = " \
	ANSWER_EXPIRY("$11", "COALESCE($9, expires_at)") ","
#define HOLDER_ACTS " AND " MAY_ACT_AS_HOLDER(12)
#define HOLDER_NAMED " AND " MAY_ACT_BY_NAME(12, 13, 14)
static IdemQuery finish_key[3][2] = {
	{
		{.sql = FINISH_KEY("", ""), .nargs = FINISH_NARGS, .argtypes = FINISH_ARGTYPES},
		{.sql = FINISH_KEY(SET_ANSWER_EXPIRY, ""), .nargs = FINISH_NARGS,
		.argtypes = FINISH_ARGTYPES}
	},
	{
		{.sql = FINISH_KEY("", HOLDER_ACTS), .nargs = FINISH_NARGS,
		.argtypes = FINISH_ARGTYPES},
		{.sql = FINISH_KEY(SET_ANSWER_EXPIRY, HOLDER_ACTS), .nargs = FINISH_NARGS,
		.argtypes = FINISH_ARGTYPES}
	},
	{
		{.sql = FINISH_KEY("", HOLDER_NAMED), .nargs = FINISH_NARGS,
		.argtypes = FINISH_ARGTYPES},
		{.sql = FINISH_KEY(SET_ANSWER_EXPIRY, HOLDER_NAMED), .nargs = FINISH_NARGS,
		.argtypes = FINISH_ARGTYPES}
	}
};

/*
 * $1 scope, $2 key, $3 fence, $4 recovery point or NULL, $5 now, $6 lease,
 * $7 key_hash, $8 the calling role (the form of 1.7, which checks it), $9
 * its name and $10 whether it is privileged (the form of 1.8)
 */
#define CHECKPOINT_KEY(holder) "UPDATE idempotency.idempotency_keys SET" \
	" recovery_point = COALESCE($4, recovery_point)," \
	" locked_until = $5" PLUS "$6," \
	" expires_at = GREATEST(expires_at, $5" PLUS "$6)," \
	" updated_at = $5" \
	" WHERE " HELD_BY_FENCE(7, "$5") holder
#define CHECKPOINT_ARGTYPES {TEXTOID, TEXTOID, INT8OID, TEXTOID, TIMESTAMPTZOID, \
	INTERVALOID, UUIDOID, OIDOID, NAMEOID, BOOLOID}
static IdemQuery checkpoint_key[3] = {
	{.sql = CHECKPOINT_KEY(""), .nargs = 10, .argtypes = CHECKPOINT_ARGTYPES},
	{.sql = CHECKPOINT_KEY(" AND " MAY_ACT_AS_HOLDER(8)), .nargs = 10,
	.argtypes = CHECKPOINT_ARGTYPES},
	{.sql = CHECKPOINT_KEY(" AND " MAY_ACT_BY_NAME(8, 9, 10)), .nargs = 10,
	.argtypes = CHECKPOINT_ARGTYPES}
};

/*
 * $1 scope, $2 key, $3 fence, $4 now, $5 key_hash, $6 the calling role, $7
 * its name, $8 whether it is privileged
 */
#define RELEASE_KEY(holder) "DELETE FROM idempotency.idempotency_keys" \
	" WHERE " HELD_BY_FENCE(5, "$4") holder
#define RELEASE_ARGTYPES {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID, UUIDOID, \
	OIDOID, NAMEOID, BOOLOID}
static IdemQuery release_key[3] = {
	{.sql = RELEASE_KEY(""), .nargs = 8, .argtypes = RELEASE_ARGTYPES},
	{.sql = RELEASE_KEY(" AND " MAY_ACT_AS_HOLDER(6)), .nargs = 8,
	.argtypes = RELEASE_ARGTYPES},
	{.sql = RELEASE_KEY(" AND " MAY_ACT_BY_NAME(6, 7, 8)), .nargs = 8,
	.argtypes = RELEASE_ARGTYPES}
};

/*
 * $1 scope, $2 key, $3 request hash, $4 now, $5 ttl, $6 the answer, $7
 * key_hash, $8 fence, $9 expires_at, $10 when the answer goes (1.6's
 * response_ttl; NULL: with the key, as ANSWER_EXPIRY() decides, in C), $11
 * the role that ran it (1.7): a key created completed, in one row version
 * (execute() of a new key).
 */
#define INSERT_COMPLETED_KEY(layout) "INSERT INTO idempotency.idempotency_keys" \
	" (" HASH_COLUMN(layout) "scope, idempotency_key, request_hash, status," \
	"  fence, attempts, recovery_point, response_code, response_body," \
	"  created_at, updated_at, expires_at" EXPIRY_COLUMN(layout) \
	HOLDER_COLUMN(layout) ")" \
	" VALUES (" HASH_VALUE(layout) "$1, $2, $3, 'completed', $8, 1," \
	"  'started', 200, $6, $4, $4, $9" EXPIRY_VALUE(layout) \
	HOLDER_VALUE(layout) ")"
static IdemQuery insert_completed_key[NLAYOUTS] = ALL_LAYOUTS(INSERT_COMPLETED_KEY, 11,
															  {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID,
	INTERVALOID, JSONBOID, UUIDOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, OIDOID});

/* $1 scope, $2 key, $3 now, $4 key_hash */
static IdemQuery lookup_key = {
	.sql = "SELECT k FROM idempotency.idempotency_keys k"
	" WHERE " KEY_IS_ARG(4) " AND expires_at" GT "$3",
	.nargs = 4, .argtypes = {TEXTOID, TEXTOID, TIMESTAMPTZOID, UUIDOID}
};

/* SQL-callable functions */
PG_FUNCTION_INFO_V1(idempotency_claim);
PG_FUNCTION_INFO_V1(idempotency_claim_1_6);
PG_FUNCTION_INFO_V1(idempotency_claim_1_7);
PG_FUNCTION_INFO_V1(idempotency_claim_1_8);
PG_FUNCTION_INFO_V1(idempotency_complete);
PG_FUNCTION_INFO_V1(idempotency_complete_1_1);
PG_FUNCTION_INFO_V1(idempotency_complete_1_6);
PG_FUNCTION_INFO_V1(idempotency_complete_1_7);
PG_FUNCTION_INFO_V1(idempotency_complete_1_8);
PG_FUNCTION_INFO_V1(idempotency_fail);
PG_FUNCTION_INFO_V1(idempotency_fail_1_1);
PG_FUNCTION_INFO_V1(idempotency_fail_1_6);
PG_FUNCTION_INFO_V1(idempotency_fail_1_7);
PG_FUNCTION_INFO_V1(idempotency_fail_1_8);
PG_FUNCTION_INFO_V1(idempotency_checkpoint);
PG_FUNCTION_INFO_V1(idempotency_checkpoint_1_7);
PG_FUNCTION_INFO_V1(idempotency_checkpoint_1_8);
PG_FUNCTION_INFO_V1(idempotency_release);
PG_FUNCTION_INFO_V1(idempotency_release_1_7);
PG_FUNCTION_INFO_V1(idempotency_release_1_8);
PG_FUNCTION_INFO_V1(idempotency_lookup);
PG_FUNCTION_INFO_V1(idempotency_lookup_1_7);

/*
 * The layout of the table of keys before 1.6: whether key_hash is written
 * or generated (one syscache probe).
 */
static KeyLayout
key_layout(void)
{
	HeapTuple	tuple;
	bool		generated;

	tuple = SearchSysCacheAttName(idem_relation_oid("idempotency_keys"),
								  "key_hash");
	if (!HeapTupleIsValid(tuple))
		idem_refuse_old_extension();
	generated = ((Form_pg_attribute) GETSTRUCT(tuple))->attgenerated != '\0';
	ReleaseSysCache(tuple);
	return generated ? KEYS_GENERATE_HASH : KEYS_WRITE_HASH;
}

/*
 * The key's key_hash, computed on first use.
 */
static Datum
key_hash_of(KeyName *name)
{
	if (!name->hashed)
	{
		idem_key_hash(name->scope, name->key, &name->hash);
		name->hashed = true;
	}
	return UUIDPGetDatum(&name->hash);
}

/*
 * Learn the columns of the table of keys, "rel", unless known.
 */
static void
learn_key_table(Relation rel)
{
	Oid			status_type;
	int			i;

	if (idem_learn_columns(&key_table, rel) &&
		key_statuses_relid == RelationGetRelid(rel))
		return;
	status_type = TupleDescAttr(RelationGetDescr(rel),
								key_attnums[COL_STATUS] - 1)->atttypid;
	if (get_typtype(status_type) != TYPTYPE_ENUM)
		elog(ERROR, "column \"status\" of relation \"%s\" is not of type idempotency.key_status",
			 RelationGetRelationName(rel));
	for (i = 0; i < NSTATUSES; i++)
		key_statuses[i] =
			DirectFunctionCall2(enum_in, CStringGetDatum(status_names[i]),
								ObjectIdGetDatum(status_type));
	key_statuses_relid = RelationGetRelid(rel);
}

/*
 * Start a direct probe of the primary key index for the key: the table is
 * opened with "lockmode" and its layout learnt.
 *
 * It sees what a non-read-only SPI statement would see: the effects of the
 * earlier commands of this transaction and, under READ COMMITTED,
 * everything committed before it starts.
 */
static void
begin_key_scan(IdemIndexScan *scan, ScanKeyData *skey, KeyName *name,
			   LOCKMODE lockmode)
{
	idem_index_scan_begin(scan, "idempotency_keys", "idempotency_keys_pkey",
						  lockmode, skey, 1);
	learn_key_table(scan->rel);
	if (IndexRelationGetNumberOfKeyAttributes(scan->index) != 1)
		idem_refuse_old_extension();
	/* key_hash, and the row's scope and key are compared after */
	ScanKeyInit(&skey[0], 1, BTEqualStrategyNumber, F_UUID_EQ,
				key_hash_of(name));
	scan->nkeys = 1;
}

/*
 * Copy the row in the scan's slot into "row", in the current memory
 * context: its values must outlive the slot.
 */
static void
copy_key_row(IdemIndexScan *scan, KeyRow *row)
{
	TupleDesc	tupdesc = RelationGetDescr(scan->rel);
	HeapTuple	copy = ExecCopySlotHeapTuple(scan->slot);
	Datum	   *values = palloc(sizeof(Datum) * tupdesc->natts);
	bool	   *nulls = palloc(sizeof(bool) * tupdesc->natts);
	int			col;

	/* one pass over the row, rather than a walk to each column */
	heap_deform_tuple(copy, tupdesc, values, nulls);
	for (col = 0; col < KEY_NCOLUMNS; col++)
	{
		if (key_attnums[col] == InvalidAttrNumber)
		{
			/* a column of a later version (see key_table) */
			row->values[col] = (Datum) 0;
			row->nulls[col] = true;
			continue;
		}
		row->values[col] = values[key_attnums[col] - 1];
		row->nulls[col] = nulls[key_attnums[col] - 1];
	}
	pfree(values);
	pfree(nulls);
}

/*
 * The next row version of the key that the scan sees, copied into "row"
 * (in the current memory context); false when there is none.
 */
static bool
next_key_row(IdemIndexScan *scan, KeyRow *row)
{
	if (!idem_index_scan_next(scan))
		return false;
	copy_key_row(scan, row);
	return true;
}

/*
 * Whether the text datum "a" has the bytes of "b" (scopes and keys compare
 * bytewise: they are COLLATE "C").
 */
static bool
same_text(Datum a, text *b)
{
	text	   *ta = DatumGetTextPP(a);

	return VARSIZE_ANY_EXHDR(ta) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(ta), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(b)) == 0;
}

/*
 * Raise the error for a row of another key found under the key's hash.
 */
static void
check_same_key(KeyName *name, KeyRow *row)
{
	if (!same_text(row->values[COL_SCOPE], name->scope) ||
		!same_text(row->values[COL_KEY], name->key))
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("idempotency key \"%s\" in scope \"%s\" has the same key_hash as key \"%s\" in scope \"%s\"",
						text_to_cstring(name->key), text_to_cstring(name->scope),
						TextDatumGetCString(row->values[COL_KEY]),
						TextDatumGetCString(row->values[COL_SCOPE])),
				 errdetail("Two keys share the first 16 bytes of their SHA-256; see doc/reference.md, \"Tables\"."),
				 errhint("Use another key for this request.")));
}

/*
 * Read the key's row into "row"; false when there is none.  This runs on
 * every claim, so it probes the index directly instead of starting an
 * executor for a SELECT.
 */
static bool
read_key(KeyName *name, KeyRow *row)
{
	ScanKeyData skey[1];
	IdemIndexScan scan;
	bool		found;

	begin_key_scan(&scan, skey, name, AccessShareLock);
	found = next_key_row(&scan, row);
	idem_index_scan_end(&scan);
	if (found)
		check_same_key(name, row);
	return found;
}

/*
 * Answer a claim from the key's row when the row decides it (replay,
 * gone, in_progress, mismatch).  Returns false when the claim may take the
 * key over.  Only with "answers_expire" (1.6) does an answer stored with
 * a response_expires_at that has come go: the claim learns the outcome of
 * the request (status, response_code), not its answer, and nothing runs
 * again while the key lives.
 */
static bool
answer_from_row(const KeyRow *row, bytea *request_hash, TimestampTz now,
				bool answers_expire, IdemClaim *claim)
{
	Datum		status = row->values[COL_STATUS];

	if (DatumGetTimestampTz(row->values[COL_EXPIRES_AT]) <= now)
		return false;

	claim->values[CLAIM_STATUS] = status;
	claim->nulls[CLAIM_STATUS] = false;
	if (!row->nulls[COL_REQUEST_HASH] && request_hash != NULL &&
		!DatumGetBool(DirectFunctionCall2(byteaeq,
										  row->values[COL_REQUEST_HASH],
										  PointerGetDatum(request_hash))))
	{
		claim->outcome = "mismatch";
		return true;
	}

	claim->values[CLAIM_ATTEMPTS] = row->values[COL_ATTEMPTS];
	claim->values[CLAIM_RECOVERY_POINT] = row->values[COL_RECOVERY_POINT];
	claim->nulls[CLAIM_ATTEMPTS] = claim->nulls[CLAIM_RECOVERY_POINT] = false;

	if (status == key_statuses[STATUS_COMPLETED] ||
		(status == key_statuses[STATUS_FAILED] &&
		 !DatumGetBool(row->values[COL_RETRYABLE])))
	{
		bool		gone = answers_expire &&
			!row->nulls[COL_RESPONSE_EXPIRES_AT] &&
			DatumGetTimestampTz(row->values[COL_RESPONSE_EXPIRES_AT]) <= now;

		claim->outcome = gone ? "gone" : "replay";
		claim->values[CLAIM_RESPONSE_CODE] = row->values[COL_RESPONSE_CODE];
		claim->nulls[CLAIM_RESPONSE_CODE] = row->nulls[COL_RESPONSE_CODE];
		claim->values[CLAIM_RESPONSE_BODY] = row->values[COL_RESPONSE_BODY];
		claim->nulls[CLAIM_RESPONSE_BODY] = gone || row->nulls[COL_RESPONSE_BODY];
		return true;
	}

	if (status == key_statuses[STATUS_PROCESSING] &&
		!row->nulls[COL_LOCKED_UNTIL] &&
		DatumGetTimestampTz(row->values[COL_LOCKED_UNTIL]) > now)
	{
		/*
		 * The time left on the lease from the moment of the answer, not
		 * from the statement's start: a claim that waited for the holder's
		 * insert would otherwise report more than the whole lease.
		 */
		TimestampTz answered = Min(GetCurrentTimestamp(),
								   DatumGetTimestampTz(row->values[COL_LOCKED_UNTIL]));

		claim->outcome = "in_progress";
		claim->values[CLAIM_RETRY_AFTER] =
			DirectFunctionCall2(timestamp_mi, row->values[COL_LOCKED_UNTIL],
								TimestampTzGetDatum(Max(now, answered)));
		claim->nulls[CLAIM_RETRY_AFTER] = false;
		return true;
	}
	return false;
}

/*
 * Fill "claim" for a key that is now ours.
 */
static void
claimed(IdemClaim *claim, Datum status, Datum fence, Datum attempts,
		Datum recovery_point)
{
	claim->values[CLAIM_STATUS] = status;
	claim->values[CLAIM_FENCE] = fence;
	claim->values[CLAIM_ATTEMPTS] = attempts;
	claim->values[CLAIM_RECOVERY_POINT] = recovery_point;
	claim->nulls[CLAIM_STATUS] = claim->nulls[CLAIM_FENCE] =
		claim->nulls[CLAIM_ATTEMPTS] =
		claim->nulls[CLAIM_RECOVERY_POINT] = false;
	claim->outcome = DatumGetInt32(attempts) == 1 ? "claimed" : "resumed";
}

/*
 * A fence for a new holder of a key, from idempotency.fence_seq.
 */
static Datum
next_fence(void)
{
	return Int64GetDatum(nextval_internal(idem_relation_oid("fence_seq"), true));
}

/*
 * The timestamptz "start" + "span", as the SQL operator computes it.
 */
static Datum
time_after(Datum start, Interval *span)
{
	return DirectFunctionCall2(timestamptz_pl_interval, start,
							   IntervalPGetDatum(span));
}

/*
 * The arguments $4 and $8 to $10 of a claiming statement (see NEW_KEY_ROW)
 * at "now".  A statement that writes the row takes a fence each time it
 * runs, as nextval() in its VALUES would.
 */
static void
new_key_row(Datum *values, TimestampTz now, Interval *ttl, Interval *lease)
{
	values[3] = TimestampTzGetDatum(now);
	values[7] = next_fence();
	values[8] = time_after(values[3], lease);
	values[9] = time_after(values[3], ttl);
}

/*
 * Write the row that INSERT_KEY (or, when "completed", INSERT_COMPLETED_KEY)
 * of "layout" writes, from the same arguments, with idem_insert_row(): the
 * executor's row primitives without starting the statement (writes.c).  A
 * table of 1.2, whose key_hash is generated, takes the statement.
 */
static IdemWriteResult
insert_key_row(KeyLayout layout, const Datum *args, const char *nulls,
			   bool completed)
{
	Relation	rel;
	int			natts;
	Datum	   *values;
	bool	   *isnull;
	bool	   *given;
	AttrNumber	listed[KEY_NCOLUMNS + 1];	/* key_hash too */
	IdemStatementColumns columns = {.written = listed};
	IdemWriteResult result;

	if (layout == KEYS_GENERATE_HASH)
		return IDEM_WRITE_BY_STATEMENT;
	rel = idem_table_open("idempotency_keys", RowExclusiveLock);
	learn_key_table(rel);
	(void) idem_learn_columns(&key_hash_column, rel);
	if ((completed && layout <= KEYS_EXPIRE_ANSWERS &&
		 key_attnums[COL_RESPONSE_EXPIRES_AT] == InvalidAttrNumber) ||
		(layout <= KEYS_RECORD_HOLDER &&
		 key_attnums[COL_HOLDER_ROLE] == InvalidAttrNumber) ||
		(layout == KEYS_NAME_HOLDER &&
		 key_attnums[COL_HOLDER_ROLE_NAME] == InvalidAttrNumber))
	{
		/* a table before 1.6, 1.7 or 1.8: the statement raises the error */
		table_close(rel, NoLock);
		return IDEM_WRITE_BY_STATEMENT;
	}
	natts = RelationGetDescr(rel)->natts;
	values = palloc(natts * sizeof(Datum));
	isnull = palloc(natts * sizeof(bool));
	given = palloc0(natts * sizeof(bool));

	/* the statement's column list, in its order */
#define SET_COLUMN(attnum, value, null) \
	(values[(attnum) - 1] = (value), isnull[(attnum) - 1] = (null), \
	 given[(attnum) - 1] = true, listed[columns.nwritten++] = (attnum))
	SET_COLUMN(key_hash_attnum[0], args[6], false);
	SET_COLUMN(key_attnums[COL_SCOPE], args[0], false);
	SET_COLUMN(key_attnums[COL_KEY], args[1], false);
	SET_COLUMN(key_attnums[COL_REQUEST_HASH], args[2], nulls[2] == 'n');
	SET_COLUMN(key_attnums[COL_STATUS],
			   key_statuses[completed ? STATUS_COMPLETED : STATUS_PROCESSING],
			   false);
	SET_COLUMN(key_attnums[COL_FENCE], args[7], false);
	SET_COLUMN(key_attnums[COL_ATTEMPTS], Int32GetDatum(1), false);
	SET_COLUMN(key_attnums[COL_RECOVERY_POINT],
			   CStringGetTextDatum("started"), false);
	SET_COLUMN(key_attnums[COL_CREATED_AT], args[3], false);
	SET_COLUMN(key_attnums[COL_UPDATED_AT], args[3], false);
	if (completed)
	{
		SET_COLUMN(key_attnums[COL_RESPONSE_CODE], Int32GetDatum(200), false);
		SET_COLUMN(key_attnums[COL_RESPONSE_BODY], args[5], false);
		SET_COLUMN(key_attnums[COL_EXPIRES_AT], args[8], false);
		if (layout <= KEYS_EXPIRE_ANSWERS)
			SET_COLUMN(key_attnums[COL_RESPONSE_EXPIRES_AT], args[9],
					   nulls[9] == 'n');
	}
	else
	{
		SET_COLUMN(key_attnums[COL_LOCKED_UNTIL], args[8], false);
		SET_COLUMN(key_attnums[COL_EXPIRES_AT], args[9], false);
	}
	if (layout <= KEYS_RECORD_HOLDER)
		SET_COLUMN(key_attnums[COL_HOLDER_ROLE], args[10], false);
	if (layout == KEYS_NAME_HOLDER)
		SET_COLUMN(key_attnums[COL_HOLDER_ROLE_NAME],
				   idem_role_name(DatumGetObjectId(args[10])), false);
#undef SET_COLUMN

	result = idem_insert_row(rel, values, isnull, given, &columns);
	table_close(rel, NoLock);
	pfree(values);
	pfree(isnull);
	pfree(given);
	return result;
}

/*
 * Create a key: write the row of INSERT_KEY (or, when "completed",
 * INSERT_COMPLETED_KEY) of "layout" with the arguments "args", fence
 * args[7]; true when it wrote the row (a trigger of the user's may skip
 * it), and then "claim" holds the row's columns.  The row is written
 * directly when the table takes it (insert_key_row()), else by the
 * statement through SPI.
 */
static bool
create_key(KeyLayout layout, Datum *args, const char *nulls, bool completed,
		   IdemClaim *claim)
{
	IdemWriteResult result = insert_key_row(layout, args, nulls, completed);
	bool		took = result == IDEM_WRITE_DONE;

	if (result == IDEM_WRITE_BY_STATEMENT)
	{
		IdemQuery  *query = completed ? &insert_completed_key[layout] :
			&insert_key[layout];

		SPI_connect();
		took = idem_run(query, args, nulls, false, 0) == 1;
		SPI_finish();
	}
	if (took)
		claimed(claim,
				key_statuses[completed ? STATUS_COMPLETED : STATUS_PROCESSING],
				args[7], Int32GetDatum(1), CStringGetTextDatum("started"));
	return took;
}

/*
 * Run one of the claiming statements below; true when it returned the
 * row of a key that is now ours.  It connects to SPI for the statement
 * only, and copies what it returns into the caller's memory.
 */
static bool
run_claim_statement(IdemQuery *query, Datum *args, const char *nulls,
					IdemClaim *claim)
{
	MemoryContext caller = CurrentMemoryContext;
	bool		took = false;

	SPI_connect();
	/* no row limit: it would stop the statement before its AFTER STATEMENT triggers */
	if (idem_run(query, args, nulls, false, 0) == 1)
	{
		bool		isnull;
		Datum		recovery_point = idem_get_column(4, &isnull);

		took = true;
		MemoryContextSwitchTo(caller);
		/* copies: a bigint is passed by reference on 32-bit builds */
		claimed(claim, idem_get_column(1, &isnull),
				Int64GetDatum(DatumGetInt64(idem_get_column(2, &isnull))),
				idem_get_column(3, &isnull),
				PointerGetDatum(DatumGetTextPCopy(recovery_point)));
	}
	SPI_finish();
	return took;
}

/*
 * The lock for creating the key (idem_lock_creation()), on the first 8
 * bytes of its key_hash; true when another transaction held it and this
 * one waited.
 */
static uint64
key_creation_hash(KeyName *name)
{
	uint64		hash;

	(void) key_hash_of(name);
	memcpy(&hash, name->hash.data, sizeof(hash));
	return hash;
}

static bool
lock_key_creation(KeyName *name)
{
	return idem_lock_creation(key_creation_hash(name), IDEM_CREATE_KEY_SPACE);
}

static void
unlock_key_creation(KeyName *name)
{
	idem_unlock_creation(key_creation_hash(name), IDEM_CREATE_KEY_SPACE);
}

/*
 * With the lock for creating the key held: wait until no other transaction
 * has an uncommitted row of the key, and return whether the key has a row
 * now (which this transaction's snapshot may not show).  Sets *waited when
 * it waited.  "scan" is the caller's scan of the key, which it ends.
 */
static bool
wait_for_key_creators(IdemIndexScan *scan, KeyName *name, bool *waited)
{
	SnapshotData dirty;

	for (;;)
	{
		TransactionId creator = InvalidTransactionId;
		bool		found;

		InitDirtySnapshot(dirty);
		idem_index_scan_restart(scan, &dirty);
		found = idem_index_scan_next(scan);
		if (found)
			creator = dirty.xmin;
		/* no buffer pinned while waiting */
		idem_index_scan_restart(scan, NULL);
		if (!TransactionIdIsValid(creator))
			return found;
		idem_wait_for_creator(key_creation_hash(name), IDEM_CREATE_KEY_SPACE,
							  creator);
		*waited = true;
	}
}

/*
 * The layout a claim writes: that of the SQL that called (1.6 and later
 * pass "answers_expire", 1.7 and later a holder), else the table's.
 */
static KeyLayout
claim_layout(IdemClaim *claim, bool answers_expire)
{
	if (OidIsValid(claim->holder))
		return claim->holders == IDEM_HOLDERS_BY_NAME ? KEYS_NAME_HOLDER :
			KEYS_RECORD_HOLDER;
	return answers_expire ? KEYS_EXPIRE_ANSWERS : key_layout();
}

/*
 * Claim a key: fill "claim" with the outcome and the columns it reveals.
 * Only the holder learns the fence.  Runs as the extension owner.
 *
 * With IDEM_CLAIM_CREATE_LATER (execute()), a key that is absent is not
 * inserted: the claim keeps the lock for creating it, so that no claim of
 * it can proceed until the key's row is written, and sets claim->outcome
 * to NULL.  The caller runs its work and creates the key completed with
 * idem_insert_completed_key(): one row version instead of two.
 *
 * With IDEM_CLAIM_ANSWERS_EXPIRE (the SQL of 1.6) the claim answers gone
 * for an answer past its response_expires_at, and a key it takes over has
 * none (KEYS_EXPIRE_ANSWERS).  With claim->holder set (the SQL of 1.7,
 * which also passes IDEM_CLAIM_ANSWERS_EXPIRE), a key it creates or takes
 * over records that role as its holder_role (KEYS_RECORD_HOLDER), and its
 * name too when claim->holders is IDEM_HOLDERS_BY_NAME (the SQL of 1.8,
 * KEYS_NAME_HOLDER).
 */
void
idem_claim_key(text *key, text *scope, Jsonb *request, Interval *ttl,
			   Interval *lease, int flags, IdemClaim *claim)
{
	bool		create_later = (flags & IDEM_CLAIM_CREATE_LATER) != 0;
	bool		answers_expire = (flags & IDEM_CLAIM_ANSWERS_EXPIRE) != 0;
	KeyLayout	layout;
	TimestampTz now = GetCurrentTimestamp();
	bytea	   *request_hash = request ? idem_fingerprint(request) : NULL;
	Datum		values[CLAIM_NARGS];
	char		nulls[CLAIM_NARGS] = {' ', ' ', request_hash ? ' ' : 'n', ' ', ' ',
	' ', ' ', ' ', ' ', ' '};
	KeyName		name = {.scope = scope, .key = key};
	KeyRow		row;
	ScanKeyData skey[1];
	IdemIndexScan scan;
	int			attempt;
	bool		found;

	memset(claim->nulls, true, sizeof(claim->nulls));
	claim->request_hash = request_hash;

	/* a new key's scan is kept for the probe under the creation lock */
	begin_key_scan(&scan, skey, &name, AccessShareLock);
	found = next_key_row(&scan, &row);
	if (found)
	{
		idem_index_scan_end(&scan);
		check_same_key(&name, &row);
		if (answer_from_row(&row, request_hash, now, answers_expire, claim))
			return;
	}
	else
		idem_index_scan_restart(&scan, NULL);

	/* from here on the claim writes: not in a read-only transaction */
	PreventCommandIfReadOnly(create_later ? "idempotency.execute()" :
							 "idempotency.claim()");
	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = PointerGetDatum(request_hash);
	values[4] = IntervalPGetDatum(ttl);
	values[5] = IntervalPGetDatum(lease);
	values[6] = key_hash_of(&name);
	values[10] = ObjectIdGetDatum(claim->holder);
	layout = claim_layout(claim, answers_expire);

	if (!found)
	{
		bool		waited = lock_key_creation(&name);
		bool		exists = wait_for_key_creators(&scan, &name, &waited);

		idem_index_scan_end(&scan);

		if (waited)
			now = GetCurrentTimestamp();
		claim->now = now;
		if (!exists)
		{
			/*
			 * Still absent, and no one else can create it now.  execute()
			 * keeps the lock while its statement runs; a claim inserts the
			 * key, its row then makes the others wait.
			 */
			bool		took;

			if (create_later)
			{
				claim->outcome = NULL;
				return;
			}
			new_key_row(values, now, ttl, lease);
			took = create_key(layout, values, nulls, false, claim);
			unlock_key_creation(&name);
			if (took)
				return;
		}
		else
		{
			/*
			 * Created since the read, by a transaction that has committed:
			 * decide from its row.  A snapshot taken before that commit
			 * cannot see it, and deciding without it could run the work
			 * twice: under REPEATABLE READ or SERIALIZABLE that is a
			 * serialization failure, as for an INSERT ... ON CONFLICT.
			 */
			unlock_key_creation(&name);
			found = read_key(&name, &row);
			if (!found && IsolationUsesXactSnapshot())
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not serialize access due to concurrent claim of idempotency key \"%s\"",
								text_to_cstring(key)),
						 errhint("Retry the request in a new transaction; it replays or resumes the other claim.")));
			if (found && answer_from_row(&row, request_hash, now, answers_expire, claim))
				return;
		}
	}
	else
		claim->now = now;

	/*
	 * The row read may be gone or changed by now; the upsert decides.  When
	 * it declines, it has locked the row, so the read after it is final.
	 * Declining twice in a row needs a concurrent transaction to change the
	 * key between the upsert and the read each time (a purge of the row
	 * and a new claim, say); the loop bounds the work, and a claim that
	 * loses every round raises a serialization failure, which clients
	 * retry.
	 */
	for (attempt = 0; attempt < 3; attempt++)
	{
		new_key_row(values, now, ttl, lease);
		if (run_claim_statement(&take_key[layout], values, nulls, claim))
			return;
		if (read_key(&name, &row) &&
			answer_from_row(&row, request_hash, now, answers_expire, claim))
			return;
	}
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("could not claim idempotency key \"%s\" due to concurrent changes",
					text_to_cstring(key)),
			 errhint("Retry the request; the next claim decides from the key's current state.")));
}

/*
 * idem_claim_key(), waiting for the holder: while the answer is in_progress
 * and "wait" (NULL: none) has not run out since the call began, sleep
 * until a holder call of the key commits (waits.c) or the holder's lease
 * ends, whichever comes first, and claim again, as a claim made then
 * would.  On a hot standby, where the holder's calls arrive by replay, the
 * sleep ends when anything was replayed since the claim (standby.c); a
 * claim there that would take the key over raises 25006, as any claim
 * that writes does.  Each claim reads the clock and takes its snapshots
 * anew, so it sees what the holder committed under READ COMMITTED; under
 * REPEATABLE READ or SERIALIZABLE it could not, and refuses to wait.
 *
 * It never sleeps while another transaction may be waiting for this one:
 * the sleep is no lock, so the deadlock detector would not see a holder
 * that waits for this transaction before its holder call can commit.  So
 * a transaction that has a transaction id (it wrote a row, a row lock or
 * an uncommitted holder call: a claim whose upsert declined has locked the
 * key's row) or holds a lock for creating a key (execute() while its
 * statement runs) answers in_progress at once, as when the wait runs out
 * (doc/reference.md, "Waiting for the holder").  Nor does it sleep when
 * idempotency.max_waiters_per_key claims already sleep for the key
 * (waits.c, waiter tickets): the holder may need a connection of the
 * pool those would keep.
 */
void
idem_claim_key_waiting(text *key, text *scope, Jsonb *request, Interval *ttl,
					   Interval *lease, int flags, Interval *wait,
					   IdemClaim *claim)
{
	pg_uuid_t	hash;
	uint64		seen = 0;
	TimestampTz deadline = 0;
	bool		woken = false;
	int			ticket = -1;

	if (wait != NULL)
	{
		idem_key_hash(scope, key, &hash);
		deadline = DatumGetTimestampTz(time_after(TimestampTzGetDatum(GetCurrentTimestamp()),
												  wait));
	}
	for (;;)
	{
		TimestampTz now;
		TimestampTz lease_end;
		TimestampTz wake;
		XLogRecPtr	replayed;

		if (wait != NULL && idem_wait_available())
			seen = idem_wait_generation(&hash);
		/* a standby's replay position (none after a promotion) */
		replayed = wait != NULL && idem_wait_watches_replay() ?
			idem_replay_position() : InvalidXLogRecPtr;
		idem_claim_key(key, scope, request, ttl, lease, flags, claim);
		if (wait == NULL || claim->outcome == NULL ||
			strcmp(claim->outcome, "in_progress") != 0)
			break;
		if (woken)
			idem_wait_count_unchanged();
		now = GetCurrentTimestamp();
		if (now >= deadline)
			break;
		if (!idem_wait_available())
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("idempotency claims can wait only when the library is preloaded"),
					 errdetail("Key \"%s\" is held by another request; waiting for it needs the shared memory of a preloaded library.",
							   text_to_cstring(key)),
					 errhint("Add idempotency to shared_preload_libraries and restart the server, or claim without wait.")));
		if (IsolationUsesXactSnapshot())
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("idempotency claims can wait only under READ COMMITTED"),
					 errdetail("Key \"%s\" is held by another request, and this transaction's snapshot would not show its end.",
							   text_to_cstring(key)),
					 errhint("Claim with wait in a READ COMMITTED transaction, or without wait.")));
		/* others may wait for this transaction: no sleep they cannot see */
		if (TransactionIdIsValid(GetTopTransactionIdIfAny()) ||
			idem_holds_creation_lock())
			break;
		/* enough sleep for this key already: the answer now, not a sleep */
		if (ticket < 0 && (ticket = idem_wait_take_ticket(&hash)) < 0)
			break;
		lease_end = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
															TimestampTzGetDatum(now),
															claim->values[CLAIM_RETRY_AFTER]));
		/*
		 * Until then and one millisecond more, so that the lease is over at
		 * the wake-up; a time, not a count of milliseconds, which would not
		 * fit an int past about 24.8 days (waits.c sleeps in steps).
		 */
		wake = TimestampTzPlusMilliseconds(Min(deadline, lease_end), 1);
		if (replayed != InvalidXLogRecPtr)
		{
			(void) idem_wait_for_replay(replayed, wake);
			woken = false;
		}
		else
			woken = idem_wait_for_holder(&hash, seen, wake);
	}
	if (ticket >= 0)
		idem_wait_return_ticket(&hash, ticket);
}

/*
 * Create the key that idem_claim_key(..., IDEM_CLAIM_CREATE_LATER) found
 * absent and locked, completed with "body" as its answer (code 200), kept
 * for "response_ttl" (NULL: as long as the key), and fill "claim" as a
 * claim and completion of it would; then release the lock for creating
 * it.  Every creator of a key takes the lock, so the key is still absent:
 * a plain INSERT.  A row written around the functions meanwhile makes the
 * unique index refuse it (23505); a trigger of the user's that skips the
 * row, a serialization failure.  Either way the caller's work is rolled
 * back.
 */
void
idem_insert_completed_key(text *key, text *scope, Interval *ttl,
						  Interval *response_ttl, Jsonb *body,
						  IdemClaim *claim)
{
	bytea	   *request_hash = claim->request_hash;
	KeyName		name = {.scope = scope, .key = key};
	Datum		values[11];
	char		nulls[11] = {' ', ' ', request_hash ? ' ' : 'n', ' ', ' ', ' ', ' ',
	' ', ' ', 'n', ' '};

	memset(claim->nulls, true, sizeof(claim->nulls));
	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = PointerGetDatum(request_hash);
	values[3] = TimestampTzGetDatum(claim->now);
	values[4] = IntervalPGetDatum(ttl);
	values[5] = JsonbPGetDatum(body);
	values[6] = key_hash_of(&name);
	values[7] = next_fence();
	values[8] = time_after(values[3], ttl);
	/* the answer's expiry, unless the key goes first (see ANSWER_EXPIRY) */
	values[9] = response_ttl ? time_after(values[3], response_ttl) : (Datum) 0;
	if (response_ttl &&
		DatumGetTimestampTz(values[9]) < DatumGetTimestampTz(values[8]))
		nulls[9] = ' ';
	values[10] = ObjectIdGetDatum(claim->holder);
	/* response_ttl is an argument of 1.6 only, the holder of 1.7 only */
	if (!create_key(claim_layout(claim, response_ttl != NULL),
					values, nulls, true, claim))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not store idempotency key \"%s\" due to a concurrent claim",
						text_to_cstring(key)),
				 errhint("Retry the request; the retry replays or waits for the other claim.")));
	unlock_key_creation(&name);
	claim->outcome = "claimed";
	idem_claim_completed(claim, body);
}

/*
 * Record in "claim", whose key this transaction has just completed, the
 * key's status and its answer, "body" with code 200.
 */
void
idem_claim_completed(IdemClaim *claim, Jsonb *body)
{
	claim->values[CLAIM_STATUS] = key_statuses[STATUS_COMPLETED];
	claim->values[CLAIM_RESPONSE_CODE] = Int32GetDatum(200);
	claim->values[CLAIM_RESPONSE_BODY] = JsonbPGetDatum(body);
	claim->nulls[CLAIM_STATUS] = claim->nulls[CLAIM_RESPONSE_CODE] =
		claim->nulls[CLAIM_RESPONSE_BODY] = false;
}

/*
 * True when the claim's caller must run the operation.
 */
bool
idem_claim_runs_work(const IdemClaim *claim)
{
	return strcmp(claim->outcome, "claimed") == 0 ||
		strcmp(claim->outcome, "resumed") == 0;
}

/*
 * The claim as an idempotency.claim_result datum, in the caller's memory.
 * The row type comes from the typcache: a function scan starts a new
 * FmgrInfo on every execution, so nothing kept in fn_extra would survive.
 */
Datum
idem_claim_datum(FunctionCallInfo fcinfo, IdemClaim *claim)
{
	Oid			typid = get_fn_expr_rettype(fcinfo->flinfo);
	TupleDesc	tupdesc;
	HeapTuple	tuple;

	if (!OidIsValid(typid) || typid == RECORDOID)
	{
		if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "return type must be a row type");
		typid = tupdesc->tdtypeid;
	}
	claim->values[CLAIM_OUTCOME] = CStringGetTextDatum(claim->outcome);
	claim->nulls[CLAIM_OUTCOME] = false;
	tupdesc = lookup_rowtype_tupdesc(typid, -1);
	tuple = heap_form_tuple(tupdesc, claim->values, claim->nulls);
	ReleaseTupleDesc(tupdesc);
	return HeapTupleGetDatum(tuple);
}

/*
 * What complete() and fail() write: the arguments of FINISH_KEY, for the
 * row written directly (finish_key_row()).
 */
typedef struct KeyFinish
{
	const Datum *args;
	const char *nulls;
	bool		completed;
	bool		answer_expiry;	/* sets response_expires_at ($11) */
	Oid			caller;			/* 1.7: the calling role, else InvalidOid */
	IdemHolders holders;		/* how the holder is checked */
	KeyName    *name;
	bool		refused;		/* set: a row of another role's key was seen */
	char	   *holder_name;	/* 1.8: the name that row records, or NULL */
} KeyFinish;

/*
 * Whether role "caller" may act as the holder of the key's row in "slot"
 * at "now" (see "Holders" above), checked as "holders" says: a row without
 * a holder_role (claimed before 1.7), an expired row (gone for every role:
 * its holder calls get 55000), the holder's role or a member of it (1.8:
 * the role holder_role_name names, and the privileged roles, roles.c).
 * When the row is another role's, *name tells whether it is the key's own
 * (not a row of another key with the same hash), and "*holder_name" (1.8)
 * gets the name the row records (NULL: none).
 */
static bool
may_act_as_holder(TupleTableSlot *slot, Oid caller, IdemHolders holders,
				  TimestampTz now, KeyName *name, char **holder_name)
{
	bool		isnull;
	bool		name_isnull = true;
	Datum		holder;
	Datum		holder_name_datum = (Datum) 0;
	Datum		value;

	holder = slot_getattr(slot, key_attnums[COL_HOLDER_ROLE], &isnull);
	if (holders == IDEM_HOLDERS_BY_NAME)
	{
		holder_name_datum = slot_getattr(slot, key_attnums[COL_HOLDER_ROLE_NAME],
										 &name_isnull);
		if (isnull && name_isnull)
			return true;
	}
	else if (isnull || DatumGetObjectId(holder) == caller)
		return true;
	value = slot_getattr(slot, key_attnums[COL_EXPIRES_AT], &isnull);
	if (isnull || DatumGetTimestampTz(value) <= now)
		return true;
	if (holders == IDEM_HOLDERS_BY_NAME)
	{
		const char *bound = name_isnull ? NULL :
			NameStr(*DatumGetName(holder_name_datum));

		if (idem_binding_allows(caller, true, bound))
			return true;
		*holder_name = bound ? pstrdup(bound) : NULL;
	}
	else if (is_member_of_role(caller, DatumGetObjectId(holder)))
		return true;
	value = slot_getattr(slot, key_attnums[COL_SCOPE], &isnull);
	if (isnull || !same_text(value, name->scope))
		return true;
	value = slot_getattr(slot, key_attnums[COL_KEY], &isnull);
	return isnull || !same_text(value, name->key);
}

/*
 * Refuse a holder call on another role's key: 42501, whatever the fence,
 * which the message does not repeat.  With IDEM_HOLDERS_BY_NAME the message
 * names the holder's role, and whether it exists here, and who else may
 * release the key.
 */
static void
refuse_holder(text *key, text *scope, IdemHolders holders,
			  const char *holder_name)
{
	char	   *key_str = text_to_cstring(key);
	char	   *scope_str = text_to_cstring(scope);

	if (holders != IDEM_HOLDERS_BY_NAME)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to act as the holder of idempotency key \"%s\"",
						key_str),
				 errdetail("Another role claimed the key in scope \"%s\"; only that role and its members may complete, fail, checkpoint or release it.",
						   scope_str),
				 errhint("Call the holder functions as the role that claimed the key.")));
	if (holder_name == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to act as the holder of idempotency key \"%s\"",
						key_str),
				 errdetail("The role that claimed the key in scope \"%s\" is not recorded by name.",
						   scope_str),
				 errhint("Only the extension's owner or a superuser may release the key.")));
	if (!idem_role_exists(holder_name))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to act as the holder of idempotency key \"%s\"",
						key_str),
				 errdetail("Role \"%s\", which claimed the key in scope \"%s\", does not exist.",
						   holder_name, scope_str),
				 errhint("Only the extension's owner or a superuser may release the key.")));
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to act as the holder of idempotency key \"%s\"",
					key_str),
			 errdetail("Role \"%s\" claimed the key in scope \"%s\"; only that role and its members may complete, fail, checkpoint or release it.",
					   holder_name, scope_str),
			 errhint("Call the holder functions as role \"%s\"; the extension's owner or a superuser may also release the key.",
					 holder_name)));
}

/*
 * After a holder call of role "caller" found no row held by its fence
 * (a statement whose WHERE clause checked the role too): refuse it when
 * the key's live row is another role's, as the direct path does.
 */
static void
refuse_other_holder(KeyName *name, Oid caller, IdemHolders holders,
					TimestampTz now)
{
	ScanKeyData skey[1];
	IdemIndexScan scan;
	bool		refused = false;
	char	   *holder_name = NULL;

	begin_key_scan(&scan, skey, name, AccessShareLock);
	if (key_attnums[COL_HOLDER_ROLE] != InvalidAttrNumber &&
		(holders != IDEM_HOLDERS_BY_NAME ||
		 key_attnums[COL_HOLDER_ROLE_NAME] != InvalidAttrNumber))
		while (!refused && idem_index_scan_next(&scan))
			refused = !may_act_as_holder(scan.slot, caller, holders, now, name,
										 &holder_name);
	idem_index_scan_end(&scan);
	if (refused)
		refuse_holder(name->key, name->scope, holders, holder_name);
}

/*
 * The arguments of a holder statement that check the calling role, from
 * "first" on: its OID (1.7), name and privilege (1.8).
 */
static void
caller_args(Datum *values, int first, Oid caller, IdemHolders holders)
{
	values[first] = ObjectIdGetDatum(caller);
	values[first + 1] = holders == IDEM_HOLDERS_BY_NAME ?
		idem_role_name(caller) : (Datum) 0;
	values[first + 2] = BoolGetDatum(holders == IDEM_HOLDERS_BY_NAME &&
									 idem_role_privileged(caller));
}

/*
 * FINISH_KEY's WHERE clause, HELD_BY_FENCE, on a version of the key's row,
 * after the holder's role (1.7): a row of another role is refused whatever
 * its fence.
 */
static bool
held_by_fence(TupleTableSlot *slot, void *arg)
{
	KeyFinish  *finish = arg;
	const Datum *args = finish->args;
	bool		isnull;
	Datum		value;

	value = slot_getattr(slot, key_hash_attnum[0], &isnull);
	if (isnull || memcmp(DatumGetUUIDP(value), DatumGetUUIDP(args[9]),
						 UUID_LEN) != 0)
		return false;
	if (OidIsValid(finish->caller) &&
		!may_act_as_holder(slot, finish->caller, finish->holders,
						   DatumGetTimestampTz(args[5]), finish->name,
						   &finish->holder_name))
	{
		finish->refused = true;
		return false;
	}
	value = slot_getattr(slot, key_attnums[COL_FENCE], &isnull);
	if (isnull || DatumGetInt64(value) != DatumGetInt64(args[2]))
		return false;
	value = slot_getattr(slot, key_attnums[COL_STATUS], &isnull);
	if (isnull || value != key_statuses[STATUS_PROCESSING])
		return false;
	value = slot_getattr(slot, key_attnums[COL_EXPIRES_AT], &isnull);
	return !isnull &&
		DatumGetTimestampTz(value) > DatumGetTimestampTz(args[5]);
}

/* The columns FINISH_KEY sets, the answer's expiry last. */
static const int finished_columns[] = {
	COL_STATUS, COL_RESPONSE_CODE, COL_RESPONSE_BODY, COL_RETRYABLE,
	COL_LOCKED_UNTIL, COL_UPDATED_AT, COL_EXPIRES_AT, COL_RESPONSE_EXPIRES_AT
};

/*
 * FINISH_KEY's SET list, on the values of the row it updates.
 */
static void
finish_row(Datum *values, bool *isnull, void *arg)
{
	KeyFinish  *finish = arg;
	const Datum *args = finish->args;
	const char *nulls = finish->nulls;
	int			expires_at = key_attnums[COL_EXPIRES_AT] - 1;

#define SET_COLUMN(col, value, null) \
	(values[key_attnums[col] - 1] = (value), \
	 isnull[key_attnums[col] - 1] = (null))
	SET_COLUMN(COL_STATUS,
			   key_statuses[finish->completed ? STATUS_COMPLETED : STATUS_FAILED],
			   false);
	SET_COLUMN(COL_RESPONSE_CODE, args[3], false);
	SET_COLUMN(COL_RESPONSE_BODY, args[4], nulls[4] == 'n');
	SET_COLUMN(COL_RETRYABLE, args[7], nulls[7] == 'n');
	SET_COLUMN(COL_LOCKED_UNTIL, (Datum) 0, true);
	SET_COLUMN(COL_UPDATED_AT, args[5], false);
	/* expires_at = COALESCE($9, expires_at) */
	if (nulls[8] != 'n')
		SET_COLUMN(COL_EXPIRES_AT, args[8], false);
	/* ANSWER_EXPIRY($11, that expires_at) */
	if (finish->answer_expiry)
		SET_COLUMN(COL_RESPONSE_EXPIRES_AT, args[10],
				   isnull[expires_at] ||
				   DatumGetTimestampTz(args[10]) >=
				   DatumGetTimestampTz(values[expires_at]));
#undef SET_COLUMN
}

/*
 * Write what FINISH_KEY writes to the key's row held by the fence, with
 * idem_update_row(): the executor's row primitives without starting the
 * statement (writes.c).  IDEM_WRITE_BY_STATEMENT when the table takes the
 * statement only.
 */
static IdemWriteResult
finish_key_row(KeyName *name, KeyFinish *finish)
{
	ScanKeyData skey[1];
	IdemIndexScan scan;
	AttrNumber	updated[lengthof(finished_columns)];
	AttrNumber	read[6];
	IdemStatementColumns columns;
	IdemWriteResult result = IDEM_WRITE_BY_STATEMENT;
	int			i;

	begin_key_scan(&scan, skey, name, RowExclusiveLock);
	(void) idem_learn_columns(&key_hash_column, scan.rel);
	columns.nwritten = lengthof(finished_columns) - (finish->answer_expiry ? 0 : 1);
	for (i = 0; i < columns.nwritten; i++)
		updated[i] = key_attnums[finished_columns[i]];
	columns.written = updated;
	/* what HELD_BY_FENCE (with, 1.7, the holder's role) and the SET list read */
	read[0] = key_hash_attnum[0];
	read[1] = key_attnums[COL_FENCE];
	read[2] = key_attnums[COL_STATUS];
	read[3] = key_attnums[COL_EXPIRES_AT];
	columns.nread = 4;
	if (OidIsValid(finish->caller) &&
		key_attnums[COL_HOLDER_ROLE] != InvalidAttrNumber)
		read[columns.nread++] = key_attnums[COL_HOLDER_ROLE];
	if (finish->holders == IDEM_HOLDERS_BY_NAME &&
		key_attnums[COL_HOLDER_ROLE_NAME] != InvalidAttrNumber)
		read[columns.nread++] = key_attnums[COL_HOLDER_ROLE_NAME];
	columns.read = read;
	/*
	 * a table before 1.6 (1.7, 1.8) lacks the answer's expiry (the holder,
	 * its name): the statement says so
	 */
	if ((!finish->answer_expiry ||
		 key_attnums[COL_RESPONSE_EXPIRES_AT] != InvalidAttrNumber) &&
		(!OidIsValid(finish->caller) ||
		 key_attnums[COL_HOLDER_ROLE] != InvalidAttrNumber) &&
		(finish->holders != IDEM_HOLDERS_BY_NAME ||
		 key_attnums[COL_HOLDER_ROLE_NAME] != InvalidAttrNumber))
		result = idem_update_row(&scan, &columns, held_by_fence,
								 finish_row, finish);
	idem_index_scan_end(&scan);
	return result;
}

/*
 * Raise the error of a holder call whose fence no longer holds the key.
 */
static void
lease_lost(text *key, text *scope, int64 fence)
{
	idem_metrics_count(scope, IDEM_OUTCOME_LEASE_LOST, 1);
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("idempotency lease lost for key \"%s\"",
					text_to_cstring(key)),
			 errdetail("Fence " INT64_FORMAT " no longer holds the key in scope \"%s\": its lease ran out and another claim took the key over, or the key was completed, failed, released or purged.",
					   fence, text_to_cstring(scope)),
			 errhint("Abandon this attempt; a retry of the request claims the key again.")));
}

/*
 * Store the final or retryable outcome of a held key: a final answer is
 * replayed for "ttl" from now (NULL: the claim's), until "response_ttl"
 * from now (NULL: as long as the key; given by 1.6 only).  "caller" is the
 * calling role, whose right to act as the holder is checked (1.7; by name
 * when "holders" says so, 1.8), or InvalidOid.  Runs as the extension
 * owner.
 */
void
idem_finish_key(text *key, text *scope, int64 fence, bool completed,
				Datum body, bool body_isnull, int32 response_code,
				bool retryable, Interval *ttl, Interval *response_ttl,
				Oid caller, IdemHolders holders)
{
	KeyName		name = {.scope = scope, .key = key};
	Datum		values[FINISH_NARGS];
	char		nulls[FINISH_NARGS] = {' ', ' ', ' ', ' ', body_isnull ? 'n' : ' ', ' ', ' ',
	completed ? 'n' : ' ', ttl ? ' ' : 'n', ' ', response_ttl ? ' ' : 'n', ' ',
	holders == IDEM_HOLDERS_BY_NAME ? ' ' : 'n', ' '};
	KeyFinish	finish = {.args = values, .nulls = nulls, .completed = completed,
		.answer_expiry = response_ttl != NULL, .caller = caller,
		.holders = OidIsValid(caller) ? holders : IDEM_HOLDERS_NONE,
	.name = &name, .refused = false, .holder_name = NULL};
	IdemWriteResult result;
	bool		held;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = Int64GetDatum(fence);
	values[3] = Int32GetDatum(response_code);
	values[4] = body;
	values[5] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[6] = BoolGetDatum(completed);
	values[7] = BoolGetDatum(retryable);
	values[8] = ttl ? time_after(values[5], ttl) : (Datum) 0;
	values[9] = key_hash_of(&name);
	values[10] = response_ttl ? time_after(values[5], response_ttl) : (Datum) 0;
	caller_args(values, 11, caller, finish.holders);

	(void) key_layout();		/* refuses a table it does not serve */
	result = finish_key_row(&name, &finish);
	held = result == IDEM_WRITE_DONE;
	if (result == IDEM_WRITE_BY_STATEMENT)
	{
		SPI_connect();
		held = idem_run(&finish_key[finish.holders][response_ttl != NULL],
						values, nulls, false, 0) == 1;
		SPI_finish();
		if (!held && OidIsValid(caller))
			refuse_other_holder(&name, caller, finish.holders,
								DatumGetTimestampTz(values[5]));
	}
	if (!held)
	{
		if (finish.refused)
			refuse_holder(key, scope, finish.holders, finish.holder_name);
		lease_lost(key, scope, fence);
	}
	idem_wake_waiters_at_commit(DatumGetUUIDP(values[9]));
}

/*
 * A response body argument, bounded by idempotency.max_response_bytes;
 * NULL when the argument is NULL.
 */
Jsonb *
idem_arg_response(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	Size		size;

	if (PG_ARGISNULL(argno))
		return NULL;
	size = toast_raw_datum_size(PG_GETARG_DATUM(argno));
	if (size > (Size) idem_max_response_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s is too large to store", argname),
				 errdetail("It takes %zu bytes; idempotency.max_response_bytes allows %d.",
						   size, idem_max_response_bytes),
				 errhint("Store a smaller response, or raise idempotency.max_response_bytes.")));
	return PG_GETARG_JSONB_P(argno);
}

/*
 * An HTTP status code argument: 100 to 599.
 */
int32
idem_arg_response_code(FunctionCallInfo fcinfo, int argno)
{
	int32		code;

	idem_require_arg(fcinfo, argno, "response_code");
	code = PG_GETARG_INT32(argno);
	if (code < 100 || code > 599)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("response_code %d is not an HTTP status code", code),
				 errhint("Use a code from 100 to 599.")));
	return code;
}

/*
 * An interval argument that applies to a final answer only (ttl,
 * response_ttl): NULL means "default_value" for a final answer, and
 * must be NULL for a retryable failure.  NULL when the function's
 * signature, of an older version, lacks it.
 */
Interval *
idem_arg_answer_interval(FunctionCallInfo fcinfo, int argno,
						 const char *argname, bool final,
						 Interval *default_value)
{
	if (PG_NARGS() <= argno)
		return NULL;
	if (PG_ARGISNULL(argno))
		return final ? default_value : NULL;
	if (!final)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s applies only to a final answer", argname),
				 errdetail("A retryable failure is resumed by the next claim, not replayed."),
				 errhint("Pass retryable => false to replay the error for %s, or leave %s NULL.",
						 argname, argname)));
	return idem_arg_interval(fcinfo, argno, argname, NULL);
}

/*
 * The fence argument of a holder call.
 */
static int64
arg_fence(FunctionCallInfo fcinfo, int argno)
{
	idem_require_arg(fcinfo, argno, "fence");
	return PG_GETARG_INT64(argno);
}

/*
 * claim(key, request, scope, ttl, lease) RETURNS claim_result; the symbol
 * of 1.6 (idempotency_claim_1_6) passes IDEM_CLAIM_ANSWERS_EXPIRE and
 * takes a sixth argument, wait.
 */
static Datum
claim_call(FunctionCallInfo fcinfo, int flags, IdemHolders holders)
{
	text	   *key = idem_arg_key(fcinfo, 0);
	Jsonb	   *request = PG_ARGISNULL(1) ? NULL : PG_GETARG_JSONB_P(1);
	text	   *scope = idem_arg_scope(fcinfo, 2);
	Interval   *ttl = idem_arg_interval(fcinfo, 3, "ttl", &idem_default_ttl);
	Interval   *lease = idem_arg_interval(fcinfo, 4, "lease",
										  &idem_lease_timeout);
	Interval   *wait = idem_arg_wait(fcinfo, 5);
	IdemOwnerRights owner;
	IdemClaim	claim;

	idem_check_ttl_covers_lease(ttl, lease);
	/* the role that claims, before the switch to the owner */
	claim.holder = holders != IDEM_HOLDERS_NONE ? GetUserId() : InvalidOid;
	claim.holders = holders;
	idem_become_owner(&owner);
	idem_claim_key_waiting(key, scope, request, ttl, lease, flags, wait,
						   &claim);
	idem_restore_user(&owner);
	idem_metrics_count_claim(scope, claim.outcome);
	PG_RETURN_DATUM(idem_claim_datum(fcinfo, &claim));
}

Datum
idempotency_claim(PG_FUNCTION_ARGS)
{
	return claim_call(fcinfo, 0, IDEM_HOLDERS_NONE);
}

Datum
idempotency_claim_1_6(PG_FUNCTION_ARGS)
{
	return claim_call(fcinfo, IDEM_CLAIM_ANSWERS_EXPIRE, IDEM_HOLDERS_NONE);
}

/*
 * 1.7: the claim records the role that claims as the key's holder_role;
 * 1.8: and its name, in holder_role_name
 */
Datum
idempotency_claim_1_8(PG_FUNCTION_ARGS)
{
	return claim_call(fcinfo, IDEM_CLAIM_ANSWERS_EXPIRE, IDEM_HOLDERS_BY_NAME);
}

Datum
idempotency_claim_1_7(PG_FUNCTION_ARGS)
{
	return claim_call(fcinfo, IDEM_CLAIM_ANSWERS_EXPIRE, IDEM_HOLDERS_BY_OID);
}

/*
 * Shared body of complete() and fail().  The 1.6 signatures end with
 * response_ttl, how long a final answer is replayed (NULL:
 * idempotency.default_response_ttl; unset, as long as the key); the 1.1
 * ones lack it and end with ttl, the replay window of a final answer
 * (NULL: the claim's); the 1.0 ones lack both.  The older ones stay bound
 * to the old symbols until ALTER EXTENSION ... UPDATE.  The symbols of 1.7
 * and 1.8 ("holders") refuse a role other than the holder's, by its OID
 * and by its name.
 */
static void
finish_held_key(FunctionCallInfo fcinfo, int body_arg, int code_arg,
				int scope_arg, bool completed, bool retryable,
				IdemHolders holders)
{
	text	   *key = idem_arg_key(fcinfo, 0);
	int64		fence = arg_fence(fcinfo, 1);
	Jsonb	   *body = idem_arg_response(fcinfo, body_arg,
										 completed ? "response_body" : "error");
	int32		code = idem_arg_response_code(fcinfo, code_arg);
	text	   *scope = idem_arg_scope(fcinfo, scope_arg);
	bool		final = completed || !retryable;
	Interval   *ttl = idem_arg_answer_interval(fcinfo, scope_arg + 1, "ttl",
											   final, NULL);
	Interval   *response_ttl = idem_arg_answer_interval(fcinfo, scope_arg + 2,
														"response_ttl", final,
														idem_default_response_ttl);
	Oid			caller = holders != IDEM_HOLDERS_NONE ? GetUserId() : InvalidOid;
	IdemOwnerRights owner;

	PreventCommandIfReadOnly(completed ? "idempotency.complete()" : "idempotency.fail()");
	idem_become_owner(&owner);
	idem_finish_key(key, scope, fence, completed, JsonbPGetDatum(body),
					body == NULL, code, retryable, ttl, response_ttl, caller,
					holders);
	idem_restore_user(&owner);
}

/*
 * complete(key, fence, response_body, response_code, scope, ttl,
 * response_ttl) RETURNS void; idempotency_complete_1_8 checks the holder's
 * role by its name, idempotency_complete_1_7 by its OID,
 * idempotency_complete_1_6 not at all; idempotency_complete_1_1 is the
 * 1.1 symbol, without response_ttl, and idempotency_complete the 1.0 one,
 * without ttl either: finish_held_key() tells them apart by their
 * arguments.
 */
static Datum
complete_call(FunctionCallInfo fcinfo, IdemHolders holders)
{
	idem_require_arg(fcinfo, 2, "response_body");
	finish_held_key(fcinfo, 2, 3, 4, true, false, holders);
	PG_RETURN_VOID();
}

Datum
idempotency_complete_1_8(PG_FUNCTION_ARGS)
{
	return complete_call(fcinfo, IDEM_HOLDERS_BY_NAME);
}

Datum
idempotency_complete_1_7(PG_FUNCTION_ARGS)
{
	return complete_call(fcinfo, IDEM_HOLDERS_BY_OID);
}

Datum
idempotency_complete_1_6(PG_FUNCTION_ARGS)
{
	return complete_call(fcinfo, IDEM_HOLDERS_NONE);
}

Datum
idempotency_complete_1_1(PG_FUNCTION_ARGS)
{
	return idempotency_complete_1_6(fcinfo);
}

Datum
idempotency_complete(PG_FUNCTION_ARGS)
{
	return idempotency_complete_1_6(fcinfo);
}

/*
 * fail(key, fence, error, response_code, retryable, scope, ttl,
 * response_ttl) RETURNS void; idempotency_fail_1_1 and idempotency_fail
 * are the symbols of 1.1 and 1.0, as for complete(); the symbols of 1.7
 * and 1.8 check the holder's role, by its OID and by its name.
 */
static Datum
fail_call(FunctionCallInfo fcinfo, IdemHolders holders)
{
	idem_require_arg(fcinfo, 4, "retryable");
	finish_held_key(fcinfo, 2, 3, 5, false, PG_GETARG_BOOL(4), holders);
	PG_RETURN_VOID();
}

Datum
idempotency_fail_1_8(PG_FUNCTION_ARGS)
{
	return fail_call(fcinfo, IDEM_HOLDERS_BY_NAME);
}

Datum
idempotency_fail_1_7(PG_FUNCTION_ARGS)
{
	return fail_call(fcinfo, IDEM_HOLDERS_BY_OID);
}

Datum
idempotency_fail_1_6(PG_FUNCTION_ARGS)
{
	return fail_call(fcinfo, IDEM_HOLDERS_NONE);
}

Datum
idempotency_fail_1_1(PG_FUNCTION_ARGS)
{
	return idempotency_fail_1_6(fcinfo);
}

Datum
idempotency_fail(PG_FUNCTION_ARGS)
{
	return idempotency_fail_1_6(fcinfo);
}

/*
 * checkpoint(key, fence, recovery_point, lease, scope) RETURNS void; the
 * symbols of 1.7 and 1.8 ("holders") refuse a role other than the
 * holder's, by its OID and by its name.
 */
static Datum
checkpoint_call(FunctionCallInfo fcinfo, IdemHolders holders)
{
	text	   *key = idem_arg_key(fcinfo, 0);
	int64		fence = arg_fence(fcinfo, 1);
	text	   *recovery_point = PG_ARGISNULL(2) ? NULL :
		idem_arg_name(fcinfo, 2, "recovery_point", 1, IDEM_MAX_NAME_CHARS);
	Interval   *lease = idem_arg_interval(fcinfo, 3, "lease",
										  &idem_lease_timeout);
	text	   *scope = idem_arg_scope(fcinfo, 4);
	KeyName		name = {.scope = scope, .key = key};
	Oid			caller = holders != IDEM_HOLDERS_NONE ? GetUserId() : InvalidOid;
	Datum		values[10];
	char		nulls[10] = {' ', ' ', ' ', recovery_point ? ' ' : 'n', ' ', ' ', ' ', ' ',
	holders == IDEM_HOLDERS_BY_NAME ? ' ' : 'n', ' '};

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = Int64GetDatum(fence);
	values[3] = PointerGetDatum(recovery_point);
	values[4] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[5] = IntervalPGetDatum(lease);
	values[6] = key_hash_of(&name);
	caller_args(values, 7, caller, holders);

	PreventCommandIfReadOnly("idempotency.checkpoint()");
	(void) key_layout();
	if (idem_run_as_owner(&checkpoint_key[holders], values, nulls, false,
						  NULL, NULL) != 1)
	{
		if (holders != IDEM_HOLDERS_NONE)
			refuse_other_holder(&name, caller, holders,
								DatumGetTimestampTz(values[4]));
		lease_lost(key, scope, fence);
	}
	PG_RETURN_VOID();
}

Datum
idempotency_checkpoint_1_8(PG_FUNCTION_ARGS)
{
	return checkpoint_call(fcinfo, IDEM_HOLDERS_BY_NAME);
}

Datum
idempotency_checkpoint_1_7(PG_FUNCTION_ARGS)
{
	return checkpoint_call(fcinfo, IDEM_HOLDERS_BY_OID);
}

Datum
idempotency_checkpoint(PG_FUNCTION_ARGS)
{
	return checkpoint_call(fcinfo, IDEM_HOLDERS_NONE);
}

/*
 * release(key, fence, scope) RETURNS void; the symbols of 1.7 and 1.8
 * ("holders") refuse a role other than the holder's, by its OID and by
 * its name.
 */
static Datum
release_call(FunctionCallInfo fcinfo, IdemHolders holders)
{
	text	   *key = idem_arg_key(fcinfo, 0);
	int64		fence = arg_fence(fcinfo, 1);
	text	   *scope = idem_arg_scope(fcinfo, 2);
	KeyName		name = {.scope = scope, .key = key};
	Oid			caller = holders != IDEM_HOLDERS_NONE ? GetUserId() : InvalidOid;
	Datum		values[8];
	char		nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ',
	holders == IDEM_HOLDERS_BY_NAME ? ' ' : 'n', ' '};

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = Int64GetDatum(fence);
	values[3] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[4] = key_hash_of(&name);
	caller_args(values, 5, caller, holders);

	PreventCommandIfReadOnly("idempotency.release()");
	(void) key_layout();
	if (idem_run_as_owner(&release_key[holders], values, nulls, false,
						  NULL, NULL) != 1)
	{
		if (holders != IDEM_HOLDERS_NONE)
			refuse_other_holder(&name, caller, holders,
								DatumGetTimestampTz(values[3]));
		lease_lost(key, scope, fence);
	}
	idem_wake_waiters_at_commit(DatumGetUUIDP(values[4]));
	PG_RETURN_VOID();
}

Datum
idempotency_release_1_8(PG_FUNCTION_ARGS)
{
	return release_call(fcinfo, IDEM_HOLDERS_BY_NAME);
}

Datum
idempotency_release_1_7(PG_FUNCTION_ARGS)
{
	return release_call(fcinfo, IDEM_HOLDERS_BY_OID);
}

Datum
idempotency_release(PG_FUNCTION_ARGS)
{
	return release_call(fcinfo, IDEM_HOLDERS_NONE);
}

/*
 * The row "row" of the table of keys as lookup() shows it at "now": its
 * response_body NULL once its response_expires_at (1.6; absent before) has
 * come, the moment a claim starts answering gone (the code stays, as in
 * gone), and its fence NULL unless "show_fence": only the holder learns
 * the fence, from its claim.  The row is formed again only when it loses
 * a value.
 */
static Datum
row_for_caller(Datum row, TimestampTz now, bool show_fence)
{
	HeapTupleHeader header = DatumGetHeapTupleHeader(row);
	TupleDesc	tupdesc = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(header),
												 HeapTupleHeaderGetTypMod(header));
	HeapTupleData tuple;
	Datum	   *values = palloc(sizeof(Datum) * tupdesc->natts);
	bool	   *nulls = palloc(sizeof(bool) * tupdesc->natts);
	int			fence = -1;
	int			body = -1;
	int			answer_expiry = -1;
	bool		changed = false;
	int			i;

	tuple.t_len = HeapTupleHeaderGetDatumLength(header);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = InvalidOid;
	tuple.t_data = header;
	heap_deform_tuple(&tuple, tupdesc, values, nulls);
	for (i = 0; i < tupdesc->natts; i++)
	{
		const char *name = NameStr(TupleDescAttr(tupdesc, i)->attname);

		if (strcmp(name, key_column_names[COL_FENCE]) == 0)
			fence = i;
		else if (strcmp(name, key_column_names[COL_RESPONSE_BODY]) == 0)
			body = i;
		else if (strcmp(name, key_column_names[COL_RESPONSE_EXPIRES_AT]) == 0)
			answer_expiry = i;
	}
	if (!show_fence && fence >= 0 && !nulls[fence])
		nulls[fence] = changed = true;
	/* answer_from_row()'s test for gone */
	if (body >= 0 && !nulls[body] && answer_expiry >= 0 &&
		!nulls[answer_expiry] &&
		DatumGetTimestampTz(values[answer_expiry]) <= now)
		nulls[body] = changed = true;
	if (changed)
		row = HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
	ReleaseTupleDesc(tupdesc);
	return row;
}

/*
 * lookup(key, scope) RETURNS idempotency_keys: the row, or NULL when the key
 * is absent or expired.  Past its response_expires_at (1.6) the row has no
 * response_body, whoever asks: claims answer gone from then on, and the
 * body waits only for purge_expired() to drop it.  The fence is only shown
 * to a role that may read the table of keys itself (its owner, a
 * superuser); an application role sees NULL, so that it cannot act as the
 * holder of another request.  idempotency_lookup_1_7 is the symbol of 1.7,
 * which declares the function again (for the portable edition's body):
 * both behave alike, and so does a database not yet updated.
 */
Datum
idempotency_lookup_1_7(PG_FUNCTION_ARGS)
{
	text	   *key = idem_arg_key(fcinfo, 0);
	text	   *scope = idem_arg_scope(fcinfo, 1);
	KeyName		name = {.scope = scope, .key = key};
	Datum		values[4];
	Datum		row = (Datum) 0;
	bool		isnull;

	values[0] = PointerGetDatum(scope);
	values[1] = PointerGetDatum(key);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[3] = key_hash_of(&name);

	(void) key_layout();
	(void) idem_run_as_owner(&lookup_key, values, NULL, true, &row, &isnull);
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(row_for_caller(row, DatumGetTimestampTz(values[2]),
								   pg_class_aclcheck(idem_relation_oid("idempotency_keys"),
													 GetUserId(), ACL_SELECT) == ACLCHECK_OK));
}

Datum
idempotency_lookup(PG_FUNCTION_ARGS)
{
	return idempotency_lookup_1_7(fcinfo);
}
