/*-------------------------------------------------------------------------
 *
 * fingerprint.h
 *	  Request fingerprints and key hashes (fingerprint.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_FINGERPRINT_H
#define IDEM_FINGERPRINT_H

#include "utils/jsonb.h"
#include "utils/uuid.h"

extern bytea *idem_fingerprint(Jsonb *request);
extern void idem_sha256(const char *data, size_t len, uint8 *digest);
extern uint64 idem_hash_pair(text *a, text *b);
extern void idem_key_hash(text *scope, text *key, pg_uuid_t *hash);

#endif							/* IDEM_FINGERPRINT_H */
