/*-------------------------------------------------------------------------
 *
 * standby.h
 *	  Waiting for the holder on a hot standby, by watching replay
 *	  (standby.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_STANDBY_H
#define IDEM_STANDBY_H

#include "access/xlogdefs.h"
#include "utils/timestamp.h"

extern bool idem_wait_watches_replay(void);
extern XLogRecPtr idem_replay_position(void);
extern bool idem_wait_for_replay(XLogRecPtr seen, TimestampTz until);

#endif							/* IDEM_STANDBY_H */
