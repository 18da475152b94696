/*-------------------------------------------------------------------------
 *
 * metrics.c
 *	  Outcome counts per scope (claimed, replay, mismatch, in_progress,
 *	  resumed, gone, lease_lost, purged), kept in shared memory and read
 *	  by idempotency.metrics(); metrics_reset() sets them back to zero.
 *
 * The counts need the library in shared_preload_libraries: its hooks
 * (idempotency.c) then ask for the shared memory and set it up.  Otherwise
 * every count is a no-op and the SQL functions raise 55000; so is every
 * count of a session with idempotency.track_outcomes off.  Counting writes
 * nothing to any table or to the WAL, so it works in read-only
 * transactions and on hot standbys (each server counts its own calls); the
 * counts live until the server stops, or until a crash restart, which
 * sets up the shared memory again: counting then starts from zero, and
 * the time it did is kept (started_at) as the reset_at of the rows of
 * scope NULL that have not counted yet.
 *
 * A call is counted when it decides its outcome, before its transaction
 * ends: a claim whose transaction then rolls back is still counted.
 *
 * Shared state: a hash table of at most idempotency.metrics_max_scopes
 * rows, one per (database, scope), and a second one of a row per
 * database, shown with scope NULL, for what is counted in no scope's row:
 * the calls of scopes that found the first table full, and the keys that
 * purge deleted (a purge deletes the keys of every scope at once; to learn
 * their scopes its DELETE would need a RETURNING clause, which a DO
 * INSTEAD rule on the table, which users may add, makes fail).  The
 * second table has room for as many databases as the first has scopes,
 * and at least 64; the counts of the databases beyond are lost.
 * metrics_reset() zeroes rows and removes none.
 *
 * Quota per role.  The rows are the cluster's, so one role that
 * counts calls in ever new scopes (any scope when unrestricted, any
 * scope under a prefix of grant_scopes) could take them all until the
 * next restart, and every later scope's calls would go to the row of
 * scope NULL.  Each row therefore records the role that added it (the
 * session's role, SET ROLE or the session user: a SECURITY DEFINER
 * function does not change it, and the counting calls run partly as the
 * extension owner), and a third table counts the rows of each role: a
 * role that added idempotency.metrics_max_scopes_per_role rows has its
 * further scopes counted in its database's row of scope NULL, as when the
 * table is full.  The third table has as many entries as the first, as
 * each role in it has a row there.
 *
 * The rows of a dropped database are removed: at the commit of its DROP
 * DATABASE (an object access hook notes the database, a transaction
 * callback removes its rows), and, for the drops this server did not run
 * (a hot standby replays them from the WAL, where no hook runs), by every
 * read of metrics(), which removes the rows of the databases missing from
 * pg_database.  Only these rows are ever removed, and no backend of their
 * database is left: DROP DATABASE refuses while one is connected (its
 * replay on a standby ends them first); none can connect while the drop
 * holds the database's lock, which it holds until after the commit
 * callbacks; and metrics() reads pg_database with a snapshot taken under
 * the exclusive lock, after the creation of any database whose backend
 * found a row.  So a pointer to a row's counters stays valid for as long
 * as a backend of its database can use it.  A backend's cache also keeps
 * the scopes that found the table full, pointing to the row of scope
 * NULL; each removal moves a generation on, and such an entry of an older
 * generation is looked up again, to find the room made since.
 *
 * Locking: the counters are atomics, added to without a lock.  One
 * LWLock, taken in shared mode to find a row and to read the rows, and in
 * exclusive mode to add a row or to reset; reset_at is only written under
 * the exclusive lock.  Each backend keeps the rows of the scopes it
 * counted last in a small cache of its own, and its database's row of
 * scope NULL, so a call in a scope seen recently takes no lock: one hash
 * of the scope, one comparison and one atomic add.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_database.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "idempotency.h"
#include "arguments.h"
#include "metrics.h"
#include "scopes.h"

/* Longest scope in bytes, with its terminating zero. */
#define SCOPE_BYTES (IDEM_MAX_NAME_CHARS * MAX_MULTIBYTE_CHAR_LEN + 1)

/* Size of each backend's cache of rows; a power of two. */
#define LOCAL_CACHE_SIZE 16

/* Rows of scope NULL: one per database, for this many databases at least. */
#define MIN_DATABASES 64

#define METRICS_NAME "idempotency metrics"

/* The outcomes in the order of metrics()'s columns; see IdemOutcome. */
static const char *const outcome_names[IDEM_NOUTCOMES] = {
	"claimed", "replay", "mismatch", "in_progress", "resumed", "gone",
	"lease_lost", "purged"
};

typedef struct MetricsKey
{
	Oid			dbid;
	char		scope[SCOPE_BYTES];
} MetricsKey;

typedef struct MetricsCounts
{
	pg_atomic_uint64 counts[IDEM_NOUTCOMES];
	TimestampTz reset_at;		/* under the exclusive lock */
} MetricsCounts;

typedef struct MetricsEntry
{
	MetricsKey	key;
	Oid			role;			/* the role that added the row */
	MetricsCounts counts;
} MetricsEntry;

/* How many rows of the scopes' table a role added. */
typedef struct RoleEntry
{
	Oid			role;
	int			nrows;
} RoleEntry;

/* A database's row of scope NULL. */
typedef struct OtherEntry
{
	Oid			dbid;
	MetricsCounts counts;
} OtherEntry;

typedef struct MetricsShared
{
	LWLock	   *lock;
	TimestampTz started_at;		/* when this shared memory was set up */
	pg_atomic_uint32 generation;	/* moves on when rows are removed */
} MetricsShared;

/* A scope this backend counted lately, and its row's counters. */
typedef struct LocalEntry
{
	uint32		hash;
	int			len;
	char	   *scope;			/* in TopMemoryContext; NULL: slot unused */
	MetricsCounts *counts;
	bool		in_other;		/* counts: the row of scope NULL */
	uint32		generation;		/* metrics->generation before the lookup */
	int			quota;			/* metrics_max_scopes_per_role then */
} LocalEntry;

static MetricsShared *metrics = NULL;
static HTAB *metrics_table = NULL;	/* (database, scope) -> MetricsEntry */
static HTAB *other_table = NULL;	/* database -> OtherEntry */
static HTAB *role_table = NULL; /* role -> RoleEntry */
static LocalEntry local_cache[LOCAL_CACHE_SIZE];
static MetricsCounts *my_other_counts = NULL;	/* this database's */
static Oid	dropped_database = InvalidOid;	/* its rows go at commit */
static bool xact_callback_registered = false;
static object_access_hook_type prev_object_access_hook = NULL;


/* SQL-callable functions */
PG_FUNCTION_INFO_V1(idempotency_metrics);
PG_FUNCTION_INFO_V1(idempotency_metrics_reset);

/*
 * The table's hash and equality: the scope up to its end, not the whole
 * key, whose buffer is much longer than most scopes.
 */
static uint32
scope_hash(Oid dbid, const char *scope, int len)
{
	return hash_bytes((const unsigned char *) scope, len) ^
		murmurhash32((uint32) dbid);
}

static uint32
metrics_key_hash(const void *key, Size keysize pg_attribute_unused())
{
	const MetricsKey *k = (const MetricsKey *) key;

	return scope_hash(k->dbid, k->scope, (int) strlen(k->scope));
}

static int
metrics_key_match(const void *key1, const void *key2,
				  Size keysize pg_attribute_unused())
{
	const MetricsKey *k1 = (const MetricsKey *) key1;
	const MetricsKey *k2 = (const MetricsKey *) key2;

	if (k1->dbid != k2->dbid)
		return 1;
	return strcmp(k1->scope, k2->scope);
}

/* Sizes of the two tables */
#define SCOPE_ROWS Max(idem_metrics_max_scopes, 1)
#define OTHER_ROWS Max(idem_metrics_max_scopes, MIN_DATABASES)

static Size
metrics_shmem_size(void)
{
	return add_size(add_size(add_size(MAXALIGN(sizeof(MetricsShared)),
									  hash_estimate_size(SCOPE_ROWS, sizeof(MetricsEntry))),
							 hash_estimate_size(OTHER_ROWS, sizeof(OtherEntry))),
					hash_estimate_size(SCOPE_ROWS, sizeof(RoleEntry)));
}

/*
 * Set the counts to zero and reset_at to "now"; "first": the counts are
 * new, not yet initialized.
 */
static void
zero_counts(MetricsCounts *counts, TimestampTz now, bool first)
{
	int			i;

	for (i = 0; i < IDEM_NOUTCOMES; i++)
		if (first)
			pg_atomic_init_u64(&counts->counts[i], 0);
		else
			pg_atomic_write_u64(&counts->counts[i], 0);
	counts->reset_at = now;
}

/*
 * Reserve the shared memory and the lock (idempotency.c's
 * shmem_request_hook).
 */
void
idem_metrics_shmem_request(void)
{
	RequestAddinShmemSpace(metrics_shmem_size());
	RequestNamedLWLockTranche(METRICS_NAME, 1);
}

/*
 * Create the shared state, or attach to it (idempotency.c's
 * shmem_startup_hook, under AddinShmemInitLock).
 */
void
idem_metrics_shmem_init(void)
{
	HASHCTL		ctl;
	bool		found;

	metrics = ShmemInitStruct(METRICS_NAME, sizeof(MetricsShared), &found);
	if (!found)
	{
		/* at server start, and again at each crash restart */
		metrics->lock = &(GetNamedLWLockTranche(METRICS_NAME))->lock;
		metrics->started_at = GetCurrentTimestamp();
		pg_atomic_init_u32(&metrics->generation, 0);
	}
	ctl.keysize = sizeof(MetricsKey);
	ctl.entrysize = sizeof(MetricsEntry);
	ctl.hash = metrics_key_hash;
	ctl.match = metrics_key_match;
	metrics_table = ShmemInitHash(METRICS_NAME " of scopes",
								  SCOPE_ROWS, SCOPE_ROWS, &ctl,
								  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE |
								  HASH_FIXED_SIZE);
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(OtherEntry);
	other_table = ShmemInitHash(METRICS_NAME " of databases",
								OTHER_ROWS, OTHER_ROWS, &ctl,
								HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(RoleEntry);
	role_table = ShmemInitHash(METRICS_NAME " of roles",
							   SCOPE_ROWS, SCOPE_ROWS, &ctl,
							   HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
}

/*
 * Count "delta" rows added (1) or removed (-1) by "role"; a role's entry
 * goes with its last row.  The caller holds the lock exclusively.
 * Returns false, counting nothing, when there is no room for a new
 * entry.  Raises no error: it runs in a commit callback too.
 */
static bool
count_role_rows(Oid role, int delta)
{
	RoleEntry  *entry;
	bool		found;

	entry = hash_search(role_table, &role,
						delta > 0 ? HASH_ENTER_NULL : HASH_FIND, &found);
	if (entry == NULL)
		return false;
	if (!found)
		entry->nrows = 0;
	entry->nrows += delta;
	if (entry->nrows <= 0)
		hash_search(role_table, &role, HASH_REMOVE, NULL);
	return true;
}

/*
 * Whether "role" may add a row: it added fewer than
 * idempotency.metrics_max_scopes_per_role.  The caller holds the lock.
 */
static bool
role_has_room(Oid role)
{
	RoleEntry  *entry = hash_search(role_table, &role, HASH_FIND, NULL);

	return (entry == NULL ? 0 : entry->nrows) < idem_metrics_max_scopes_per_role;
}

/*
 * The row of scope NULL of this database, found or added; NULL when
 * there is no room for it.  With "create" false, a missing row is not
 * added.  The caller holds the lock, exclusively to add.
 */
static OtherEntry *
other_entry(bool create)
{
	OtherEntry *entry;
	bool		found;

	entry = hash_search(other_table, &MyDatabaseId,
						create ? HASH_ENTER_NULL : HASH_FIND, &found);
	if (entry != NULL && !found)
		zero_counts(&entry->counts, GetCurrentTimestamp(), true);
	return entry;
}

/*
 * The counters of this database's row of scope NULL; NULL when there is
 * no room for it (the counts are lost).
 */
static MetricsCounts *
other_counts(void)
{
	OtherEntry *entry;

	if (my_other_counts != NULL)
		return my_other_counts;
	LWLockAcquire(metrics->lock, LW_SHARED);
	entry = other_entry(false);
	LWLockRelease(metrics->lock);
	if (entry == NULL)
	{
		LWLockAcquire(metrics->lock, LW_EXCLUSIVE);
		entry = other_entry(true);
		LWLockRelease(metrics->lock);
	}
	if (entry != NULL)
		my_other_counts = &entry->counts;
	return my_other_counts;
}

/*
 * The counters of "scope" ("len" bytes, hashed to "hash") in this
 * database: its row, added when the table has room and the session's role
 * has not taken its share of it, else the row of scope NULL ("in_other"
 * set; its counters are NULL when it has no room either).
 */
static MetricsCounts *
shared_counts(const char *scope, int len, uint32 hash, bool *in_other)
{
	MetricsKey	key;
	MetricsEntry *entry;
	bool		found;
	Oid			role = GetOuterUserId();

	*in_other = true;
	if (len >= SCOPE_BYTES)		/* longer than a scope can be */
		return other_counts();
	memset(&key, 0, sizeof(key));
	key.dbid = MyDatabaseId;
	memcpy(key.scope, scope, len);

	LWLockAcquire(metrics->lock, LW_SHARED);
	entry = hash_search_with_hash_value(metrics_table, &key, hash,
										HASH_FIND, NULL);
	LWLockRelease(metrics->lock);
	if (entry != NULL)
	{
		*in_other = false;
		return &entry->counts;
	}

	LWLockAcquire(metrics->lock, LW_EXCLUSIVE);
	/* another backend may have added it meanwhile */
	entry = hash_search_with_hash_value(metrics_table, &key, hash,
										HASH_FIND, NULL);
	if (entry == NULL &&
		hash_get_num_entries(metrics_table) < idem_metrics_max_scopes &&
		role_has_room(role) && count_role_rows(role, 1))
	{
		entry = hash_search_with_hash_value(metrics_table, &key, hash,
											HASH_ENTER_NULL, &found);
		if (entry == NULL)
			(void) count_role_rows(role, -1);
		else
		{
			entry->role = role;
			zero_counts(&entry->counts, GetCurrentTimestamp(), true);
		}
	}
	LWLockRelease(metrics->lock);
	if (entry == NULL)
		return other_counts();
	*in_other = false;
	return &entry->counts;
}

/*
 * The counters of "scope" in this database, from the backend's cache
 * when it holds them.  Only the rows of dropped databases are removed, so
 * a cached pointer to a row of this one stays good; a scope counted in
 * the row of scope NULL for lack of room is looked up again once rows
 * have been removed since, or metrics_max_scopes_per_role has changed.
 */
static MetricsCounts *
scope_counts(const char *scope, int len)
{
	uint32		hash = scope_hash(MyDatabaseId, scope, len);
	LocalEntry *slot = &local_cache[hash & (LOCAL_CACHE_SIZE - 1)];

	if (slot->scope != NULL && slot->hash == hash && slot->len == len &&
		memcmp(slot->scope, scope, len) == 0 &&
		(!slot->in_other ||
		 (slot->generation == pg_atomic_read_u32(&metrics->generation) &&
		  slot->quota == idem_metrics_max_scopes_per_role)))
		return slot->counts;

	if (slot->scope != NULL)
		pfree(slot->scope);
	slot->scope = NULL;
	/* read before the lookup: a removal after it makes the next one look */
	slot->generation = pg_atomic_read_u32(&metrics->generation);
	slot->quota = idem_metrics_max_scopes_per_role;
	slot->counts = shared_counts(scope, len, hash, &slot->in_other);
	slot->scope = MemoryContextAlloc(TopMemoryContext, Max(len, 1));
	memcpy(slot->scope, scope, len);
	slot->hash = hash;
	slot->len = len;
	return slot->counts;
}

/*
 * Count "n" calls (or keys) of "outcome" in "scope", or with "scope" NULL
 * in the row of scope NULL.  A no-op unless the library was preloaded and
 * idempotency.track_outcomes is on.
 */
void
idem_metrics_count(text *scope, IdemOutcome outcome, int64 n)
{
	MetricsCounts *counts;

	if (metrics == NULL || !idem_track_outcomes || n == 0)
		return;
	if (scope == NULL)
		counts = other_counts();
	else
		counts = scope_counts(VARDATA_ANY(scope), VARSIZE_ANY_EXHDR(scope));
	if (counts != NULL)
		pg_atomic_fetch_add_u64(&counts->counts[outcome], n);
}

/*
 * Count a claim (or execute()) by its outcome, as claim_result names it.
 */
void
idem_metrics_count_claim(text *scope, const char *outcome)
{
	int			i;

	if (metrics == NULL || !idem_track_outcomes || outcome == NULL)
		return;
	for (i = 0; i < IDEM_OUTCOME_LEASE_LOST; i++)
		if (strcmp(outcome, outcome_names[i]) == 0)
		{
			idem_metrics_count(scope, (IdemOutcome) i, 1);
			return;
		}
}

/*
 * Whether the rows of "dbid" go: it is the database "dropped" or, with
 * "dropped" invalid, it is not among the "nlive" sorted OIDs "live".
 */
typedef struct GoneDatabases
{
	Oid			dropped;
	Oid		   *live;
	int			nlive;
} GoneDatabases;

static int
oid_order(const void *a, const void *b)
{
	Oid			x = *(const Oid *) a;
	Oid			y = *(const Oid *) b;

	return x < y ? -1 : x > y ? 1 : 0;
}

static bool
database_gone(const GoneDatabases *gone, Oid dbid)
{
	if (OidIsValid(gone->dropped))
		return dbid == gone->dropped;
	return bsearch(&dbid, gone->live, gone->nlive, sizeof(Oid),
				   oid_order) == NULL;
}

/*
 * Remove the rows of the databases that "gone" names, from both tables,
 * and move the generation on when any went, so that the backends' cached
 * scopes without room look again.  The caller holds the lock exclusively.
 * Raises no error: it runs in a commit callback too.
 */
static void
remove_rows(const GoneDatabases *gone)
{
	HASH_SEQ_STATUS status;
	MetricsEntry *entry;
	OtherEntry *other;
	bool		removed = false;

	hash_seq_init(&status, metrics_table);
	while ((entry = hash_seq_search(&status)) != NULL)
		if (database_gone(gone, entry->key.dbid))
		{
			(void) count_role_rows(entry->role, -1);
			hash_search(metrics_table, &entry->key, HASH_REMOVE, NULL);
			removed = true;
		}
	hash_seq_init(&status, other_table);
	while ((other = hash_seq_search(&status)) != NULL)
		if (database_gone(gone, other->dbid))
		{
			hash_search(other_table, &other->dbid, HASH_REMOVE, NULL);
			removed = true;
		}
	if (removed)
		pg_atomic_fetch_add_u32(&metrics->generation, 1);
}

/*
 * Transaction callback, registered once a DROP DATABASE ran in this
 * backend: at its commit, remove the dropped database's rows.  No backend
 * of it is left, and none can connect until this transaction releases the
 * database's lock, after its commit callbacks.
 */
static void
metrics_xact_callback(XactEvent event, void *arg pg_attribute_unused())
{
	if (!OidIsValid(dropped_database))
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
			{
				GoneDatabases gone = {dropped_database, NULL, 0};

				LWLockAcquire(metrics->lock, LW_EXCLUSIVE);
				remove_rows(&gone);
				LWLockRelease(metrics->lock);
			}
			/* FALLTHROUGH */
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			dropped_database = InvalidOid;
			break;
		default:
			break;
	}
}

/*
 * object_access_hook: note the database a DROP DATABASE drops (the hook
 * runs before the drop's own checks, which may still refuse it, so its
 * rows go at commit).
 */
static void
metrics_object_access(ObjectAccessType access, Oid classId, Oid objectId,
					  int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
	if (access != OAT_DROP || classId != DatabaseRelationId || metrics == NULL)
		return;
	if (!xact_callback_registered)
	{
		RegisterXactCallback(metrics_xact_callback, NULL);
		xact_callback_registered = true;
	}
	dropped_database = objectId;
}

/*
 * Install the object access hook (idempotency.c, at preload).
 */
void
idem_metrics_install_hooks(void)
{
	prev_object_access_hook = object_access_hook;
	object_access_hook = metrics_object_access;
}

/*
 * Remove the rows of the databases missing from pg_database: those whose
 * drop this server did not run (a hot standby replays drops from the WAL,
 * where no hook runs).  pg_database is read with a snapshot taken under
 * the exclusive lock: every backend that found or added a row before had
 * its database's row committed before, so the snapshot sees it.
 */
static void
remove_rows_of_dropped_databases(void)
{
	Relation	rel;
	SysScanDesc scan;
	HeapTuple	tuple;
	GoneDatabases gone = {InvalidOid, NULL, 0};
	int			room = 16;

	/* its lock first, so as not to wait for it holding ours */
	rel = table_open(DatabaseRelationId, AccessShareLock);
	gone.live = palloc(sizeof(Oid) * room);
	LWLockAcquire(metrics->lock, LW_EXCLUSIVE);
	InvalidateCatalogSnapshot();
	scan = systable_beginscan(rel, InvalidOid, false, NULL, 0, NULL);
	while (HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		if (gone.nlive == room)
		{
			room *= 2;
			gone.live = repalloc(gone.live, sizeof(Oid) * room);
		}
		gone.live[gone.nlive++] = ((Form_pg_database) GETSTRUCT(tuple))->oid;
	}
	systable_endscan(scan);
	qsort(gone.live, gone.nlive, sizeof(Oid), oid_order);
	remove_rows(&gone);
	LWLockRelease(metrics->lock);
	table_close(rel, AccessShareLock);
	pfree(gone.live);
}

/*
 * Raise 55000 unless the library was preloaded.
 */
static void
require_metrics(void)
{
	if (metrics == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("idempotency metrics are not enabled"),
				 errdetail("The counts live in shared memory, which the idempotency library sets up only when the server loads it at start."),
				 errhint("Add idempotency to shared_preload_libraries and restart the server.")));
}

/* One row of metrics(), copied out of shared memory. */
typedef struct MetricsRow
{
	char	   *scope;			/* NULL: the row of scope NULL */
	uint64		counts[IDEM_NOUTCOMES];
	TimestampTz reset_at;
} MetricsRow;

static void
copy_counts(MetricsRow *row, MetricsCounts *counts)
{
	int			i;

	for (i = 0; i < IDEM_NOUTCOMES; i++)
		row->counts[i] = pg_atomic_read_u64(&counts->counts[i]);
	row->reset_at = counts->reset_at;
}

static int
row_order(const void *a, const void *b)
{
	const MetricsRow *x = (const MetricsRow *) a;
	const MetricsRow *y = (const MetricsRow *) b;

	return strcmp(x->scope, y->scope);
}

/*
 * metrics() RETURNS TABLE (scope, claimed, replay, mismatch, in_progress,
 * resumed, gone, lease_lost, purged, reset_at): a row per scope of this
 * database in byte order, then its row of scope NULL.  First it removes
 * the rows of the databases dropped.
 */
Datum
idempotency_metrics(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS status;
	MetricsEntry *entry;
	OtherEntry *other;
	MetricsRow *rows;
	int			nrows = 0;
	int			i;

	require_metrics();
	InitMaterializedSRF(fcinfo, 0);
	remove_rows_of_dropped_databases();

	LWLockAcquire(metrics->lock, LW_SHARED);
	rows = palloc(sizeof(MetricsRow) *
				  (hash_get_num_entries(metrics_table) + 1));
	hash_seq_init(&status, metrics_table);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid != MyDatabaseId)
			continue;
		rows[nrows].scope = pstrdup(entry->key.scope);
		copy_counts(&rows[nrows], &entry->counts);
		nrows++;
	}
	/*
	 * the row of scope NULL; before it counts anything, zeros since the
	 * counting started (the server's start, or its last crash restart)
	 */
	other = other_entry(false);
	if (other != NULL)
		copy_counts(&rows[nrows], &other->counts);
	else
	{
		memset(rows[nrows].counts, 0, sizeof(rows[nrows].counts));
		rows[nrows].reset_at = metrics->started_at;
	}
	rows[nrows].scope = NULL;
	LWLockRelease(metrics->lock);
	qsort(rows, nrows, sizeof(MetricsRow), row_order);

	for (i = 0; i <= nrows; i++)
	{
		Datum		values[IDEM_NOUTCOMES + 2];
		bool		nulls[IDEM_NOUTCOMES + 2] = {0};
		int			j;

		/*
		 * A role restricted to scopes sees their rows only, not the row of
		 * scope NULL, which counts for every scope.
		 */
		if (!idem_scope_allowed(rows[i].scope,
								rows[i].scope ? (int) strlen(rows[i].scope) : 0))
			continue;

		if (rows[i].scope != NULL)
			values[0] = CStringGetTextDatum(rows[i].scope);
		else
			nulls[0] = true;
		for (j = 0; j < IDEM_NOUTCOMES; j++)
			values[j + 1] = Int64GetDatum((int64) rows[i].counts[j]);
		values[IDEM_NOUTCOMES + 1] = TimestampTzGetDatum(rows[i].reset_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values,
							 nulls);
	}
	return (Datum) 0;
}

/*
 * metrics_reset(scope text DEFAULT NULL) RETURNS void: zero the counts of
 * one scope of this database, or with NULL of all its scopes and of its
 * row of scope NULL, and set their reset_at to now.  A scope without a
 * row has nothing to reset.
 */
Datum
idempotency_metrics_reset(PG_FUNCTION_ARGS)
{
	text	   *scope = PG_ARGISNULL(0) ? NULL : idem_arg_scope(fcinfo, 0);
	TimestampTz now = GetCurrentTimestamp();
	HASH_SEQ_STATUS status;
	MetricsEntry *entry;
	OtherEntry *other;

	require_metrics();
	if (scope == NULL && !idem_scope_allowed(NULL, 0))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to reset the counts of every scope"),
				 errdetail("Role \"%s\" may use only the scopes that idempotency.grant_scopes() gave it.",
						   GetUserNameFromId(GetUserId(), false)),
				 errhint("Reset the counts of one of its scopes: idempotency.metrics_reset(scope).")));
	LWLockAcquire(metrics->lock, LW_EXCLUSIVE);
	if (scope != NULL)
	{
		MetricsKey	key;
		int			len = VARSIZE_ANY_EXHDR(scope);

		memset(&key, 0, sizeof(key));
		key.dbid = MyDatabaseId;
		memcpy(key.scope, VARDATA_ANY(scope), Min(len, SCOPE_BYTES - 1));
		entry = hash_search(metrics_table, &key, HASH_FIND, NULL);
		if (entry != NULL)
			zero_counts(&entry->counts, now, false);
	}
	else
	{
		hash_seq_init(&status, metrics_table);
		while ((entry = hash_seq_search(&status)) != NULL)
			if (entry->key.dbid == MyDatabaseId)
				zero_counts(&entry->counts, now, false);
		/* added if missing, for its reset_at */
		other = other_entry(true);
		if (other != NULL)
			zero_counts(&other->counts, now, false);
	}
	LWLockRelease(metrics->lock);
	PG_RETURN_VOID();
}
