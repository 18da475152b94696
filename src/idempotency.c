/*-------------------------------------------------------------------------
 *
 * idempotency.c
 *	  Module entry point of the idempotency extension: the module magic and
 *	  the settings (GUCs), and when preloaded the shared memory of the
 *	  outcome counts (metrics.c) and of the waits for a holder (waits.c).
 *
 * Interval settings are string GUCs holding any interval PostgreSQL accepts
 * ('30 seconds', '2 min', 'PT30S'); the check hook parses and bounds them
 * without throwing, and the assign hook keeps the parsed value, so the hot
 * paths read an Interval and never parse text.  An optional one
 * (idempotency.default_response_ttl) may also be '', unset.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/guc.h"

#include "idempotency.h"
#include "arguments.h"
#include "metrics.h"
#include "waits.h"

PG_MODULE_MAGIC;

/* Largest interval accepted anywhere: 100 years. */
#define IDEM_MAX_INTERVAL_MONTHS (100 * MONTHS_PER_YEAR)

Interval	idem_default_ttl;
Interval	idem_lease_timeout;
Interval	idem_token_ttl;
Interval	idem_outbox_retry_backoff;
Interval	idem_processed_retention;
Interval	idem_outbox_retention;
Interval   *idem_default_response_ttl = NULL;
int			idem_max_key_length = IDEM_MAX_NAME_CHARS;
int			idem_max_response_bytes = 1024 * 1024;
int			idem_outbox_max_attempts = 10;
bool		idem_outbox_notify = true;
int			idem_outbox_notify_interval = 10;
int			idem_metrics_max_scopes = 1000;
int			idem_metrics_max_scopes_per_role = 250;
Interval	idem_outbox_max_lease;
int			idem_outbox_max_batch = 10000;
bool		idem_track_outcomes = true;
bool		idem_direct_writes = true;

/* The text values behind the interval settings; the GUC machinery owns them. */
static char *default_ttl_text;
static char *lease_timeout_text;
static char *token_ttl_text;
static char *outbox_retry_backoff_text;
static char *processed_retention_text;
static char *outbox_retention_text;
static char *default_response_ttl_text;
static char *outbox_max_lease_text;
static Interval default_response_ttl;

void		_PG_init(void);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static bool check_interval_setting(char **newval, void **extra,
								   GucSource source);
static bool check_optional_interval_setting(char **newval, void **extra,
											GucSource source);
static void define_interval_setting(const char *name, const char *desc,
									const char *default_value,
									char **text_value, bool optional,
									GucStringAssignHook assign_hook);
static void assign_default_ttl(const char *newval, void *extra);
static void assign_lease_timeout(const char *newval, void *extra);
static void assign_token_ttl(const char *newval, void *extra);
static void assign_outbox_retry_backoff(const char *newval, void *extra);
static void assign_processed_retention(const char *newval, void *extra);
static void assign_outbox_retention(const char *newval, void *extra);
static void assign_default_response_ttl(const char *newval, void *extra);
static void assign_outbox_max_lease(const char *newval, void *extra);

/*
 * Parse an interval without raising errors: the datetime decoder reports
 * failures by return code, which a GUC check hook needs.
 */
static bool
parse_interval(const char *str, Interval *result)
{
	char		workbuf[256];
	char	   *field[MAXDATEFIELDS];
	int			ftype[MAXDATEFIELDS];
	int			nf;
	int			dtype;
	struct pg_itm_in itm_in;
	int			rc;

	rc = ParseDateTime(str, workbuf, sizeof(workbuf), field, ftype,
					   MAXDATEFIELDS, &nf);
	if (rc == 0)
		rc = DecodeInterval(field, ftype, nf, INTERVAL_FULL_RANGE,
							&dtype, &itm_in);
	if (rc == DTERR_BAD_FORMAT)
	{
		char	   *copy = pstrdup(str);

		rc = DecodeISO8601Interval(copy, &dtype, &itm_in);
		pfree(copy);
	}
	if (rc != 0 || dtype != DTK_DELTA)
		return false;
	return itmin2interval(&itm_in, result) == 0;
}

/*
 * Check hook shared by every interval setting: positive and at most 100
 * years, measured as idem_arg_interval() measures an argument (months of
 * 30 days, days of 24 hours), so that a setting and an argument take the
 * same spans; the portable edition's reader (sql/portable/settings.sql)
 * gives the same details.  The parsed value travels to the assign hook as
 * "extra".
 */
static bool
check_interval_setting(char **newval, void **extra,
					   GucSource source pg_attribute_unused())
{
	Interval	span;
	Interval	limit = {.month = IDEM_MAX_INTERVAL_MONTHS};
	Interval   *result;

	if (*newval == NULL || !parse_interval(*newval, &span))
	{
		GUC_check_errdetail("The value must be an interval, such as \"30 seconds\" or \"24 hours\".");
		return false;
	}
	if (!idem_interval_is_positive(&span))
	{
		GUC_check_errdetail("The interval must be positive.");
		return false;
	}
	if (DatumGetBool(DirectFunctionCall2(interval_gt, IntervalPGetDatum(&span),
										 IntervalPGetDatum(&limit))))
	{
		GUC_check_errdetail("The interval must be at most 100 years.");
		return false;
	}
	/* freed by the GUC machinery, so allocated as it expects (pg_compat.h) */
	result = (Interval *) idem_guc_malloc(sizeof(Interval));
	if (result == NULL)
		return false;
	*result = span;
	*extra = result;
	return true;
}

/*
 * Check hook of an interval setting that may be unset: '' (no "extra"),
 * or what check_interval_setting() accepts.
 */
static bool
check_optional_interval_setting(char **newval, void **extra, GucSource source)
{
	if (*newval != NULL && **newval == '\0')
		return true;
	return check_interval_setting(newval, extra, source);
}

static void
assign_default_ttl(const char *newval pg_attribute_unused(), void *extra)
{
	idem_default_ttl = *(Interval *) extra;
}

static void
assign_lease_timeout(const char *newval pg_attribute_unused(), void *extra)
{
	idem_lease_timeout = *(Interval *) extra;
}

static void
assign_token_ttl(const char *newval pg_attribute_unused(), void *extra)
{
	idem_token_ttl = *(Interval *) extra;
}

static void
assign_outbox_retry_backoff(const char *newval pg_attribute_unused(), void *extra)
{
	idem_outbox_retry_backoff = *(Interval *) extra;
}

static void
assign_processed_retention(const char *newval pg_attribute_unused(), void *extra)
{
	idem_processed_retention = *(Interval *) extra;
}

static void
assign_outbox_retention(const char *newval pg_attribute_unused(), void *extra)
{
	idem_outbox_retention = *(Interval *) extra;
}

static void
assign_outbox_max_lease(const char *newval pg_attribute_unused(), void *extra)
{
	idem_outbox_max_lease = *(Interval *) extra;
}

/* unset ('') leaves idem_default_response_ttl NULL */
static void
assign_default_response_ttl(const char *newval pg_attribute_unused(), void *extra)
{
	if (extra == NULL)
		idem_default_response_ttl = NULL;
	else
	{
		default_response_ttl = *(Interval *) extra;
		idem_default_response_ttl = &default_response_ttl;
	}
}

/*
 * Define one interval setting; every user may SET it per session, role or
 * database.  An "optional" one may also be '', unset.
 */
static void
define_interval_setting(const char *name, const char *desc,
						const char *default_value, char **text_value,
						bool optional, GucStringAssignHook assign_hook)
{
	DefineCustomStringVariable(name, desc,
							   optional ?
							   "Any positive interval up to 100 years, or empty for none." :
							   "Any positive interval up to 100 years.",
							   text_value, default_value, PGC_USERSET, 0,
							   optional ? check_optional_interval_setting :
							   check_interval_setting,
							   assign_hook, NULL);
}

/*
 * shmem_request_hook of a preloaded library: the shared memory of the
 * outcome counts and of the wait slots.
 */
static void
request_shared_memory(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	idem_metrics_shmem_request();
	RequestAddinShmemSpace(idem_wait_shmem_size());
}

/*
 * shmem_startup_hook: create the shared state, or attach to it.
 */
static void
start_shared_memory(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	idem_metrics_shmem_init();
	idem_wait_shmem_init();
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Module load: define the settings.
 */
void
_PG_init(void)
{
	define_interval_setting("idempotency.default_ttl",
							"Sets how long a request key is kept when claim() is given no ttl.",
							"24 hours", &default_ttl_text, false, assign_default_ttl);
	define_interval_setting("idempotency.lease_timeout",
							"Sets how long a claim holds its key when given no lease.",
							"30 seconds", &lease_timeout_text, false,
							assign_lease_timeout);
	define_interval_setting("idempotency.token_ttl",
							"Sets how long a one-time token lives when issue_token() is given no ttl.",
							"10 minutes", &token_ttl_text, false, assign_token_ttl);
	define_interval_setting("idempotency.outbox_retry_backoff",
							"Sets the first retry delay of a failed outbox event; each further attempt doubles it, up to one hour.",
							"1 second", &outbox_retry_backoff_text, false,
							assign_outbox_retry_backoff);
	define_interval_setting("idempotency.processed_retention",
							"Sets how long purge_expired() keeps processed_events marks.",
							"7 days", &processed_retention_text, false,
							assign_processed_retention);
	define_interval_setting("idempotency.outbox_retention",
							"Sets how long purge_expired() keeps published outbox events.",
							"7 days", &outbox_retention_text, false,
							assign_outbox_retention);
	define_interval_setting("idempotency.default_response_ttl",
							"Sets how long a stored answer is replayed when complete() or a final fail() is given no response_ttl; later claims of the key get gone.",
							"", &default_response_ttl_text, true,
							assign_default_response_ttl);

	DefineCustomIntVariable("idempotency.max_key_length",
							"Sets the longest accepted idempotency key, in characters.",
							"Bounded so that (scope, key) always fits a B-tree index entry.",
							&idem_max_key_length, IDEM_MAX_NAME_CHARS, 1, 400,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("idempotency.max_response_bytes",
							"Sets the largest response body complete() and fail() store.",
							"The size of the jsonb value, in bytes.",
							&idem_max_response_bytes, 1024 * 1024, 1, 256 * 1024 * 1024,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("idempotency.outbox_max_attempts",
							"Sets how many failed deliveries make an outbox event dead.",
							NULL,
							&idem_outbox_max_attempts, 10, 1, 1000,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("idempotency.outbox_notify",
							 "Wakes listeners of channel idempotency_outbox when a transaction that enqueued events commits.",
							 "NOTIFY serializes the commits of all notifying transactions of the cluster; producers at high concurrency may turn it off and let relays poll.",
							 &idem_outbox_notify, true,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("idempotency.outbox_notify_interval",
							"Sets how long after its last notification a session's commits enqueue events without notifying again.",
							"A relay woken by that notification drains the outbox and looks again after twice this interval, so it finds their events; 0 notifies at every commit.  Only superusers and roles granted SET on it can change it, so a producer session cannot break the relays' wake-up rule.",
							&idem_outbox_notify_interval, 10, 0, 60000,
							PGC_SUSET, GUC_UNIT_MS, NULL, NULL, NULL);

	DefineCustomIntVariable("idempotency.max_waiters_per_key",
							"Sets how many claims given a wait may sleep at once for one key; further ones answer in_progress at once.",
							"A sleeping claim keeps its connection, which the key's holder may need from the same pool to finish.  Only superusers and roles granted SET on it can change it, since behind a transaction pooler a session's setting would reach other clients.",
							&idem_max_waiters_per_key, 1, 0, 256,
							PGC_SUSET, 0, NULL, NULL, NULL);

	/*
	 * The bounds of claim_events: superusers' settings, so that one
	 * relay's session cannot lease every pending event for a century and
	 * starve the others.
	 */
	DefineCustomStringVariable("idempotency.outbox_max_lease",
							   "Sets the longest lease claim_events() grants; a longer one is refused.",
							   "Any positive interval up to 100 years.  Only superusers and roles granted SET on it can change it, so that one relay cannot hold events from the others for long.",
							   &outbox_max_lease_text, "1 hour", PGC_SUSET, 0,
							   check_interval_setting, assign_outbox_max_lease,
							   NULL);
	DefineCustomIntVariable("idempotency.outbox_max_batch",
							"Sets the most events one claim_events() call may ask for; a larger batch is refused.",
							"Only superusers and roles granted SET on it can change it, so that one relay cannot lease every pending event in one call.",
							&idem_outbox_max_batch, 10000, 1, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);

	DefineCustomBoolVariable("idempotency.direct_writes",
							 "Writes rows of the extension's tables with the executor's row primitives where the INSERT or UPDATE statement would give the same outcome.",
							 "Off, every write runs its statement through SPI: slower, with the same results; for tests and diagnosis.",
							 &idem_direct_writes, true,
							 PGC_USERSET, 0, NULL, NULL, NULL);

	DefineCustomBoolVariable("idempotency.track_outcomes",
							 "Counts the outcomes of the calls in idempotency.metrics().",
							 "Has an effect only with the library preloaded.  Only superusers and roles granted SET on it can change it, so a session cannot hide its calls from the counts.",
							 &idem_track_outcomes, true,
							 PGC_SUSET, 0, NULL, NULL, NULL);

	/*
	 * The outcome counts (metrics.c) and the waits for a key's holder
	 * (waits.c) need shared memory, which only a preloaded library has;
	 * the counts' setting is read then, and can only be defined then.
	 */
	if (process_shared_preload_libraries_in_progress)
	{
		DefineCustomIntVariable("idempotency.metrics_max_scopes",
								"Sets how many scopes idempotency.metrics() counts apart; calls in further scopes are counted in its row whose scope is NULL.",
								"A scope takes about 1.1 kB of shared memory.",
								&idem_metrics_max_scopes, 1000, 0, 100000,
								PGC_POSTMASTER, 0, NULL, NULL, NULL);
		DefineCustomIntVariable("idempotency.metrics_max_scopes_per_role",
								"Sets how many of the metrics_max_scopes rows one role may take; calls in its further scopes are counted in the row whose scope is NULL.",
								"The role is the session's (SET ROLE, or the session user) when the scope is first counted; rows are never taken back but with their database.  Keeps one role from filling the rows of every other.",
								&idem_metrics_max_scopes_per_role, 250, 0, 100000,
								PGC_SIGHUP, 0, NULL, NULL, NULL);
		prev_shmem_request_hook = shmem_request_hook;
		shmem_request_hook = request_shared_memory;
		prev_shmem_startup_hook = shmem_startup_hook;
		shmem_startup_hook = start_shared_memory;
		/* frees the counts' rows of a database at its DROP DATABASE */
		idem_metrics_install_hooks();
	}

	MarkGUCPrefixReserved("idempotency");
}
