/*-------------------------------------------------------------------------
 *
 * waits.h
 *	  Waiting for the holder of a key: claim's wait (waits.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_WAITS_H
#define IDEM_WAITS_H

#include "utils/timestamp.h"
#include "utils/uuid.h"

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

#endif							/* IDEM_WAITS_H */
