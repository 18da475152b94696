/*-------------------------------------------------------------------------
 *
 * keys.h
 *	  Request keys: claims, their answers and the completion of a held key
 *	  (keys.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_KEYS_H
#define IDEM_KEYS_H

#include "fmgr.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "roles.h"

/*
 * The answer of a claim: the columns of idempotency.claim_result, in order.
 */
typedef enum ClaimResultColumn
{
	CLAIM_OUTCOME,
	CLAIM_FENCE,
	CLAIM_STATUS,
	CLAIM_RESPONSE_CODE,
	CLAIM_RESPONSE_BODY,
	CLAIM_RECOVERY_POINT,
	CLAIM_ATTEMPTS,
	CLAIM_RETRY_AFTER,
	CLAIM_RESULT_NATTS
} ClaimResultColumn;

typedef struct IdemClaim
{
	const char *outcome;		/* claimed, resumed, replay, gone,
								 * in_progress, mismatch */
	Datum		values[CLAIM_RESULT_NATTS];
	bool		nulls[CLAIM_RESULT_NATTS];
	bytea	   *request_hash;	/* fingerprint of the request, or NULL */
	TimestampTz now;			/* the claim's clock reading */
	Oid			holder;			/* set by the caller: the role recorded as
								 * holder_role of a key the claim takes
								 * (1.7), or InvalidOid: none */
	IdemHolders holders;		/* set by the caller: how it is recorded */
} IdemClaim;

/* idem_claim_key()'s flags */
#define IDEM_CLAIM_CREATE_LATER 0x01	/* execute(): see keys.c */
#define IDEM_CLAIM_ANSWERS_EXPIRE 0x02	/* the SQL of 1.6: gone */

/* The caller is connected to SPI and runs as the owner. */
extern void idem_claim_key(text *key, text *scope, Jsonb *request,
						   Interval *ttl, Interval *lease, int flags,
						   IdemClaim *claim);
extern void idem_claim_key_waiting(text *key, text *scope, Jsonb *request,
								   Interval *ttl, Interval *lease, int flags,
								   Interval *wait, IdemClaim *claim);
extern void idem_finish_key(text *key, text *scope, int64 fence,
							bool completed, Datum body, bool body_isnull,
							int32 response_code, bool retryable,
							Interval *ttl, Interval *response_ttl,
							Oid caller, IdemHolders holders);
extern void idem_claim_completed(IdemClaim *claim, Jsonb *body);
extern void idem_insert_completed_key(text *key, text *scope, Interval *ttl,
									  Interval *response_ttl, Jsonb *body,
									  IdemClaim *claim);
extern bool idem_claim_runs_work(const IdemClaim *claim);
extern Datum idem_claim_datum(FunctionCallInfo fcinfo, IdemClaim *claim);
extern Jsonb *idem_arg_response(FunctionCallInfo fcinfo, int argno,
								const char *argname);
extern int32 idem_arg_response_code(FunctionCallInfo fcinfo, int argno);
extern Interval *idem_arg_answer_interval(FunctionCallInfo fcinfo, int argno,
										  const char *argname, bool final,
										  Interval *default_value);

#endif							/* IDEM_KEYS_H */
