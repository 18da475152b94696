/*-------------------------------------------------------------------------
 *
 * metrics.h
 *	  The outcome counts (metrics.c); no-ops unless the library was
 *	  preloaded.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_METRICS_H
#define IDEM_METRICS_H

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

extern void idem_metrics_shmem_request(void);
extern void idem_metrics_shmem_init(void);
extern void idem_metrics_install_hooks(void);
extern void idem_metrics_count(text *scope, IdemOutcome outcome, int64 n);
extern void idem_metrics_count_claim(text *scope, const char *outcome);

#endif							/* IDEM_METRICS_H */
