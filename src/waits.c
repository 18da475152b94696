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
 * On a hot standby the holder's calls arrive by replay, which wakes no
 * one: a waiter there watches the replay position instead (standby.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "port/pg_bitutils.h"
#include "storage/condition_variable.h"
#include "storage/shmem.h"
#include "utils/wait_event.h"

#include "idempotency.h"

/* Wait slots: a power of two, so a slot is a mask of the key's hash. */
#define WAIT_SLOTS 1024

typedef struct WaitSlot
{
	pg_atomic_uint64 generation;
	ConditionVariable cv;
} WaitSlot;

static WaitSlot *wait_slots = NULL;

/* Slots marked by this transaction's holder calls, woken at its commit. */
static uint64 marked_slots[WAIT_SLOTS / 64];
static bool any_marked = false;
static bool xact_callback_registered = false;

/*
 * The shared memory the wait slots need, requested while preloading.
 */
Size
idem_wait_shmem_size(void)
{
	return mul_size(WAIT_SLOTS, sizeof(WaitSlot));
}

/*
 * Attach to the wait slots, creating them in the first process that asks
 * (the postmaster's shmem_startup_hook, under AddinShmemInitLock).
 */
void
idem_wait_shmem_init(void)
{
	bool		found;

	wait_slots = ShmemInitStruct("idempotency wait slots",
								 idem_wait_shmem_size(), &found);
	if (!found)
	{
		int			i;

		for (i = 0; i < WAIT_SLOTS; i++)
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
	return h & (WAIT_SLOTS - 1);
}

/*
 * At commit, wake the waiters of the slots marked; at abort (or PREPARE)
 * forget them.  Only the words of the bitmap that hold a mark are read.
 */
static void
wake_marked_slots(XactEvent event, void *arg pg_attribute_unused())
{
	int			w;

	if (!any_marked)
		return;
	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_ABORT &&
		event != XACT_EVENT_PREPARE)
		return;
	for (w = 0; w < WAIT_SLOTS / 64 &&
		 (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT); w++)
	{
		uint64		bits = marked_slots[w];

		while (bits != 0)
		{
			int			i = w * 64 + pg_rightmost_one_pos64(bits);

			bits &= bits - 1;
			pg_atomic_fetch_add_u64(&wait_slots[i].generation, 1);
			ConditionVariableBroadcast(&wait_slots[i].cv);
		}
	}
	memset(marked_slots, 0, sizeof(marked_slots));
	any_marked = false;
}

/*
 * A holder call changed the key of "key_hash": its waiters wake when this
 * transaction commits.  Nothing without preloading.
 */
void
idem_wake_waiters_at_commit(const pg_uuid_t *key_hash)
{
	uint32		slot;

	if (wait_slots == NULL)
		return;
	if (!xact_callback_registered)
	{
		RegisterXactCallback(wake_marked_slots, NULL);
		xact_callback_registered = true;
	}
	slot = slot_of(key_hash);
	marked_slots[slot / 64] |= UINT64CONST(1) << (slot % 64);
	any_marked = true;
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
	return woken;
}
