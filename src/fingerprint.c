/*-------------------------------------------------------------------------
 *
 * fingerprint.c
 *	  fingerprint(jsonb): SHA-256 of the canonical text of a request body;
 *	  key_hash(scope, key): the 16-byte hash that indexes the table of keys;
 *	  check_key_hash(): the trigger that holds idempotency_keys.key_hash to it.
 *
 * SHA-256 runs on every claim, twice: on x86-64 processors with the SHA
 * extensions it uses them (sha256_blocks_x86()), elsewhere portable C.
 *
 * jsonb already stores objects with sorted, de-duplicated keys and prints
 * them with fixed spacing, so bodies that differ only in key order or
 * whitespace print, and hash, the same.  Numbers keep their written scale:
 * 1 and 1.0 differ.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_SHA_X86 1
#endif

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "common/sha2.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/rel.h"
#include "utils/uuid.h"

#include "idempotency.h"
#include "arguments.h"
#include "fingerprint.h"
#include "relations.h"

PG_FUNCTION_INFO_V1(idempotency_fingerprint);
PG_FUNCTION_INFO_V1(idempotency_key_hash);
PG_FUNCTION_INFO_V1(idempotency_check_key_hash);

/*
 * SHA-256 (FIPS 180-4), computed here rather than through pg_cryptohash:
 * with OpenSSL 3 every pg_cryptohash_create() fetches the algorithm from a
 * provider and allocates a context, which costs several times the hash of
 * a request body of a few hundred bytes, on every claim.
 */
static const uint32 sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

/*
 * Process one 64-byte block into the hash state "h".
 */
static void
sha256_block(uint32 *h, const uint8 *block)
{
	uint32		w[64];
	uint32		a,
				b,
				c,
				d,
				e,
				f,
				g,
				k;
	int			i;

	for (i = 0; i < 16; i++)
		w[i] = ((uint32) block[4 * i] << 24) | ((uint32) block[4 * i + 1] << 16) |
			((uint32) block[4 * i + 2] << 8) | (uint32) block[4 * i + 3];
	for (i = 16; i < 64; i++)
	{
		uint32		s0 = ROTR(w[i - 15], 7) ^ ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32		s1 = ROTR(w[i - 2], 17) ^ ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10);

		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}

	a = h[0];
	b = h[1];
	c = h[2];
	d = h[3];
	e = h[4];
	f = h[5];
	g = h[6];
	k = h[7];
	for (i = 0; i < 64; i++)
	{
		uint32		t1 = k + (ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25)) +
			((e & f) ^ (~e & g)) + sha256_k[i] + w[i];
		uint32		t2 = (ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22)) +
			((a & b) ^ (a & c) ^ (b & c));

		k = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	h[0] += a;
	h[1] += b;
	h[2] += c;
	h[3] += d;
	h[4] += e;
	h[5] += f;
	h[6] += g;
	h[7] += k;
}

#ifdef HAVE_SHA_X86
/*
 * Process "nblocks" 64-byte blocks into "h" with the SHA extensions.  The
 * instructions keep the state as the pairs ABEF and CDGH and take the
 * message schedule four words at a time: sha256msg1/sha256msg2 compute
 * W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16] for t = 4g .. 4g+3,
 * sha256rnds2 runs two rounds with two words of W[t] + K[t].
 */
__attribute__((target("sha,ssse3,sse4.1")))
static void
sha256_blocks_x86(uint32 *h, const uint8 *data, size_t nblocks)
{
	const __m128i byteswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL,
											0x0405060700010203ULL);
	__m128i		abef,
				cdgh,
				tmp;

	tmp = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *) &h[0]), 0xB1);
	cdgh = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *) &h[4]), 0x1B);
	abef = _mm_alignr_epi8(tmp, cdgh, 8);
	cdgh = _mm_blend_epi16(cdgh, tmp, 0xF0);

	for (; nblocks > 0; nblocks--, data += 64)
	{
		__m128i		abef_in = abef,
					cdgh_in = cdgh,
					w[16];
		int			g;

		for (g = 0; g < 16; g++)
		{
			__m128i		wk;

			if (g < 4)
				w[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *) (data + 16 * g)),
										byteswap);
			else
				w[g] = _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(w[g - 4], w[g - 3]),
														  _mm_alignr_epi8(w[g - 1], w[g - 2], 4)),
											w[g - 1]);
			wk = _mm_add_epi32(w[g], _mm_loadu_si128((const __m128i *) &sha256_k[4 * g]));
			cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
			abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
		}
		abef = _mm_add_epi32(abef, abef_in);
		cdgh = _mm_add_epi32(cdgh, cdgh_in);
	}

	tmp = _mm_shuffle_epi32(abef, 0x1B);
	cdgh = _mm_shuffle_epi32(cdgh, 0xB1);
	_mm_storeu_si128((__m128i *) &h[0], _mm_blend_epi16(tmp, cdgh, 0xF0));
	_mm_storeu_si128((__m128i *) &h[4], _mm_alignr_epi8(cdgh, tmp, 8));
}

/*
 * Whether this processor has the SHA extensions (and SSE4.1, which the
 * code above also uses); asked once per backend.
 */
static bool
have_sha_x86(void)
{
	static int	have = -1;

	if (have < 0)
	{
		unsigned int a,
					b,
					c,
					d;

		have = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_1) &&
			(c & bit_SSSE3) &&
			__get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & bit_SHA);
	}
	return have;
}
#endif

/*
 * Process "nblocks" 64-byte blocks at "data" into the hash state "h".
 */
static void
sha256_blocks(uint32 *h, const uint8 *data, size_t nblocks)
{
#ifdef HAVE_SHA_X86
	if (have_sha_x86())
	{
		sha256_blocks_x86(h, data, nblocks);
		return;
	}
#endif
	for (; nblocks > 0; nblocks--, data += 64)
		sha256_block(h, data);
}

/*
 * SHA-256 of "len" bytes at "data", into digest[PG_SHA256_DIGEST_LENGTH].
 */
void
idem_sha256(const char *data, size_t len, uint8 *digest)
{
	uint32		h[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19
	};
	const uint8 *p = (const uint8 *) data;
	size_t		left = len;
	uint8		tail[128];
	size_t		tail_len;
	uint64		bits = (uint64) len * 8;
	int			i;

	sha256_blocks(h, p, left / 64);
	p += left - left % 64;
	left %= 64;

	/* the rest, a 1 bit, zeros, and the length in bits: one or two blocks */
	memcpy(tail, p, left);
	tail[left] = 0x80;
	tail_len = left + 9 <= 64 ? 64 : 128;
	memset(tail + left + 1, 0, tail_len - left - 1);
	for (i = 0; i < 8; i++)
		tail[tail_len - 1 - i] = (uint8) (bits >> (8 * i));
	sha256_blocks(h, tail, tail_len / 64);

	for (i = 0; i < 8; i++)
	{
		digest[4 * i] = (uint8) (h[i] >> 24);
		digest[4 * i + 1] = (uint8) (h[i] >> 16);
		digest[4 * i + 2] = (uint8) (h[i] >> 8);
		digest[4 * i + 3] = (uint8) h[i];
	}
}

/*
 * SHA-256 of the canonical text of "request", as a 32-byte bytea.
 */
bytea *
idem_fingerprint(Jsonb *request)
{
	char	   *canonical = JsonbToCString(NULL, &request->root,
										   VARSIZE(request));
	bytea	   *result = (bytea *) palloc(VARHDRSZ + PG_SHA256_DIGEST_LENGTH);

	idem_sha256(canonical, strlen(canonical), (uint8 *) VARDATA(result));
	SET_VARSIZE(result, VARHDRSZ + PG_SHA256_DIGEST_LENGTH);
	pfree(canonical);
	return result;
}

/*
 * fingerprint(request jsonb) RETURNS bytea
 */
Datum
idempotency_fingerprint(PG_FUNCTION_ARGS)
{
	idem_require_arg(fcinfo, 0, "request");
	PG_RETURN_BYTEA_P(idem_fingerprint(PG_GETARG_JSONB_P(0)));
}

/*
 * A 64-bit hash of the pair ("a", "b") for lock tags: a's hash seeds b's,
 * so ("ab", "c") and ("a", "bc") differ.
 */
uint64
idem_hash_pair(text *a, text *b)
{
	uint64		hash;

	hash = hash_bytes_extended((const unsigned char *) VARDATA_ANY(a),
							   VARSIZE_ANY_EXHDR(a), 0);
	return hash_bytes_extended((const unsigned char *) VARDATA_ANY(b),
							   VARSIZE_ANY_EXHDR(b), hash);
}

/*
 * The last input of idem_key_hash() that fitted in its buffer, and its
 * hash: a claim that creates a key hashes it, then the key_hash trigger
 * hashes the same scope and key again for the new row.
 */
#define KEY_HASH_INPUT_BYTES 1024
static char last_key_input[KEY_HASH_INPUT_BYTES];
static size_t last_key_input_len = 0;	/* 0: none yet */
static pg_uuid_t last_key_hash;

/*
 * The first 16 bytes of SHA-256(length of scope as 4 bytes, big-endian ||
 * scope || key), into "hash": the primary key of the table of keys.  The
 * length makes ("ab", "c") and ("a", "bc") differ.
 */
void
idem_key_hash(text *scope, text *key, pg_uuid_t *hash)
{
	uint32		scope_len = VARSIZE_ANY_EXHDR(scope);
	uint32		key_len = VARSIZE_ANY_EXHDR(key);
	size_t		len = 4 + (size_t) scope_len + key_len;
	char		local[KEY_HASH_INPUT_BYTES];
	char	   *buf = len <= sizeof(local) ? local : palloc(len);
	uint8		digest[PG_SHA256_DIGEST_LENGTH];

	buf[0] = (char) (scope_len >> 24);
	buf[1] = (char) (scope_len >> 16);
	buf[2] = (char) (scope_len >> 8);
	buf[3] = (char) scope_len;
	memcpy(buf + 4, VARDATA_ANY(scope), scope_len);
	memcpy(buf + 4 + scope_len, VARDATA_ANY(key), key_len);
	if (len == last_key_input_len && memcmp(buf, last_key_input, len) == 0)
	{
		*hash = last_key_hash;
		return;
	}
	idem_sha256(buf, len, digest);
	memcpy(hash->data, digest, UUID_LEN);
	if (buf != local)
		pfree(buf);
	else
	{
		memcpy(last_key_input, buf, len);
		last_key_input_len = len;
		last_key_hash = *hash;
	}
}

/*
 * key_hash(scope text, key text) RETURNS uuid
 */
Datum
idempotency_key_hash(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *hash;

	idem_require_arg(fcinfo, 0, "scope");
	idem_require_arg(fcinfo, 1, "key");
	hash = palloc(sizeof(pg_uuid_t));
	idem_key_hash(PG_GETARG_TEXT_PP(0), PG_GETARG_TEXT_PP(1), hash);
	PG_RETURN_UUID_P(hash);
}

/* The columns check_key_hash() reads, learnt once per table (relations.c). */
static const char *const hashed_column_names[] = {"scope", "idempotency_key", "key_hash"};
static const Oid hashed_column_types[lengthof(hashed_column_names)] = {TEXTOID, TEXTOID, UUIDOID};
static AttrNumber hashed_attnums[lengthof(hashed_column_names)];
static IdemColumns hashed_columns = {
	lengthof(hashed_column_names), hashed_column_names, hashed_column_types,
	hashed_attnums, InvalidOid, 0
};

/*
 * check_key_hash() RETURNS trigger: BEFORE INSERT and AFTER UPDATE OF
 * scope, idempotency_key, key_hash on idempotency_keys, for each row.  A
 * row inserted without key_hash (a dump of 1.2, a publisher at 1.2, an
 * INSERT by hand) gets it; a row whose key_hash is not key_hash(scope,
 * idempotency_key) is refused with check_violation.  A trigger rather than
 * a CHECK constraint: the executor reads and plans a CHECK's expression
 * again for every statement that writes the table, every claim and every
 * completion, where a trigger costs one function call per new row and
 * nothing for the updates that leave those columns alone.
 */
Datum
idempotency_check_key_hash(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	HeapTuple	tuple;
	TupleDesc	tupdesc;
	int			scope_col,
				key_col,
				hash_col;
	bool		scope_null,
				key_null,
				hash_null;
	Datum		scope,
				key,
				stored;
	pg_uuid_t  *hash;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("check_key_hash() must be fired for each row on INSERT or UPDATE")));
	tuple = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;
	tupdesc = RelationGetDescr(trigdata->tg_relation);
	idem_learn_columns(&hashed_columns, trigdata->tg_relation);
	scope_col = hashed_attnums[0];
	key_col = hashed_attnums[1];
	hash_col = hashed_attnums[2];

	scope = heap_getattr(tuple, scope_col, tupdesc, &scope_null);
	key = heap_getattr(tuple, key_col, tupdesc, &key_null);
	if (scope_null || key_null)
		return PointerGetDatum(tuple);	/* NOT NULL refuses the row */
	hash = palloc(sizeof(pg_uuid_t));
	idem_key_hash(DatumGetTextPP(scope), DatumGetTextPP(key), hash);
	stored = heap_getattr(tuple, hash_col, tupdesc, &hash_null);
	if (hash_null && TRIGGER_FIRED_BEFORE(trigdata->tg_event))
	{
		Datum		value = UUIDPGetDatum(hash);
		bool		isnull = false;

		return PointerGetDatum(heap_modify_tuple_by_cols(tuple, tupdesc, 1,
														 &hash_col, &value,
														 &isnull));
	}
	if (!hash_null &&
		memcmp(DatumGetUUIDP(stored)->data, hash->data, UUID_LEN) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("key_hash of idempotency key \"%s\" in scope \"%s\" is not key_hash(scope, idempotency_key)",
						TextDatumGetCString(key), TextDatumGetCString(scope)),
				 errtablecol(trigdata->tg_relation, hash_col)));
	return PointerGetDatum(tuple);
}
