/*-------------------------------------------------------------------------
 *
 * outbox.c
 *	  Transactional outbox: enqueue_event, enqueue_events, emit_event,
 *	  claim_events, mark_published, mark_failed and outbox_quiet_commits
 *	  (the inbox, process_once, is inbox.c).
 *
 * An event is pending while it is neither published nor dead; a pending
 * event is free when no relay holds a live lease on it and its retry time
 * (after mark_failed) has come.  claim_events hands out free events oldest
 * first, and an event only together with, or after, every earlier pending
 * event of its (aggregate_type, aggregate_id).  It runs three statements:
 *
 *	1. find_candidates: free events, oldest first, skipping aggregates that
 *	   have a leased or retry-waiting event (a small partial index lists
 *	   those, so a long queue behind a held aggregate costs a hash probe per
 *	   event, not an index probe);
 *	2. read_aggregates, after locking (below): the first pending events of
 *	   each candidate's aggregate; C keeps a candidate only if every event
 *	   before it in its aggregate is a free candidate too;
 *	3. lease_events: the UPDATE, which re-checks each row (a stale relay
 *	   may have published one meanwhile; that only ever removes a blocker).
 *
 * Locking rules.  The outbox's locks are transaction-scoped advisory locks
 * in a space of their own: pg_locks shows them with classid
 * OUTBOX_LOCK_CLASS and objsubid OUTBOX_LOCK_SPACE, where pg_advisory_lock
 * uses 1 and 2 (and keys.c 3), so no lock of an application meets them.
 * Each aggregate hashes to one of OUTBOX_LOCK_BUCKETS buckets (objid the
 * bucket); objid OUTBOX_LOCK_ALL stands for all of them at once:
 *
 *	- enqueue_event(s) and mark_failed take the buckets of the aggregates
 *	  they write in share mode before they write, and keep them until their
 *	  transaction ends.  A transaction that would hold more than
 *	  OUTBOX_XACT_BUCKETS buckets takes OUTBOX_LOCK_ALL in share mode
 *	  instead, so that a bulk load holds at most OUTBOX_XACT_BUCKETS + 1
 *	  entries of the shared lock table, not OUTBOX_LOCK_BUCKETS.  Writers never block each other, only
 *	  wait for a claim_events that is running on what they lock.
 *	- claim_events takes OUTBOX_LOCK_ALL in row exclusive mode without
 *	  waiting (claims do not conflict with each other there, writers that
 *	  hold it do) and hands out nothing if a writer holds it.  It picks
 *	  candidates, then tries the buckets of their aggregates in exclusive
 *	  mode without waiting, drops the aggregates it could not lock, and only
 *	  then decides and leases with a new snapshot.
 *
 * Holding the bucket, the claim's new snapshot shows every write that could
 * block an aggregate: all earlier writers of the aggregate have committed
 * or aborted, and no writer of it is in flight.  So another relay's lease,
 * a retry wait set by mark_failed, and an earlier event enqueued by a
 * transaction that commits after a later one (identity values are drawn in
 * insert order, not commit order) are all seen, or the aggregate is
 * skipped this time.  Relays never wait for each other: a relay that finds
 * a bucket busy takes other aggregates.  claim_events therefore needs READ
 * COMMITTED (a snapshot per statement) and should run in its own short
 * transaction.
 *
 * Leases.  Each claim_events call leases its events under a new token and
 * counts a takeover on an event whose previous lease ran out unmarked.
 * mark_published and mark_failed with a token change only the events
 * leased under it.  Without a token nothing tells the calling relay apart
 * from another one, so they change only events whose lease was never taken
 * over: a relay whose lease was taken over can then change nothing,
 * whatever connection its mark arrives on, and the relay holding a
 * taken-over lease passes its token.
 *
 * Lease roles.  claim_events records the calling role in lease_role
 * of each event it leases, and mark_published and mark_failed refuse
 * (42501), changing nothing, a call that names a pending event whose
 * lease_role is another role than the caller's and one it is not a member
 * of, whatever lease token it passes: a lease token can be guessed, a role
 * cannot be borrowed.  The check is a clause of the marking UPDATE, so an
 * event is never marked by another role; only when the UPDATE changed
 * fewer events than the call named does a second read look for one it
 * refused.  Events leased with no role recorded (lease_role NULL: by a
 * symbol of 1.6 or older) take any role's marks.  The claim_events of 1.8
 * records the role's name too
 * (lease_role_name), and the marks check that name instead of the OID,
 * which may name another role after a restore or on a logical subscriber;
 * the owner of the extension's tables and superusers may mark any event
 * (roles.c).
 *
 * Bounds.  claim_events refuses (22023), before it writes anything,
 * a batch above idempotency.outbox_max_batch or a lease above
 * idempotency.outbox_max_lease, superusers' settings; an operator takes
 * leases back with release_event_leases() (plain SQL, in the update
 * script).
 *
 * Each call reads the clock once, when it starts its work, and leases,
 * retry times and publication times are that reading plus what is due.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/nbtree.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/sequence.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "replication/message.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/json.h"
#include "utils/pg_lsn.h"
#include "utils/tuplestore.h"

#include "idempotency.h"
#include "arguments.h"
#include "bookkeeping.h"
#include "fingerprint.h"
#include "relations.h"
#include "roles.h"
#include "writes.h"

/* Channel of enqueue_event's notifications and prefix of emit_event's messages. */
#define OUTBOX_CHANNEL "idempotency_outbox"

/*
 * The outbox's advisory locks (see the locking rules above): class "OUTB",
 * objsubid 4; objid a bucket, all buckets, or a quiet commit's slot.
 */
#define OUTBOX_LOCK_CLASS 0x4F555442
#define OUTBOX_LOCK_SPACE 4
#define OUTBOX_LOCK_BUCKETS 1024
#define OUTBOX_LOCK_ALL OUTBOX_LOCK_BUCKETS
#define OUTBOX_LOCK_QUIET (OUTBOX_LOCK_ALL + 1)
#define OUTBOX_QUIET_SLOTS 16

/* Most buckets a transaction locks for writing; beyond, OUTBOX_LOCK_ALL. */
#define OUTBOX_XACT_BUCKETS 64

/* Longest retry delay of mark_failed, in seconds. */
#define OUTBOX_MAX_BACKOFF_SECS 3600.0

/* Shorthands for the qualified operators of the statements below. */
#define EQ " OPERATOR(pg_catalog.=) "
#define LE " OPERATOR(pg_catalog.<=) "
#define GE " OPERATOR(pg_catalog.>=) "
#define PLUS " OPERATOR(pg_catalog.+) "
#define TIMES " OPERATOR(pg_catalog.*) "

/* Predicates on an event "e"; $1 is now wherever FREE is used. */
#define PENDING(e) e ".published_at IS NULL AND " e ".dead_at IS NULL"
#define FREE(e) "(" e ".locked_until IS NULL OR " e ".locked_until" LE "$1)" \
	" AND (" e ".next_attempt_at IS NULL OR " e ".next_attempt_at" LE "$1)"

/* Leased or failed and not yet published: what the held index covers. */
#define TOUCHED(e) "(" e ".locked_until IS NOT NULL OR " e ".next_attempt_at IS NOT NULL)"

/* $1 type, $2 id, $3 event type, $4 payload, $5 headers */
static IdemQuery insert_event = {
	.sql = "INSERT INTO idempotency.outbox_events"
	" (aggregate_type, aggregate_id, event_type, payload, headers)"
	" VALUES ($1, $2, $3, $4, $5) RETURNING id",
	.nargs = 5, .argtypes = {TEXTOID, TEXTOID, TEXTOID, JSONBOID, JSONBOID}
};

/* The columns of outbox_events that enqueue_event gives ($1 to $5), and id. */
enum
{
	EVENT_AGGREGATE_TYPE,
	EVENT_AGGREGATE_ID,
	EVENT_TYPE,
	EVENT_PAYLOAD,
	EVENT_HEADERS,
	EVENT_ID,
	EVENT_NCOLUMNS
};

static const char *const event_column_names[EVENT_NCOLUMNS] = {
	"aggregate_type", "aggregate_id", "event_type", "payload", "headers", "id"
};
static const Oid event_column_types[EVENT_NCOLUMNS] = {
	TEXTOID, TEXTOID, TEXTOID, JSONBOID, JSONBOID, INT8OID
};
static AttrNumber event_attnums[EVENT_NCOLUMNS];
static IdemColumns event_columns = {
	.ncolumns = EVENT_NCOLUMNS,
	.names = event_column_names,
	.types = event_column_types,
	.attnums = event_attnums,
};

/*
 * $1 types, $2 ids, $3 event types, $4 payloads, $5 headers: the rows in
 * the order of the arrays, so ids grow in that order.
 */
static IdemQuery insert_events = {
	.sql = "INSERT INTO idempotency.outbox_events"
	" (aggregate_type, aggregate_id, event_type, payload, headers)"
	" SELECT u.t, u.a, u.e, u.p, u.h FROM ROWS FROM ("
	"  pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.text[]),"
	"  pg_catalog.unnest($3::pg_catalog.text[]), pg_catalog.unnest($4::pg_catalog.jsonb[]),"
	"  pg_catalog.unnest($5::pg_catalog.jsonb[])) WITH ORDINALITY AS u(t, a, e, p, h, n)"
	" ORDER BY u.n RETURNING id",
	.nargs = 5, .argtypes = {TEXTARRAYOID, TEXTARRAYOID, TEXTARRAYOID,
	JSONBARRAYOID, JSONBARRAYOID}
};

/*
 * Candidates: $1 now, $2 batch.  Free events, oldest first, of aggregates
 * without a leased or retry-waiting pending event.  The pending index
 * serves the order; the held index, small (only events that a relay has
 * touched and not yet published), serves the exclusion: an uncorrelated
 * subquery, hashed once, so events queued behind a held aggregate cost a
 * hash probe each.
 */
static IdemQuery find_candidates = {
	.sql = "SELECT e.id, e.aggregate_type, e.aggregate_id"
	" FROM idempotency.outbox_events e"
	" WHERE " PENDING("e") " AND " FREE("e")
	" AND NOT (ROW(e.aggregate_type, e.aggregate_id)" EQ "ANY ("
	" SELECT h.aggregate_type, h.aggregate_id FROM idempotency.outbox_events h"
	" WHERE " PENDING("h") " AND " TOUCHED("h") " AND NOT (" FREE("h") ")))"
	" ORDER BY e.id LIMIT $2",
	.nargs = 2, .argtypes = {TIMESTAMPTZOID, INT4OID}
};

/*
 * The decision, with a snapshot taken after the buckets were locked: $1
 * now, $2 candidates whose buckets this transaction holds.  The first
 * pending events of each candidate's aggregate, in id order per aggregate
 * ("last" names the aggregate): n + 1 are enough for n candidates, as the
 * walk stops at the first event that is not a free candidate.  A candidate
 * may be leased when it and every event before it in its aggregate's list
 * is a free candidate.  The LIMIT also keeps each aggregate one short,
 * ordered scan of the aggregate index.
 */
static IdemQuery read_aggregates = {
	.sql = "SELECT e.id, e.free, a.last"
	" FROM (SELECT c.aggregate_type, c.aggregate_id,"
	"  pg_catalog.max(c.id) AS last, pg_catalog.count(*) AS n"
	"  FROM idempotency.outbox_events c WHERE c.id" EQ "ANY ($2)"
	"  GROUP BY c.aggregate_type, c.aggregate_id) a,"
	" LATERAL (SELECT e.id, " FREE("e") " AS free"
	"  FROM idempotency.outbox_events e"
	"  WHERE e.aggregate_type" EQ "a.aggregate_type"
	"  AND e.aggregate_id" EQ "a.aggregate_id"
	"  AND e.id" LE "a.last AND " PENDING("e")
	"  ORDER BY e.id LIMIT a.n" PLUS "1) e"
	" ORDER BY a.last, e.id",
	.nargs = 2, .argtypes = {TIMESTAMPTZOID, INT8ARRAYOID}
};

/*
 * The lease: $1 now, $2 the events decided on, $3 lease, $4 the lease
 * token of this call.  Each row comes back whole, as the table's row type
 * (dropped columns included), for claim_events to return.  From 1.3 on it
 * also counts a takeover on an event whose previous lease ran out unmarked
 * (a free event with a lease end: mark_published and mark_failed clear it).
 */
#define LEASE_EVENTS(takeover) \
	"WITH claimed AS (" \
	" UPDATE idempotency.outbox_events e SET locked_until = $1" PLUS "$3," \
	" lease_token = $4" takeover \
	" WHERE e.id" EQ "ANY ($2) AND " PENDING("e") " AND " FREE("e") \
	" RETURNING e.id, e)" \
	" SELECT id, e FROM claimed ORDER BY id"

static IdemQuery lease_events = {
	.sql = LEASE_EVENTS(", takeovers = e.takeovers" PLUS
						"(e.locked_until IS NOT NULL)::pg_catalog.int4"),
	.nargs = 4, .argtypes = {TIMESTAMPTZOID, INT8ARRAYOID, INTERVALOID, INT8OID}
};

/* 1.7: $5 the calling role, recorded as the lease's role */
static IdemQuery lease_events_1_7 = {
	.sql = LEASE_EVENTS(", takeovers = e.takeovers" PLUS
						"(e.locked_until IS NOT NULL)::pg_catalog.int4,"
						" lease_role = $5::pg_catalog.oid"),
	.nargs = 5, .argtypes = {TIMESTAMPTZOID, INT8ARRAYOID, INTERVALOID, INT8OID,
	OIDOID}
};

/* 1.8: and its name */
static IdemQuery lease_events_1_8 = {
	.sql = LEASE_EVENTS(", takeovers = e.takeovers" PLUS
						"(e.locked_until IS NOT NULL)::pg_catalog.int4,"
						" lease_role = $5::pg_catalog.oid,"
						" lease_role_name = pg_catalog.pg_get_userbyid($5)"),
	.nargs = 5, .argtypes = {TIMESTAMPTZOID, INT8ARRAYOID, INTERVALOID, INT8OID,
	OIDOID}
};

static IdemQuery lease_events_1_1 = {
	.sql = LEASE_EVENTS(""),
	.nargs = 4, .argtypes = {TIMESTAMPTZOID, INT8ARRAYOID, INTERVALOID, INT8OID}
};

/*
 * From 1.7, before it picks candidates, a claim makes dead every pending
 * event whose lease ran out unmarked and whose failures and takeovers,
 * with the takeover it would now count, reach $2 (outbox_max_attempts):
 * $1 now.  A relay that never passes its token cannot mark a taken-over
 * event, not even failed, so without this it would be redelivered for
 * ever.  As a dead event made by mark_failed, it no
 * longer holds back the later events of its aggregate.
 */
static IdemQuery retire_taken_over = {
	.sql = "UPDATE idempotency.outbox_events e"
	" SET dead_at = $1, locked_until = NULL, next_attempt_at = NULL,"
	" takeovers = e.takeovers" PLUS "1,"
	" last_error = pg_catalog.format('lease taken over %s times without a mark',"
	"  e.takeovers" PLUS "1)"
	" WHERE " PENDING("e") " AND e.locked_until" LE "$1"
	" AND (e.next_attempt_at IS NULL OR e.next_attempt_at" LE "$1)"
	" AND e.attempts" PLUS "e.takeovers" PLUS "1" GE "$2",
	.nargs = 2, .argtypes = {TIMESTAMPTZOID, INT4OID}
};

/* $1 ids: the aggregates of the pending events among them */
static IdemQuery find_aggregates = {
	.sql = "SELECT e.aggregate_type, e.aggregate_id"
	" FROM idempotency.outbox_events e"
	" WHERE e.id" EQ "ANY ($1) AND " PENDING("e"),
	.nargs = 1, .argtypes = {INT8ARRAYOID}
};

/*
 * The events of a mark_published or mark_failed call that the calling
 * relay may still mark: $1 ids (each row once, however often its id is
 * given), $3 the lease token.  With a token, the events leased under it;
 * without, the events whose lease no relay has taken over (see "Leases"
 * above).  A database not yet updated to 1.3 has no takeovers column: a
 * mark without a token is not checked there.
 */
#define MARKABLE \
	" WHERE e.id" EQ "ANY ($1) AND " PENDING("e") \
	" AND ($3 IS NULL AND e.takeovers" EQ "0 OR e.lease_token" EQ "$3)"
/* 1.7: and not leased by another role, $n the calling role */
#define LEASE_ROLE_ALLOWS(n) " AND (e.lease_role IS NULL" \
	" OR e.lease_role::pg_catalog.oid" EQ "$" #n \
	" OR pg_catalog.pg_has_role($" #n ", e.lease_role::pg_catalog.oid, 'MEMBER'))"
/* 1.8: and not leased by a role of another name, $n.. as for IDEM_BINDING_ALLOWS */
#define LEASE_NAME_ALLOWS(n, name, priv) " AND " \
	IDEM_BINDING_ALLOWS("e.lease_role", "e.lease_role_name", n, name, priv)
#define MARKABLE_1_1 \
	" WHERE e.id" EQ "ANY ($1) AND " PENDING("e") \
	" AND ($3 IS NULL OR e.lease_token" EQ "$3)"

/*
 * $1 ids: the pending events among them whose lease was taken over, which
 * a mark without a token leaves alone (see warn_taken_over()).
 */
static IdemQuery taken_over_events = {
	.sql = "SELECT e.id FROM idempotency.outbox_events e"
	" WHERE e.id" EQ "ANY ($1) AND " PENDING("e")
	" AND e.takeovers OPERATOR(pg_catalog.>) 0 ORDER BY e.id",
	.nargs = 1, .argtypes = {INT8ARRAYOID}
};

/* $1 ids, $2 now, $3 lease token */
#define PUBLISH_EVENTS \
	"UPDATE idempotency.outbox_events e" \
	" SET published_at = $2, locked_until = NULL"

static IdemQuery publish_events = {
	.sql = PUBLISH_EVENTS MARKABLE,
	.nargs = 3, .argtypes = {INT8ARRAYOID, TIMESTAMPTZOID, INT8OID}
};

static IdemQuery publish_events_1_7 = {
	.sql = PUBLISH_EVENTS MARKABLE LEASE_ROLE_ALLOWS(4),
	.nargs = 4, .argtypes = {INT8ARRAYOID, TIMESTAMPTZOID, INT8OID, OIDOID}
};

static IdemQuery publish_events_1_8 = {
	.sql = PUBLISH_EVENTS MARKABLE LEASE_NAME_ALLOWS(4, 5, 6),
	.nargs = 6, .argtypes = {INT8ARRAYOID, TIMESTAMPTZOID, INT8OID, OIDOID,
	NAMEOID, BOOLOID}
};

static IdemQuery publish_events_1_1 = {
	.sql = PUBLISH_EVENTS MARKABLE_1_1,
	.nargs = 3, .argtypes = {INT8ARRAYOID, TIMESTAMPTZOID, INT8OID}
};

/*
 * $1 ids, $2 now, $3 lease token, $4 error, $5 max attempts, $6 first
 * backoff in seconds.  The n-th failure waits backoff * 2^(n-1), at most
 * an hour; failure number max attempts makes the event dead.
 */
#define FAIL_EVENTS \
	"UPDATE idempotency.outbox_events e" \
	" SET attempts = e.attempts" PLUS "1, last_error = $4, locked_until = NULL," \
	" next_attempt_at = CASE WHEN e.attempts" PLUS "1" GE "$5 THEN NULL" \
	"  ELSE $2" PLUS "pg_catalog.make_interval(secs => LEAST(" \
	"  $6" TIMES "pg_catalog.power(2::pg_catalog.float8," \
	"  LEAST(e.attempts, 30)::pg_catalog.float8), " \
	CppAsString2(OUTBOX_MAX_BACKOFF_SECS) "::pg_catalog.float8)) END," \
	" dead_at = CASE WHEN e.attempts" PLUS "1" GE "$5 THEN $2 END"

static IdemQuery fail_events = {
	.sql = FAIL_EVENTS MARKABLE,
	.nargs = 6, .argtypes = {INT8ARRAYOID, TIMESTAMPTZOID, INT8OID, TEXTOID,
	INT4OID, FLOAT8OID}
};

static IdemQuery fail_events_1_7 = {
	.sql = FAIL_EVENTS MARKABLE LEASE_ROLE_ALLOWS(7),
	.nargs = 7, .argtypes = {INT8ARRAYOID, TIMESTAMPTZOID, INT8OID, TEXTOID,
	INT4OID, FLOAT8OID, OIDOID}
};

static IdemQuery fail_events_1_8 = {
	.sql = FAIL_EVENTS MARKABLE LEASE_NAME_ALLOWS(7, 8, 9),
	.nargs = 9, .argtypes = {INT8ARRAYOID, TIMESTAMPTZOID, INT8OID, TEXTOID,
	INT4OID, FLOAT8OID, OIDOID, NAMEOID, BOOLOID}
};

/*
 * $1 ids, $2 the calling role: a pending event among them that another
 * role leased (1.7), which the marks refuse; 1.8, $3 its name and $4
 * whether it is privileged: one leased by a role of another name, and the
 * name.
 */
static IdemQuery other_role_event = {
	.sql = "SELECT e.id FROM idempotency.outbox_events e"
	" WHERE e.id" EQ "ANY ($1) AND " PENDING("e")
	" AND e.lease_role IS NOT NULL"
	" AND e.lease_role::pg_catalog.oid OPERATOR(pg_catalog.<>) $2"
	" AND NOT pg_catalog.pg_has_role($2, e.lease_role::pg_catalog.oid, 'MEMBER')"
	" ORDER BY e.id LIMIT 1",
	.nargs = 2, .argtypes = {INT8ARRAYOID, OIDOID}
};

static IdemQuery other_role_event_1_8 = {
	.sql = "SELECT e.id, e.lease_role_name FROM idempotency.outbox_events e"
	" WHERE e.id" EQ "ANY ($1) AND " PENDING("e")
	" AND NOT " IDEM_BINDING_ALLOWS("e.lease_role", "e.lease_role_name", 2, 3, 4)
	" ORDER BY e.id LIMIT 1",
	.nargs = 4, .argtypes = {INT8ARRAYOID, OIDOID, NAMEOID, BOOLOID}
};

static IdemQuery fail_events_1_1 = {
	.sql = FAIL_EVENTS MARKABLE_1_1,
	.nargs = 6, .argtypes = {INT8ARRAYOID, TIMESTAMPTZOID, INT8OID, TEXTOID,
	INT4OID, FLOAT8OID}
};

/* SQL-callable functions */
PG_FUNCTION_INFO_V1(idempotency_enqueue_event);
PG_FUNCTION_INFO_V1(idempotency_enqueue_events);
PG_FUNCTION_INFO_V1(idempotency_emit_event);
PG_FUNCTION_INFO_V1(idempotency_claim_events);
PG_FUNCTION_INFO_V1(idempotency_claim_events_1_3);
PG_FUNCTION_INFO_V1(idempotency_claim_events_1_7);
PG_FUNCTION_INFO_V1(idempotency_claim_events_1_8);
PG_FUNCTION_INFO_V1(idempotency_mark_published);
PG_FUNCTION_INFO_V1(idempotency_mark_published_1_1);
PG_FUNCTION_INFO_V1(idempotency_mark_published_1_3);
PG_FUNCTION_INFO_V1(idempotency_mark_published_1_7);
PG_FUNCTION_INFO_V1(idempotency_mark_published_1_8);
PG_FUNCTION_INFO_V1(idempotency_mark_failed);
PG_FUNCTION_INFO_V1(idempotency_mark_failed_1_1);
PG_FUNCTION_INFO_V1(idempotency_mark_failed_1_3);
PG_FUNCTION_INFO_V1(idempotency_mark_failed_1_7);
PG_FUNCTION_INFO_V1(idempotency_mark_failed_1_8);
PG_FUNCTION_INFO_V1(idempotency_outbox_quiet_commits);

/*
 * The lock bucket of an aggregate.
 */
static uint32
aggregate_bucket(text *aggregate_type, text *aggregate_id)
{
	return (uint32) (idem_hash_pair(aggregate_type, aggregate_id) %
					 OUTBOX_LOCK_BUCKETS);
}

/*
 * The tag of the outbox lock "objid" (a bucket, OUTBOX_LOCK_ALL or a quiet
 * commit's slot) of this database.
 */
static void
outbox_lock_tag(LOCKTAG *tag, uint32 objid)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, OUTBOX_LOCK_CLASS, objid,
						 OUTBOX_LOCK_SPACE);
}

/*
 * Take the outbox lock "objid" until the end of the transaction.  With
 * dont_wait, LOCKACQUIRE_NOT_AVAIL when another transaction holds it in a
 * conflicting mode; LOCKACQUIRE_OK for a new lock, else one this
 * transaction held already.
 */
static LockAcquireResult
lock_outbox(uint32 objid, LOCKMODE mode, bool dont_wait)
{
	LOCKTAG		tag;

	outbox_lock_tag(&tag, objid);
	return LockAcquire(&tag, mode, false, dont_wait);
}

/*
 * Buckets this transaction has locked for writing so far, and whether the
 * transaction callback is registered.  The count is reset when the top
 * transaction ends; a rolled-back subtransaction releases its locks but
 * not its count, which only makes OUTBOX_LOCK_ALL come sooner.
 */
static int	xact_bucket_locks = 0;
static bool outbox_callback_registered = false;

static void outbox_xact_callback(XactEvent event, void *arg);

/*
 * Register outbox_xact_callback() once per backend.
 */
static void
register_outbox_callback(void)
{
	if (!outbox_callback_registered)
	{
		RegisterXactCallback(outbox_xact_callback, NULL);
		outbox_callback_registered = true;
	}
}

/*
 * Before this transaction writes events, or retry waits, of the aggregates
 * whose buckets are in "buckets": hold each of them in share mode until
 * the transaction ends, or OUTBOX_LOCK_ALL once the transaction would hold
 * more than OUTBOX_XACT_BUCKETS buckets (see the locking rules above).
 */
static void
lock_buckets_for_write(Bitmapset *buckets)
{
	int			bucket = -1;

	register_outbox_callback();
	if (xact_bucket_locks + bms_num_members(buckets) > OUTBOX_XACT_BUCKETS)
	{
		/* after the first time, only a local count goes up */
		(void) lock_outbox(OUTBOX_LOCK_ALL, ShareLock, false);
		return;
	}
	while ((bucket = bms_next_member(buckets, bucket)) >= 0)
	{
		CHECK_FOR_INTERRUPTS();
		if (lock_outbox((uint32) bucket, ShareLock, false) == LOCKACQUIRE_OK)
			xact_bucket_locks++;
	}
}

/*
 * The bucket of the aggregate in columns "typecol" and "idcol" of row
 * "row" of the last SPI result.
 */
static uint32
row_bucket(uint64 row, int typecol, int idcol)
{
	HeapTuple	tuple = SPI_tuptable->vals[row];
	TupleDesc	desc = SPI_tuptable->tupdesc;
	bool		isnull;
	text	   *aggregate_type;
	text	   *aggregate_id;

	aggregate_type = DatumGetTextPP(SPI_getbinval(tuple, desc, typecol, &isnull));
	aggregate_id = DatumGetTextPP(SPI_getbinval(tuple, desc, idcol, &isnull));
	return aggregate_bucket(aggregate_type, aggregate_id);
}

/*
 * The event arguments shared by enqueue_event and emit_event: aggregate
 * type, aggregate id and event type (1 to 255 characters each) and a
 * payload.  Headers may be NULL.
 */
static void
event_args(FunctionCallInfo fcinfo, text **aggregate_type,
		   text **aggregate_id, text **event_type)
{
	*aggregate_type = idem_arg_name(fcinfo, 0, "aggregate_type", 1,
									IDEM_MAX_NAME_CHARS);
	*aggregate_id = idem_arg_name(fcinfo, 1, "aggregate_id", 1,
								  IDEM_MAX_NAME_CHARS);
	*event_type = idem_arg_name(fcinfo, 2, "event_type", 1,
								IDEM_MAX_NAME_CHARS);
	idem_require_arg(fcinfo, 3, "payload");
}

/*
 * Waking the relays.  A transaction that enqueued events notifies channel
 * idempotency_outbox when it commits (the payload: the aggregate type of
 * its first event), unless the last notification of this session became
 * visible less than idempotency.outbox_notify_interval ago.  PostgreSQL
 * commits notifying transactions one at a time, so a producer that
 * notified at every commit would lose group commit; with the interval,
 * each session notifies at most once per interval.
 *
 * A commit that skips its notification (a quiet commit) is covered by the
 * relay that the session's last notification woke: after its last empty
 * claim_events() that relay looks again twice the interval later, and
 * keeps looking every twice the interval for as long as quiet commits are
 * in flight (outbox_quiet_commits(), read before each look).  A quiet
 * commit holds the lock of its slot (OUTBOX_LOCK_QUIET + pid modulo
 * OUTBOX_QUIET_SLOTS) in share mode from before its decision until it is
 * visible (transaction locks are released after that), and decides less
 * than one interval after the visibility of that notification (read just
 * after it, in the commit callback: the relay's twice the interval leaves
 * an interval for that), so before the relay's first look again: at each
 * look the quiet commit is either
 * visible, and found, or still counted, and looked for again.  However long
 * its commit takes (a synchronous standby, a slow WAL flush), no quiet
 * commit is left behind.  The decision is made at pre-commit, so a
 * rolled-back or prepared transaction never counts as a notification, and
 * a prepared one notifies no one.
 */
static bool xact_enqueued = false;
static bool xact_notified = false;
static char xact_payload[IDEM_MAX_NAME_CHARS * MAX_MULTIBYTE_CHAR_LEN + 1];
static TimestampTz last_notify_committed = 0;

/*
 * Is the last notification of this session less than the interval old?
 */
static bool
within_notify_interval(void)
{
	return idem_outbox_notify_interval > 0 &&
		!TimestampDifferenceExceeds(last_notify_committed, GetCurrentTimestamp(),
									idem_outbox_notify_interval);
}

/*
 * At the pre-commit of a transaction that enqueued events: notify, or
 * commit quietly holding the quiet commit lock (see above).
 */
static void
notify_or_stay_quiet(void)
{
	if (within_notify_interval())
	{
		LOCKTAG		tag;

		/* counted first, then decided: never quiet and uncounted */
		outbox_lock_tag(&tag, OUTBOX_LOCK_QUIET +
						(uint32) MyProcPid % OUTBOX_QUIET_SLOTS);
		(void) LockAcquire(&tag, ShareLock, false, false);
		if (within_notify_interval())
			return;
		(void) LockRelease(&tag, ShareLock, false);
	}
	Async_Notify(OUTBOX_CHANNEL, xact_payload);
	xact_notified = true;
}

static void
outbox_xact_callback(XactEvent event, void *arg pg_attribute_unused())
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (xact_enqueued && idem_outbox_notify)
				notify_or_stay_quiet();
			break;
		case XACT_EVENT_COMMIT:
			/* the transaction is visible now */
			if (xact_notified)
				last_notify_committed = GetCurrentTimestamp();
			xact_enqueued = xact_notified = false;
			xact_bucket_locks = 0;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			xact_enqueued = xact_notified = false;
			xact_bucket_locks = 0;
			break;
		default:
			break;
	}
}

/*
 * Note that this transaction enqueued an event of "aggregate_type".
 */
static void
wake_relays_at_commit(text *aggregate_type)
{
	register_outbox_callback();
	if (!xact_enqueued)
		text_to_cstring_buffer(aggregate_type, xact_payload,
							   sizeof(xact_payload));
	xact_enqueued = true;
}

/*
 * Writing events with the executor's row functions (writes.c), as
 * insert_event and insert_events would insert them: outbox_events, open,
 * and the row inserter; the columns of the event being written.
 */
typedef struct EventWriter
{
	Relation	rel;
	IdemRowInserter *inserter;
	Datum	   *row;
	bool	   *isnull;
	bool	   *given;
	IdemStatementColumns columns;
} EventWriter;

/*
 * Start writing events, as the extension owner (the caller's current
 * user).  Returns false, having done nothing, when the table needs the
 * statements.
 */
static bool
begin_event_rows(EventWriter *writer)
{
	int			natts;
	int			col;

	writer->rel = idem_table_open("outbox_events", RowExclusiveLock);
	natts = RelationGetDescr(writer->rel)->natts;
	(void) idem_learn_columns(&event_columns, writer->rel);
	writer->row = palloc(natts * sizeof(Datum));
	writer->isnull = palloc0(natts * sizeof(bool));
	writer->given = palloc0(natts * sizeof(bool));
	for (col = 0; col < EVENT_ID; col++)
		writer->given[event_attnums[col] - 1] = true;
	/* the statements' column list, and RETURNING id */
	writer->columns.written = event_attnums;
	writer->columns.nwritten = EVENT_ID;
	writer->columns.read = &event_attnums[EVENT_ID];
	writer->columns.nread = 1;
	writer->inserter = idem_begin_inserts(writer->rel, writer->given,
										  &writer->columns);
	if (writer->inserter == NULL)
		table_close(writer->rel, NoLock);
	return writer->inserter != NULL;
}

/*
 * Write the event whose columns are "values" and "nulls" (insert_event's
 * $1 to $5) and set *id to its id, or *id_isnull when a BEFORE trigger
 * skipped it.
 */
static void
write_event_row(EventWriter *writer, const Datum *values, const bool *nulls,
				Datum *id, bool *id_isnull)
{
	int			col;

	for (col = 0; col < EVENT_ID; col++)
	{
		writer->row[event_attnums[col] - 1] = values[col];
		writer->isnull[event_attnums[col] - 1] = nulls[col];
	}
	*id_isnull = true;
	if (idem_insert_next(writer->inserter, writer->row, writer->isnull))
		*id = idem_inserted_value(writer->inserter, event_attnums[EVENT_ID],
								  id_isnull);
}

/* Fire the AFTER row triggers of the events written, as at a statement's end. */
static void
end_event_rows(EventWriter *writer)
{
	idem_end_inserts(writer->inserter);
	table_close(writer->rel, NoLock);
	pfree(writer->row);
	pfree(writer->isnull);
	pfree(writer->given);
}

/*
 * enqueue_event(aggregate_type, aggregate_id, event_type, payload, headers)
 * RETURNS bigint: the new event's id.  The row and the notification belong
 * to the caller's transaction.
 */
Datum
idempotency_enqueue_event(PG_FUNCTION_ARGS)
{
	text	   *aggregate_type;
	text	   *aggregate_id;
	text	   *event_type;
	Datum		values[5];
	char		nulls[5] = "    ";
	IdemOwnerRights owner;
	EventWriter writer;
	bool		written;
	bool		isnull;
	Datum		id;

	event_args(fcinfo, &aggregate_type, &aggregate_id, &event_type);
	PreventCommandIfReadOnly("idempotency.enqueue_event()");
	values[0] = PointerGetDatum(aggregate_type);
	values[1] = PointerGetDatum(aggregate_id);
	values[2] = PointerGetDatum(event_type);
	values[3] = PG_GETARG_DATUM(3);
	values[4] = PG_ARGISNULL(4) ? (Datum) 0 : PG_GETARG_DATUM(4);
	if (PG_ARGISNULL(4))
		nulls[4] = 'n';

	/* Before the id is drawn: see the locking rules above. */
	lock_buckets_for_write(bms_make_singleton((int) aggregate_bucket(aggregate_type,
																	 aggregate_id)));

	idem_become_owner(&owner);
	written = begin_event_rows(&writer);
	if (written)
	{
		bool		given_nulls[5] = {false, false, false, false, PG_ARGISNULL(4)};

		write_event_row(&writer, values, given_nulls, &id, &isnull);
		end_event_rows(&writer);
	}
	idem_restore_user(&owner);
	if (!written)
		(void) idem_run_as_owner(&insert_event, values, nulls, false, &id,
								 &isnull);
	wake_relays_at_commit(aggregate_type);
	/* no id: a BEFORE trigger skipped the row (RETURNING gave no row) */
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(id);
}

/*
 * Append a jsonb value as JSON text, or null.
 */
static void
append_jsonb(StringInfo buf, Jsonb *value)
{
	if (value == NULL)
		appendStringInfoString(buf, "null");
	else
		(void) JsonbToCString(buf, &value->root, VARSIZE(value));
}

/*
 * Run "query" as the extension owner and return the first column of the
 * rows it returns, in its order, as the rows of the calling set-returning
 * function.
 */
static Datum
return_first_column(FunctionCallInfo fcinfo, IdemQuery *query,
					Datum *values, const char *nulls)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	IdemOwnerRights owner;
	uint64		nrows;
	uint64		row;

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	idem_become_owner(&owner);
	SPI_connect();
	nrows = idem_run(query, values, nulls, false, 0);
	for (row = 0; row < nrows; row++)
	{
		bool		isnull;
		Datum		value = idem_get_row_column(row, 1, &isnull);

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value,
							 &isnull);
	}
	SPI_finish();
	idem_restore_user(&owner);
	return (Datum) 0;
}

/*
 * enqueue_events(aggregate_types, aggregate_ids, event_types, payloads,
 * headers) RETURNS SETOF bigint: many events in one statement, each as
 * enqueue_event would write it, in the order of the arrays (one element
 * per event in each; headers may be NULL, or hold NULLs).  Returns their
 * ids in that order.
 */
Datum
idempotency_enqueue_events(PG_FUNCTION_ARGS)
{
	Datum	   *types;
	Datum	   *ids;
	Datum	   *event_types;
	Datum	   *payloads;
	Datum	   *headers = NULL;
	bool	   *header_nulls = NULL;
	Datum		values[5];
	char		nulls[5] = "    ";
	Bitmapset  *buckets = NULL;
	IdemOwnerRights owner;
	EventWriter writer;
	int			n;
	int			i;

	n = idem_arg_name_array(fcinfo, 0, "aggregate_types", 1,
							IDEM_MAX_NAME_CHARS, -1, &types);
	(void) idem_arg_name_array(fcinfo, 1, "aggregate_ids", 1,
							   IDEM_MAX_NAME_CHARS, n, &ids);
	(void) idem_arg_name_array(fcinfo, 2, "event_types", 1,
							   IDEM_MAX_NAME_CHARS, n, &event_types);
	(void) idem_arg_array(fcinfo, 3, "payloads", JSONBOID, n, &payloads, NULL);
	if (PG_ARGISNULL(4))
		nulls[4] = 'n';
	else
		(void) idem_arg_array(fcinfo, 4, "headers", JSONBOID, n, &headers,
							  &header_nulls);
	PreventCommandIfReadOnly("idempotency.enqueue_events()");

	/*
	 * Before the ids are drawn: see the locking rules above.  Each bucket
	 * once, however many events of the batch hash to it.
	 */
	for (i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		buckets = bms_add_member(buckets,
								 (int) aggregate_bucket(DatumGetTextPP(types[i]),
														DatumGetTextPP(ids[i])));
	}
	lock_buckets_for_write(buckets);

	idem_become_owner(&owner);
	if (begin_event_rows(&writer))
	{
		ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

		InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
		for (i = 0; i < n; i++)
		{
			Datum		event[5] = {types[i], ids[i], event_types[i], payloads[i],
			nulls[4] == 'n' ? (Datum) 0 : headers[i]};
			bool		event_nulls[5] = {false, false, false, false,
			nulls[4] == 'n' || header_nulls[i]};
			Datum		id;
			bool		isnull;

			CHECK_FOR_INTERRUPTS();
			write_event_row(&writer, event, event_nulls, &id, &isnull);
			if (!isnull)
				tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &id,
									 &isnull);
		}
		end_event_rows(&writer);
		idem_restore_user(&owner);
	}
	else
	{
		idem_restore_user(&owner);
		for (i = 0; i < 5; i++)
			values[i] = PG_ARGISNULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
		(void) return_first_column(fcinfo, &insert_events, values, nulls);
	}

	if (n > 0)
		wake_relays_at_commit(DatumGetTextPP(types[0]));
	return (Datum) 0;
}

/*
 * emit_event(aggregate_type, aggregate_id, event_type, payload, headers)
 * RETURNS pg_lsn: a transactional logical decoding message with prefix
 * 'idempotency_outbox'; decoders see it only if the transaction commits.
 */
Datum
idempotency_emit_event(PG_FUNCTION_ARGS)
{
	text	   *aggregate_type;
	text	   *aggregate_id;
	text	   *event_type;
	StringInfoData buf;
	XLogRecPtr	lsn;

	event_args(fcinfo, &aggregate_type, &aggregate_id, &event_type);
	/* the message is WAL: a read-only transaction may not write it */
	PreventCommandIfReadOnly("idempotency.emit_event()");

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"aggregate_type\": ");
	escape_json(&buf, text_to_cstring(aggregate_type));
	appendStringInfoString(&buf, ", \"aggregate_id\": ");
	escape_json(&buf, text_to_cstring(aggregate_id));
	appendStringInfoString(&buf, ", \"event_type\": ");
	escape_json(&buf, text_to_cstring(event_type));
	appendStringInfoString(&buf, ", \"payload\": ");
	append_jsonb(&buf, PG_GETARG_JSONB_P(3));
	appendStringInfoString(&buf, ", \"headers\": ");
	append_jsonb(&buf, PG_ARGISNULL(4) ? NULL : PG_GETARG_JSONB_P(4));
	appendStringInfoChar(&buf, '}');

	lsn = idem_log_logical_message(OUTBOX_CHANNEL, buf.data, buf.len, true);
	pfree(buf.data);
	PG_RETURN_LSN(lsn);
}

/*
 * An int8[] of the first n ids.
 */
static Datum
id_array(const int64 *ids, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * (n + 1));
	int			i;

	for (i = 0; i < n; i++)
		elems[i] = Int64GetDatum(ids[i]);
	return PointerGetDatum(construct_array(elems, n, INT8OID, sizeof(int64),
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * Is id among the n ascending ids?
 */
static bool
id_in(int64 id, const int64 *ids, int n)
{
	int			low = 0;
	int			high = n - 1;

	while (low <= high)
	{
		int			mid = low + (high - low) / 2;

		if (ids[mid] == id)
			return true;
		if (ids[mid] < id)
			low = mid + 1;
		else
			high = mid - 1;
	}
	return false;
}

/*
 * Step 1: candidates, oldest first; keep those whose bucket this
 * transaction could lock.  Returns how many, ascending in ids[].
 */
static int
lock_candidates(Datum now, int32 batch, int64 **ids)
{
	char		bucket_state[OUTBOX_LOCK_BUCKETS] = {0};	/* 0 untried, 1 held,
															 * 2 busy */
	Datum		values[2];
	uint64		ncandidates;
	uint64		row;
	int			n = 0;

	values[0] = now;
	values[1] = Int32GetDatum(batch);
	ncandidates = idem_run(&find_candidates, values, NULL, false, 0);
	*ids = palloc(sizeof(int64) * (ncandidates + 1));
	for (row = 0; row < ncandidates; row++)
	{
		uint32		bucket = row_bucket(row, 2, 3);
		bool		isnull;

		CHECK_FOR_INTERRUPTS();
		if (bucket_state[bucket] == 0)
			bucket_state[bucket] =
				lock_outbox(bucket, ExclusiveLock, true) != LOCKACQUIRE_NOT_AVAIL ? 1 : 2;
		if (bucket_state[bucket] == 1)
			(*ids)[n++] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[row],
													  SPI_tuptable->tupdesc,
													  1, &isnull));
	}
	return n;
}

/*
 * Step 2, with a new snapshot: of the n locked candidates, keep in chosen[]
 * those preceded in their aggregate only by free locked candidates.
 * Returns how many.
 */
static int
choose_events(Datum now, const int64 *ids, int n, int64 *chosen)
{
	Datum		values[2];
	uint64		nrows;
	uint64		row;
	int64		aggregate = 0;
	bool		blocked = false;
	int			nchosen = 0;

	values[0] = now;
	values[1] = id_array(ids, n);
	nrows = idem_run(&read_aggregates, values, NULL, false, 0);
	for (row = 0; row < nrows; row++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[row];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		int64		id = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
		bool		is_free = DatumGetBool(SPI_getbinval(tuple, desc, 2, &isnull));
		int64		last = DatumGetInt64(SPI_getbinval(tuple, desc, 3, &isnull));

		CHECK_FOR_INTERRUPTS();
		if (row == 0 || last != aggregate)
		{
			aggregate = last;
			blocked = false;
		}
		if (!blocked && is_free && id_in(id, ids, n))
			chosen[nchosen++] = id;
		else
			blocked = true;
	}
	return nchosen;
}

/*
 * claim_events(batch int, lease interval) RETURNS SETOF outbox_events: up
 * to batch free events, oldest first, leased to the caller for lease from
 * the call's clock reading.  Every event of one call carries the same new
 * lease_token.  "lease_query" is the lease of the database's version; the
 * one of 1.7 records the calling role (its $5).
 */
static Datum
claim_events(FunctionCallInfo fcinfo, IdemQuery *lease_query, bool retire)
{
	Oid			caller = GetUserId();
	int32		batch = idem_arg_positive_int(fcinfo, 0, "batch");
	Interval   *lease = idem_arg_interval(fcinfo, 1, "lease", NULL);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		now = TimestampTzGetDatum(GetCurrentTimestamp());
	int64	   *ids;
	int64	   *chosen = NULL;
	int			nids;
	IdemOwnerRights owner;

	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("claim_events requires the READ COMMITTED isolation level"),
				 errdetail("It needs a new snapshot after it has locked the aggregates it hands out."),
				 errhint("Call claim_events in its own READ COMMITTED transaction.")));

	InitMaterializedSRF(fcinfo, 0);

	PreventCommandIfReadOnly("idempotency.claim_events()");

	/* a writer holding every bucket: nothing can be handed out safely */
	if (lock_outbox(OUTBOX_LOCK_ALL, RowExclusiveLock, true) == LOCKACQUIRE_NOT_AVAIL)
		return (Datum) 0;

	idem_become_owner(&owner);
	SPI_connect();
	if (retire)
	{
		Datum		retire_values[2];

		retire_values[0] = now;
		retire_values[1] = Int32GetDatum(idem_outbox_max_attempts);
		(void) idem_run(&retire_taken_over, retire_values, NULL, false, 0);
	}
	nids = lock_candidates(now, batch, &ids);
	if (nids > 0)
	{
		chosen = palloc(sizeof(int64) * nids);
		nids = choose_events(now, ids, nids, chosen);
	}
	if (nids > 0)
	{
		int64		token = nextval_internal(idem_relation_oid("outbox_lease_seq"),
											 false);
		Datum		values[5];
		uint64		nclaimed;
		uint64		row;

		values[0] = now;
		values[1] = id_array(chosen, nids);
		values[2] = IntervalPGetDatum(lease);
		values[3] = Int64GetDatum(token);
		values[4] = ObjectIdGetDatum(caller);
		nclaimed = idem_run(lease_query, values, NULL, false, 0);
		for (row = 0; row < nclaimed; row++)
		{
			bool		isnull;
			HeapTupleHeader event = DatumGetHeapTupleHeader(idem_get_row_column(row, 2, &isnull));
			HeapTupleData tuple;

			CHECK_FOR_INTERRUPTS();
			/* the whole row, in the table's row type, as the result wants */
			tuple.t_len = HeapTupleHeaderGetDatumLength(event);
			ItemPointerSetInvalid(&tuple.t_self);
			tuple.t_tableOid = InvalidOid;
			tuple.t_data = event;
			tuplestore_puttuple(rsinfo->setResult, &tuple);
		}
	}
	SPI_finish();
	idem_restore_user(&owner);
	return (Datum) 0;
}

/*
 * Refuse (22023) a claim_events call beyond the bounds that superusers set,
 * idempotency.outbox_max_batch and idempotency.outbox_max_lease, before it
 * writes anything: without them one relay could lease every pending event
 * for a century, and the others would get nothing.
 */
static void
check_claim_bounds(int32 batch, Interval *lease)
{
	if (batch > idem_outbox_max_batch)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch exceeds idempotency.outbox_max_batch"),
				 errdetail("The batch given is %d; idempotency.outbox_max_batch is %d.",
						   batch, idem_outbox_max_batch),
				 errhint("Claim smaller batches; only a superuser may raise the setting.")));
	if (DatumGetBool(DirectFunctionCall2(interval_gt, IntervalPGetDatum(lease),
										 IntervalPGetDatum(&idem_outbox_max_lease))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease exceeds idempotency.outbox_max_lease"),
				 errdetail("The lease given is %s; idempotency.outbox_max_lease is %s.",
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(lease))),
						   DatumGetCString(DirectFunctionCall1(interval_out,
															   IntervalPGetDatum(&idem_outbox_max_lease)))),
				 errhint("Claim with a shorter lease; only a superuser may raise the setting.")));
}

/*
 * claim_events of 1.8: within the bounds above, and recording the lease's
 * role by name too.  The arguments are read here in claim_events()'s
 * order, so a bad argument raises its own error first.
 */
Datum
idempotency_claim_events_1_8(PG_FUNCTION_ARGS)
{
	int32		batch = idem_arg_positive_int(fcinfo, 0, "batch");
	Interval   *lease = idem_arg_interval(fcinfo, 1, "lease", NULL);

	check_claim_bounds(batch, lease);
	return claim_events(fcinfo, &lease_events_1_8, true);
}

/*
 * claim_events of 1.7, which records the lease's role and makes dead the
 * events whose takeovers and failures reach outbox_max_attempts, and of
 * 1.3, which counts takeovers.
 */
Datum
idempotency_claim_events_1_7(PG_FUNCTION_ARGS)
{
	return claim_events(fcinfo, &lease_events_1_7, true);
}

Datum
idempotency_claim_events_1_3(PG_FUNCTION_ARGS)
{
	return claim_events(fcinfo, &lease_events, false);
}

/*
 * claim_events of 1.0 to 1.2.  A table of events of 1.0 has no lease_token
 * (nor outbox_lease_seq): the database is refused, as the key calls refuse
 * it, until it is updated.
 */
Datum
idempotency_claim_events(PG_FUNCTION_ARGS)
{
	idem_require_column("outbox_events", "lease_token");
	return claim_events(fcinfo, &lease_events_1_1, false);
}

/*
 * The ids argument of mark_published and mark_failed, as a Datum.
 */
static Datum
ids_arg(FunctionCallInfo fcinfo)
{
	idem_require_arg(fcinfo, 0, "ids");
	return PG_GETARG_DATUM(0);
}

/*
 * The optional lease_token argument of mark_published and mark_failed
 * (argument "argno"; the 1.0 signatures lack it), as a query argument.
 */
static void
lease_token_arg(FunctionCallInfo fcinfo, int argno, Datum *value, char *null)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
	{
		*value = (Datum) 0;
		*null = 'n';
	}
	else
		*value = PG_GETARG_DATUM(argno);
}

/* How many elements an ids argument has (NULLs included). */
static int
id_count(Datum ids)
{
	ArrayType  *array = DatumGetArrayTypeP(ids);

	return ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array));
}

/*
 * After a mark without a lease token of 1.3 or later changed fewer events
 * than it was given: warn, with the fix, when some of them were left alone
 * because their lease was taken over.  A relay that never passes its token
 * would otherwise redeliver such an event for ever without a word: its
 * marks change nothing and return 0.
 */
static void
warn_taken_over(Datum ids, const char *call)
{
	uint64		count;

	count = idem_run_as_owner(&taken_over_events, &ids, NULL, true,
							  NULL, NULL);
	if (count > 0)
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("%s without lease_token left alone " UINT64_FORMAT " event(s) whose lease was taken over",
						call, count),
				 errdetail("They were leased again after a lease of them ran out unmarked; a mark without a token cannot tell the relay that leased an event first from the one that took it over."),
				 errhint("Pass the lease_token that claim_events() returned with the event.")));
}

/*
 * After a mark of 1.7 or 1.8 ("holders") by role "caller" changed
 * "updated" events: when the ids "ids" name more, refuse the call (42501)
 * if one of them is a pending event that another role leased; the error
 * rolls back what the mark changed.  The caller is connected to SPI and
 * runs as the owner.
 */
static void
refuse_other_lease(Datum ids, uint64 updated, Oid caller, IdemHolders holders)
{
	ArrayType  *array = DatumGetArrayTypeP(ids);
	Datum		values[4];
	bool		isnull;
	int64		event;
	Datum		lease_name;
	char	   *name;

	if (updated >= (uint64) ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array)))
		return;
	values[0] = ids;
	values[1] = ObjectIdGetDatum(caller);
	if (holders != IDEM_HOLDERS_BY_NAME)
	{
		if (idem_run(&other_role_event, values, NULL, false, 0) == 0)
			return;
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to mark outbox event " INT64_FORMAT,
						DatumGetInt64(idem_get_column(1, &isnull))),
				 errdetail("Another role leased the event (claim_events); only that role and its members may mark it."),
				 errhint("Mark events as the role that claimed them.")));
	}
	values[2] = idem_role_name(caller);
	values[3] = BoolGetDatum(idem_role_privileged(caller));
	if (idem_run(&other_role_event_1_8, values, NULL, false, 0) == 0)
		return;
	event = DatumGetInt64(idem_get_column(1, &isnull));
	lease_name = idem_get_column(2, &isnull);
	name = isnull ? NULL : pstrdup(NameStr(*DatumGetName(lease_name)));
	if (name == NULL || !idem_role_exists(name))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to mark outbox event " INT64_FORMAT, event),
				 name == NULL ?
				 errdetail("The role that leased the event (claim_events) is not recorded by name.") :
				 errdetail("Role \"%s\", which leased the event (claim_events), does not exist.", name),
				 errhint("Only the extension's owner or a superuser may mark the event; once its lease runs out, claim_events hands it out again.")));
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to mark outbox event " INT64_FORMAT, event),
			 errdetail("Role \"%s\" leased the event (claim_events); only that role and its members may mark it.",
					   name),
			 errhint("Mark events as role \"%s\"; the extension's owner or a superuser may also mark them.",
					 name)));
}

/*
 * mark_published(ids bigint[], lease_token bigint) RETURNS int: how many
 * pending events were marked published, at the call's clock reading.  An
 * event whose lease another relay holds, or has held, is left alone and
 * not counted: with lease_token, every event not leased under it; without,
 * every event whose lease was taken over (see "Leases" above).  "query" is
 * the statement of the database's version; with "holders" (1.7, 1.8), an
 * event that another role leased refuses the call (see "Lease roles").
 */
static Datum
mark_published(FunctionCallInfo fcinfo, IdemQuery *query, IdemHolders holders)
{
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	Oid			caller = GetUserId();
	IdemOwnerRights owner;
	uint64		updated;

	PreventCommandIfReadOnly("idempotency.mark_published()");
	values[0] = ids_arg(fcinfo);
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	lease_token_arg(fcinfo, 1, &values[2], &nulls[2]);
	values[3] = ObjectIdGetDatum(caller);
	if (holders == IDEM_HOLDERS_BY_NAME)
	{
		values[4] = idem_role_name(caller);
		values[5] = BoolGetDatum(idem_role_privileged(caller));
	}
	if (holders == IDEM_HOLDERS_NONE)
		updated = idem_run_as_owner(query, values, nulls, false, NULL, NULL);
	else
	{
		idem_become_owner(&owner);
		SPI_connect();
		updated = idem_run(query, values, nulls, false, 0);
		refuse_other_lease(values[0], updated, caller, holders);
		SPI_finish();
		idem_restore_user(&owner);
	}
	if ((query == &publish_events || query == &publish_events_1_7 ||
		 query == &publish_events_1_8) &&
		nulls[2] == 'n' && updated < (uint64) id_count(values[0]))
		warn_taken_over(values[0], "idempotency.mark_published()");
	PG_RETURN_INT32((int32) updated);
}

/*
 * mark_published of 1.3, of 1.1 and 1.2, and of 1.0 (without lease_token,
 * whose table of events has none: refused as claim_events of 1.0 is).
 */
Datum
idempotency_mark_published_1_8(PG_FUNCTION_ARGS)
{
	return mark_published(fcinfo, &publish_events_1_8, IDEM_HOLDERS_BY_NAME);
}

Datum
idempotency_mark_published_1_7(PG_FUNCTION_ARGS)
{
	return mark_published(fcinfo, &publish_events_1_7, IDEM_HOLDERS_BY_OID);
}

Datum
idempotency_mark_published_1_3(PG_FUNCTION_ARGS)
{
	return mark_published(fcinfo, &publish_events, IDEM_HOLDERS_NONE);
}

/*
 * A database at 1.1 or 1.2 has no takeovers column, and this library keeps
 * no per-session lease map (1.1's and 1.2's libraries did): a mark without
 * a lease token could change an event another relay has taken over, so it
 * is refused with the fix instead.  A mark with a token
 * is checked as before.
 */
static void
require_token_before_1_3(FunctionCallInfo fcinfo, int argno, const char *call)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s without lease_token is refused before idempotency 1.3", call),
				 errdetail("This library cannot tell the calling relay apart from one that took the lease over."),
				 errhint("Pass the lease_token that claim_events() returned, or run ALTER EXTENSION idempotency UPDATE.")));
}

Datum
idempotency_mark_published_1_1(PG_FUNCTION_ARGS)
{
	require_token_before_1_3(fcinfo, 1, "idempotency.mark_published()");
	return mark_published(fcinfo, &publish_events_1_1, IDEM_HOLDERS_NONE);
}

Datum
idempotency_mark_published(PG_FUNCTION_ARGS)
{
	idem_require_column("outbox_events", "lease_token");
	return mark_published(fcinfo, &publish_events_1_1, IDEM_HOLDERS_NONE);
}

/*
 * Seconds of an interval, with months of 30 days and days of 24 hours.
 */
static double
interval_seconds(const Interval *span)
{
	return (double) span->time / USECS_PER_SEC +
		((double) span->month * DAYS_PER_MONTH + span->day) * SECS_PER_DAY;
}

/*
 * mark_failed(ids bigint[], error text, lease_token bigint) RETURNS int:
 * puts pending events back after a backoff from the call's clock reading,
 * or makes them dead; returns how many it changed.  Leases (and, with
 * "holders", their roles) are checked as by mark_published.
 */
static Datum
mark_failed(FunctionCallInfo fcinfo, IdemQuery *query, IdemHolders holders)
{
	Datum		values[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	Oid			caller = GetUserId();
	Bitmapset  *buckets = NULL;
	uint64		naggregates;
	uint64		row;
	int			updated;
	IdemOwnerRights owner;

	PreventCommandIfReadOnly("idempotency.mark_failed()");
	values[0] = ids_arg(fcinfo);
	idem_require_arg(fcinfo, 1, "error");
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	lease_token_arg(fcinfo, 2, &values[2], &nulls[2]);
	values[3] = PG_GETARG_DATUM(1);
	values[4] = Int32GetDatum(idem_outbox_max_attempts);
	values[5] = Float8GetDatum(interval_seconds(&idem_outbox_retry_backoff));
	values[6] = ObjectIdGetDatum(caller);
	if (holders == IDEM_HOLDERS_BY_NAME)
	{
		values[7] = idem_role_name(caller);
		values[8] = BoolGetDatum(idem_role_privileged(caller));
	}

	idem_become_owner(&owner);
	SPI_connect();

	/* A retry wait blocks the aggregate: no claim may run on it meanwhile. */
	naggregates = idem_run(&find_aggregates, values, NULL, false, 0);
	for (row = 0; row < naggregates; row++)
	{
		CHECK_FOR_INTERRUPTS();
		buckets = bms_add_member(buckets, (int) row_bucket(row, 1, 2));
	}
	lock_buckets_for_write(buckets);

	updated = idem_run(query, values, nulls, false, 0);
	if (holders != IDEM_HOLDERS_NONE)
		refuse_other_lease(values[0], (uint64) updated, caller, holders);
	SPI_finish();
	idem_restore_user(&owner);
	if ((query == &fail_events || query == &fail_events_1_7 ||
		 query == &fail_events_1_8) &&
		nulls[2] == 'n' && updated < id_count(values[0]))
		warn_taken_over(values[0], "idempotency.mark_failed()");
	PG_RETURN_INT32(updated);
}

/*
 * mark_failed of 1.3, of 1.1 and 1.2, and of 1.0 (refused as
 * mark_published of 1.0 is).
 */
Datum
idempotency_mark_failed_1_8(PG_FUNCTION_ARGS)
{
	return mark_failed(fcinfo, &fail_events_1_8, IDEM_HOLDERS_BY_NAME);
}

Datum
idempotency_mark_failed_1_7(PG_FUNCTION_ARGS)
{
	return mark_failed(fcinfo, &fail_events_1_7, IDEM_HOLDERS_BY_OID);
}

Datum
idempotency_mark_failed_1_3(PG_FUNCTION_ARGS)
{
	return mark_failed(fcinfo, &fail_events, IDEM_HOLDERS_NONE);
}

Datum
idempotency_mark_failed_1_1(PG_FUNCTION_ARGS)
{
	require_token_before_1_3(fcinfo, 2, "idempotency.mark_failed()");
	return mark_failed(fcinfo, &fail_events_1_1, IDEM_HOLDERS_NONE);
}

Datum
idempotency_mark_failed(PG_FUNCTION_ARGS)
{
	idem_require_column("outbox_events", "lease_token");
	return mark_failed(fcinfo, &fail_events_1_1, IDEM_HOLDERS_NONE);
}

/*
 * outbox_quiet_commits() RETURNS integer: the transactions of this
 * database that enqueued events, skipped their notification and are not
 * visible yet (they hold a quiet commit lock; see "Waking the relays").
 */
Datum
idempotency_outbox_quiet_commits(PG_FUNCTION_ARGS)
{
	int32		count = 0;
	uint32		slot;

	for (slot = 0; slot < OUTBOX_QUIET_SLOTS; slot++)
	{
		LOCKTAG		tag;
		int			holders;

		outbox_lock_tag(&tag, OUTBOX_LOCK_QUIET + slot);
		(void) GetLockConflicts(&tag, ExclusiveLock, &holders);
		count += holders;
	}
	PG_RETURN_INT32(count);
}
