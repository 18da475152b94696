/*-------------------------------------------------------------------------
 *
 * idempotency.h
 *	  What every C file of the idempotency extension shares: the settings
 *	  (defined in idempotency.c) and the bounds of names.  Each module's
 *	  API is in a header of its own, named after it (keys.h for keys.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_IDEMPOTENCY_H
#define IDEM_IDEMPOTENCY_H

#include "fmgr.h"
#include "utils/timestamp.h"

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

#endif							/* IDEM_IDEMPOTENCY_H */
