/*-------------------------------------------------------------------------
 *
 * waits.c
 *	  Waiting for the holder of a key: claim(..., wait => ...) sleeps until
 *	  a transaction that completed, failed or released a key it may be
 *	  waiting for commits, instead of polling the table.
 *
 * Shared memory holds a fixed array of wait slots; a key uses the slot its
 * key_hash falls into, so unrelated keys may share one and a waiter may be
 * woken for another key's commit: it claims again and, still answered
 * in_progress, sleeps again.  Each slot is a condition variable and a
 * generation counter.  A holder call (complete, fail, release) marks its
 * key's slot; when its transaction commits, the slots marked are advanced
 * and broadcast (a rollback changes nothing to wait for).  A waiter reads
 * the generation before it claims and sleeps only while it is unchanged,
 * so a commit between its claim and its sleep is never missed, whatever
 * else the claim slept on in between (the executor uses condition
 * variables too).
 *
 * The array lives in shared memory only when the library is preloaded
 * (shared_preload_libraries); without it idem_wait_available() is false
 * and claims given a wait refuse it (doc/reference.md, "Waiting").
 *
 * How many a commit wakes.  A commit wakes every waiter of its key's slot:
 * the waiters of its key, and those of other keys that share the slot,
 * which claim again, still answered in_progress, and sleep again.  The
 * array has WAIT_SLOTS_PER_BACKEND slots per backend the server allows
 * (MaxBackends, rounded up to a power of two, at least WAIT_SLOTS_MIN),
 * and a backend waits for one key at a time: however many keys are hot,
 * at most one slot in WAIT_SLOTS_PER_BACKEND has a waiter, so a commit
 * wakes, besides its own key's waiters, on average at most
 * 1 / WAIT_SLOTS_PER_BACKEND waiters of other keys.  Shared counters
 * (idempotency_wait_counts()) keep the commits that woke a slot, the waiters
 * woken and those woken that found their key still held.
 *
 * On a hot standby the holder's calls arrive by replay, which wakes no
 * one: a waiter there watches the replay position instead (standby.c).
 *
 * How many sleep per key.  A sleeping claim keeps its connection, and the
 * holder usually needs one from the same pool or transaction pooler to
 * finish (complete() in a later transaction); waiters that took every
 * connection would starve the holder until its lease ran out, and the
 * request would run again.  So at most idempotency.max_waiters_per_key
 * claims sleep for a key at a time: each holds one of that many waiter
 * tickets, advisory locks of the key (objsubid WAIT_TICKET_SPACE) taken
 * without waiting and given back when the sleep ends (or with the
 * transaction, on an error); a claim that finds none free answers
 * in_progress at once, with the time to retry.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "port/pg_bitutils.h"
#include "storage/condition_variable.h"
#include "storage/lock.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "idempotency.h"
#include "waits.h"

/*
 * Wait slots: a power of two, so a slot is a mask of the key's hash; at
 * least WAIT_SLOTS_MIN, and WAIT_SLOTS_PER_BACKEND per backend.
 */
#define WAIT_SLOTS_MIN 1024
#define WAIT_SLOTS_PER_BACKEND 8

typedef struct WaitSlot
{
	pg_atomic_uint64 generation;
	ConditionVariable cv;
} WaitSlot;

typedef struct WaitShared
{
	pg_atomic_uint64 commits;	/* commits that woke a slot */
	pg_atomic_uint64 woken;		/* waiters woken by a commit */
	pg_atomic_uint64 unchanged;	/* of those, found their key still held */
	WaitSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} WaitShared;

/*
 * The waiter tickets' advisory locks: objsubid 6, where pg_advisory_lock
 * uses 1 and 2, the locks for creating a key 3 and 5 and the outbox 4; the
 * low byte of objid is the ticket, so a key has at most 256.
 */
#define WAIT_TICKET_SPACE 6

int			idem_max_waiters_per_key = 1;

static WaitShared *wait_shared = NULL;
static WaitSlot *wait_slots = NULL;
static uint32 wait_slot_count = 0;

/*
 * Slots marked by this transaction's holder calls, woken at its commit: a
 * bitmap of wait_slot_count bits, and the range of its words that may
 * hold a mark.
 */
static uint64 *marked_slots = NULL;
static int	marked_lo = 0;
static int	marked_hi = -1;
static bool xact_callback_registered = false;

/* The number of wait slots: fixed once MaxBackends is. */
static uint32
wait_slots_wanted(void)
{
	uint64		want = (uint64) MaxBackends * WAIT_SLOTS_PER_BACKEND;

	if (want <= WAIT_SLOTS_MIN)
		return WAIT_SLOTS_MIN;
	/* MaxBackends is below 2^18, so this fits */
	return pg_nextpower2_32((uint32) want);
}

/*
 * The shared memory the wait slots need, requested while preloading
 * (shmem_request_hook: MaxBackends is known).
 */
Size
idem_wait_shmem_size(void)
{
	return add_size(offsetof(WaitShared, slots),
					mul_size(wait_slots_wanted(), sizeof(WaitSlot)));
}

/*
 * Attach to the wait slots, creating them in the first process that asks
 * (the postmaster's shmem_startup_hook, under AddinShmemInitLock).
 */
void
idem_wait_shmem_init(void)
{
	bool		found;

	wait_slot_count = wait_slots_wanted();
	wait_shared = ShmemInitStruct("idempotency wait slots",
								  idem_wait_shmem_size(), &found);
	wait_slots = wait_shared->slots;
	if (!found)
	{
		uint32		i;

		pg_atomic_init_u64(&wait_shared->commits, 0);
		pg_atomic_init_u64(&wait_shared->woken, 0);
		pg_atomic_init_u64(&wait_shared->unchanged, 0);
		for (i = 0; i < wait_slot_count; i++)
		{
			pg_atomic_init_u64(&wait_slots[i].generation, 0);
			ConditionVariableInit(&wait_slots[i].cv);
		}
	}
}

/*
 * True when claims can wait: the library was preloaded.
 */
bool
idem_wait_available(void)
{
	return wait_slots != NULL;
}

/* The wait slot of a key: the low bits of the first bytes of its hash. */
static uint32
slot_of(const pg_uuid_t *key_hash)
{
	uint32		h;

	memcpy(&h, key_hash->data, sizeof(h));
	return h & (wait_slot_count - 1);
}

/*
 * At commit, wake the waiters of the slots marked; at abort (or PREPARE)
 * forget them.  Only the words of the bitmap that hold a mark are read.
 */
static void
wake_marked_slots(XactEvent event, void *arg pg_attribute_unused())
{
	int			w;

	if (marked_hi < marked_lo)
		return;
	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_ABORT &&
		event != XACT_EVENT_PREPARE)
		return;
	for (w = marked_lo; w <= marked_hi &&
		 (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT); w++)
	{
		uint64		bits = marked_slots[w];

		while (bits != 0)
		{
			int			i = w * 64 + pg_rightmost_one_pos64(bits);

			bits &= bits - 1;
			pg_atomic_fetch_add_u64(&wait_slots[i].generation, 1);
			pg_atomic_fetch_add_u64(&wait_shared->commits, 1);
			ConditionVariableBroadcast(&wait_slots[i].cv);
		}
	}
	memset(&marked_slots[marked_lo], 0,
		   (marked_hi - marked_lo + 1) * sizeof(uint64));
	marked_lo = 0;
	marked_hi = -1;
}

/*
 * A holder call changed the key of "key_hash": its waiters wake when this
 * transaction commits.  Nothing without preloading.
 */
void
idem_wake_waiters_at_commit(const pg_uuid_t *key_hash)
{
	uint32		slot;
	int			w;

	if (wait_slots == NULL)
		return;
	if (!xact_callback_registered)
	{
		marked_slots = MemoryContextAllocZero(TopMemoryContext,
											  wait_slot_count / 64 * sizeof(uint64));
		RegisterXactCallback(wake_marked_slots, NULL);
		xact_callback_registered = true;
	}
	slot = slot_of(key_hash);
	w = (int) (slot / 64);
	marked_slots[w] |= UINT64CONST(1) << (slot % 64);
	if (marked_hi < marked_lo)
		marked_lo = marked_hi = w;
	else if (w < marked_lo)
		marked_lo = w;
	else if (w > marked_hi)
		marked_hi = w;
}

/*
 * The generation of the key's slot, read before a claim that may wait.
 */
uint64
idem_wait_generation(const pg_uuid_t *key_hash)
{
	return pg_atomic_read_u64(&wait_slots[slot_of(key_hash)].generation);
}

/*
 * Sleep until the key's slot moves past "seen" (a holder call of a key in
 * the slot committed) or the clock reaches "until"; false when the time ran
 * out.  Cancel and statement_timeout interrupt it as any wait.
 *
 * A latch sleep takes its timeout in milliseconds as an int (epoll_wait's),
 * and a longer one wraps around to a negative count, which sleeps for
 * ever: a wait and a lease of 30 days would sleep past both.  So no single
 * sleep is longer than WAIT_MAX_SLEEP_MS, and the loop reads the clock
 * again after each, until "until".
 */
#define WAIT_MAX_SLEEP_MS (3600 * 1000L)

bool
idem_wait_for_holder(const pg_uuid_t *key_hash, uint64 seen, TimestampTz until)
{
	WaitSlot   *slot = &wait_slots[slot_of(key_hash)];
	bool		woken = true;

	ConditionVariablePrepareToSleep(&slot->cv);
	while (pg_atomic_read_u64(&slot->generation) == seen)
	{
		TimestampTz now = GetCurrentTimestamp();
		long		left;

		if (now >= until)
		{
			woken = false;
			break;
		}
		/* whole milliseconds, rounded up, at most WAIT_MAX_SLEEP_MS */
		if (until - now >= WAIT_MAX_SLEEP_MS * INT64CONST(1000))
			left = WAIT_MAX_SLEEP_MS;
		else
			left = (long) ((until - now + 999) / 1000);
		(void) ConditionVariableTimedSleep(&slot->cv, left, PG_WAIT_EXTENSION);
	}
	ConditionVariableCancelSleep();
	if (woken)
		pg_atomic_fetch_add_u64(&wait_shared->woken, 1);
	return woken;
}

/* The lock of ticket "ticket" of the key whose hash is "key_hash". */
static void
set_ticket_tag(LOCKTAG *tag, const pg_uuid_t *key_hash, int ticket)
{
	uint32		hi;
	uint32		lo;

	memcpy(&hi, key_hash->data, sizeof(hi));
	memcpy(&lo, key_hash->data + sizeof(hi), sizeof(lo));
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, hi,
						 (lo & ~(uint32) 0xFF) | (uint32) ticket, WAIT_TICKET_SPACE);
}

/*
 * Take a free waiter ticket of the key, without waiting: its number, or -1
 * when idempotency.max_waiters_per_key claims already sleep for it (the
 * caller then answers at once).  The lock is the transaction's, so an
 * error gives it back; idem_wait_return_ticket() does so after the sleep.
 */
int
idem_wait_take_ticket(const pg_uuid_t *key_hash)
{
	int			ticket;

	for (ticket = 0; ticket < idem_max_waiters_per_key; ticket++)
	{
		LOCKTAG		tag;

		set_ticket_tag(&tag, key_hash, ticket);
		if (LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL)
			return ticket;
	}
	return -1;
}

void
idem_wait_return_ticket(const pg_uuid_t *key_hash, int ticket)
{
	LOCKTAG		tag;

	set_ticket_tag(&tag, key_hash, ticket);
	(void) LockRelease(&tag, ExclusiveLock, false);
}

/*
 * A waiter woken by a commit claimed again and was still answered
 * in_progress: the commit was another key's of its slot (or a take-over
 * by another waiter).
 */
void
idem_wait_count_unchanged(void)
{
	pg_atomic_fetch_add_u64(&wait_shared->unchanged, 1);
}

/*
 * idempotency_wait_counts(): the counts since the server started, as a row
 * (commits, woken, unchanged, slots): commits that woke a slot, waiters
 * woken, those woken that found their key still held, and the number of
 * slots; all zero without preloading.  No SQL function of the extension
 * binds it: make bench declares one in its own schema (bench/run.sh,
 * group "wait") to report wake-ups per commit.
 */
PG_FUNCTION_INFO_V1(idempotency_wait_counts);

Datum
idempotency_wait_counts(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	uint64		commits = 0,
				woken = 0,
				unchanged = 0;
	uint32		slots = 0;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (wait_shared != NULL)
	{
		commits = pg_atomic_read_u64(&wait_shared->commits);
		woken = pg_atomic_read_u64(&wait_shared->woken);
		unchanged = pg_atomic_read_u64(&wait_shared->unchanged);
		slots = wait_slot_count;
	}
	values[0] = Int64GetDatum((int64) commits);
	values[1] = Int64GetDatum((int64) woken);
	values[2] = Int64GetDatum((int64) unchanged);
	values[3] = Int32GetDatum((int32) slots);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}
