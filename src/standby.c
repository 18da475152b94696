/*-------------------------------------------------------------------------
 *
 * standby.c
 *	  Waiting for the holder of a key on a hot standby: claim(..., wait =>
 *	  ...) there watches the position replayed up to, since the holder's
 *	  calls reach a standby by replay, which wakes none of the condition
 *	  variables of waits.c.
 *
 * On a primary a waiter sleeps until a holder call of its key commits
 * (waits.c).  On a hot standby nothing commits: the holder works on the
 * primary, and the standby's startup process replays its transactions,
 * which runs none of this library's commit callbacks.  So a waiter there
 * reads the replay position before it claims (idem_replay_position()),
 * then naps STANDBY_NAP_MS at a time and looks at the position after each
 * nap: while it has not moved, nothing was replayed since the claim, which
 * would answer the same, and the waiter naps again without reading the
 * table; once it has moved, maybe by the holder's completion, the waiter
 * claims again.  A replayed completion is answered within one nap of its
 * replay, and a waiter on an idle standby costs a latch wake-up per nap;
 * on a standby that replays all the time it claims again once per nap,
 * one read of its key.
 *
 * The end of recovery (promotion) ends the naps too: the waiter claims
 * again, and from then on sleeps on the wait slots, which the new
 * primary's commits wake.  (Its transaction, begun in recovery, stays
 * read-only: doc/reference.md, "Waiting for the holder".)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/wait_event.h"

#include "idempotency.h"
#include "standby.h"

/* How long a waiter on a hot standby naps between looks at replay. */
#define STANDBY_NAP_MS 10

/*
 * True when waiting for a holder must watch replay: this server is a hot
 * standby (still in recovery).
 */
bool
idem_wait_watches_replay(void)
{
	return RecoveryInProgress();
}

/*
 * The position replayed up to, read before a claim that may wait on a hot
 * standby.
 */
XLogRecPtr
idem_replay_position(void)
{
	return GetXLogReplayRecPtr(NULL);
}

/*
 * Nap until replay moves past "seen" (something was replayed since the
 * claim), recovery ends, or the clock reaches "until"; false when the time
 * ran out.  Cancel and statement_timeout interrupt it as any wait, and a
 * nap is never longer than STANDBY_NAP_MS, whatever "until" is.
 */
bool
idem_wait_for_replay(XLogRecPtr seen, TimestampTz until)
{
	for (;;)
	{
		TimestampTz now;
		long		nap = STANDBY_NAP_MS;

		if (!RecoveryInProgress() || GetXLogReplayRecPtr(NULL) != seen)
			return true;
		now = GetCurrentTimestamp();
		if (now >= until)
			return false;
		/* whole milliseconds, rounded up */
		if (until - now < STANDBY_NAP_MS * INT64CONST(1000))
			nap = (long) ((until - now + 999) / 1000);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 nap, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}
