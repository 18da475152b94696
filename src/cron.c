/*-------------------------------------------------------------------------
 *
 * cron.c
 *	  schedule_cleanup() and unschedule_cleanup(): the pg_cron job
 *	  "idempotency-cleanup" that runs purge_expired() in this database.
 *
 * pg_cron keeps its jobs in the one database named by cron.database_name.
 * When that is this database the job is written through SPI, inside the
 * caller's transaction.  Otherwise the function connects to that database
 * over libpq, as the current user, through the server's own unix socket
 * (as dblink does) and calls cron.schedule_in_database() there; that change
 * commits at once, whatever the calling transaction does later.  A
 * non-superuser may only connect with a password, as in dblink, so that the
 * server's own identity never authenticates anyone.
 *
 * pg_cron names a job uniquely per user: calling again updates the same job
 * (same job id) with the new schedule.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "libpq-fe.h"

#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/varlena.h"

#include "idempotency.h"
#include "arguments.h"

#define CLEANUP_JOB_NAME "idempotency-cleanup"
#define CLEANUP_COMMAND "CALL idempotency.purge_expired()"
#define EQ " OPERATOR(pg_catalog.=) "

/* Where pg_cron's tables are, and how we reach them. */
typedef struct CronSession
{
	char	   *database;		/* cron.database_name */
	PGconn	   *conn;			/* NULL: this database, through SPI */
	MemoryContext caller_cxt;	/* where results are copied to */
} CronSession;

/* SQL-callable functions */
PG_FUNCTION_INFO_V1(idempotency_schedule_cleanup);
PG_FUNCTION_INFO_V1(idempotency_unschedule_cleanup);

/*
 * Raise the error a statement in the cron database returned, with its
 * SQLSTATE, after freeing the result.
 */
static void
raise_remote_error(PGresult *res, const CronSession *session)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *message = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
	const char *hint = PQresultErrorField(res, PG_DIAG_MESSAGE_HINT);
	int			code = ERRCODE_CONNECTION_FAILURE;
	char	   *message_copy;
	char	   *detail_copy = detail ? pstrdup(detail) : NULL;
	char	   *hint_copy = hint ? pstrdup(hint) : NULL;

	if (state != NULL && strlen(state) == 5)
		code = MAKE_SQLSTATE(state[0], state[1], state[2], state[3], state[4]);
	message_copy = pstrdup(message ? message :
						   pchomp(PQerrorMessage(session->conn)));
	PQclear(res);
	ereport(ERROR,
			(errcode(code),
			 errmsg_internal("%s", message_copy),
			 detail_copy ? errdetail_internal("%s", detail_copy) : 0,
			 hint_copy ? errhint("%s", hint_copy) : 0,
			 errcontext("pg_cron in database \"%s\"", session->database)));
}

/*
 * Run one statement in the cron database with text parameters.  Returns
 * the first column of its first row, or NULL when there is none.
 */
static char *
cron_query(CronSession *session, const char *sql, int nparams,
		   const char *const *params)
{
	char	   *result = NULL;

	if (session->conn == NULL)
	{
		Oid			types[4] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID};
		Datum		values[4];
		int			i;

		Assert(nparams <= 4);
		for (i = 0; i < nparams; i++)
			values[i] = CStringGetTextDatum(params[i]);
		if (SPI_execute_with_args(sql, nparams, types, values, NULL,
								  false, 1) < 0)
			elog(ERROR, "SPI_execute_with_args failed for \"%s\"", sql);
		if (SPI_processed > 0 && SPI_tuptable != NULL)
		{
			char	   *value = SPI_getvalue(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc, 1);

			if (value != NULL)
				result = MemoryContextStrdup(session->caller_cxt, value);
		}
	}
	else
	{
		PGresult   *res = PQexecParams(session->conn, sql, nparams, NULL,
									   params, NULL, NULL, 0);

		if (PQresultStatus(res) != PGRES_TUPLES_OK &&
			PQresultStatus(res) != PGRES_COMMAND_OK)
			raise_remote_error(res, session);
		if (PQntuples(res) > 0 && !PQgetisnull(res, 0, 0))
			result = pstrdup(PQgetvalue(res, 0, 0));
		PQclear(res);
	}
	return result;
}

/*
 * The server's first unix socket directory, or "localhost" when it listens
 * on none.
 */
static char *
local_server_host(void)
{
	char	   *dirs = pstrdup(Unix_socket_directories ? Unix_socket_directories : "");
	List	   *names = NIL;

	if (SplitDirectoriesString(dirs, ',', &names) && names != NIL)
		return (char *) linitial(names);
	return "localhost";
}

/*
 * Connect to pg_cron's database as the current user.
 */
static PGconn *
connect_to_cron_database(const char *database)
{
	const char *keywords[] = {"host", "port", "dbname", "user", "options",
	"application_name", "connect_timeout", NULL};
	const char *values[8];
	PGconn	   *conn;

	values[0] = local_server_host();
	values[1] = psprintf("%d", PostPortNumber);
	values[2] = database;
	values[3] = GetUserNameFromId(GetUserId(), false);
	values[4] = "-c search_path=pg_catalog";
	values[5] = "idempotency schedule_cleanup";
	values[6] = "10";
	values[7] = NULL;

	conn = PQconnectdbParams(keywords, values, false);
	if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
	{
		char	   *message = conn ? pchomp(PQerrorMessage(conn)) :
		pstrdup("out of memory");

		PQfinish(conn);
		ereport(ERROR,
				(errcode(ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
				 errmsg("could not connect to database \"%s\", where pg_cron runs",
						database),
				 errdetail_internal("%s", message),
				 errhint("The current user must be able to log in to database \"%s\" over the local socket.",
						 database)));
	}
	if (!superuser() && !PQconnectionUsedPassword(conn))
	{
		PQfinish(conn);
		ereport(ERROR,
				(errcode(ERRCODE_S_R_E_PROHIBITED_SQL_STATEMENT_ATTEMPTED),
				 errmsg("password is required to reach pg_cron in database \"%s\"",
						database),
				 errdetail("Non-superusers may only connect to pg_cron's database with a password."),
				 errhint("Call this function as a superuser, or require password authentication for this role in pg_hba.conf.")));
	}
	return conn;
}

/*
 * Find pg_cron and open a session with its database.  Raises 0A000 when
 * pg_cron is not loaded.
 */
static void
open_cron_session(CronSession *session)
{
	const char *database = GetConfigOption("cron.database_name", true, false);
	char	   *here = get_database_name(MyDatabaseId);

	if (database == NULL ||
		(GetConfigOptionFlags("cron.database_name", true) & GUC_CUSTOM_PLACEHOLDER))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("pg_cron is not loaded"),
				 errdetail("Scheduling cleanup needs the pg_cron extension."),
				 errhint("Install pg_cron (Debian: apt-get install postgresql-15-cron), add it to shared_preload_libraries, set cron.database_name, restart the server, and run CREATE EXTENSION pg_cron in that database; or run CALL idempotency.purge_expired() from any other scheduler.")));

	session->database = pstrdup(database);
	session->caller_cxt = CurrentMemoryContext;
	if (strcmp(database, here) == 0)
	{
		session->conn = NULL;
		SPI_connect();
	}
	else
		session->conn = connect_to_cron_database(database);
}

/*
 * End the session; on error, only the connection needs closing.
 */
static void
close_cron_session(CronSession *session)
{
	if (session->conn != NULL)
		PQfinish(session->conn);
	else
		SPI_finish();
	session->conn = NULL;
}

/*
 * True when the pg_cron extension exists in its database.  With
 * create_it, a superuser creates it there when it is missing (the library
 * is loaded, so only that step is left).
 */
static bool
pg_cron_installed(CronSession *session, bool create_it)
{
	if (cron_query(session,
				   "SELECT extversion FROM pg_catalog.pg_extension"
				   " WHERE extname" EQ "'pg_cron'", 0, NULL) != NULL)
		return true;
	if (!create_it)
		return false;
	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("pg_cron is not installed in database \"%s\"",
						session->database),
				 errhint("A superuser can run CREATE EXTENSION pg_cron in database \"%s\" (cron.database_name).",
						 session->database)));
	cron_query(session, "CREATE EXTENSION IF NOT EXISTS pg_cron", 0, NULL);
	return true;
}

/*
 * Run "work" in a session with pg_cron's database and return its result;
 * the connection is closed on error too.
 */
static char *
in_cron_session(char *(*work) (CronSession *session, const char *arg),
				const char *arg)
{
	CronSession session;
	char	   *volatile result = NULL;

	open_cron_session(&session);
	PG_TRY();
	{
		result = work(&session, arg);
	}
	PG_CATCH();
	{
		if (session.conn != NULL)
			PQfinish(session.conn);
		PG_RE_THROW();
	}
	PG_END_TRY();
	close_cron_session(&session);
	return result;
}

/*
 * Create the job, or give the existing one the new schedule; returns the
 * job id.
 */
static char *
schedule_job(CronSession *session, const char *schedule)
{
	char	   *here = get_database_name(MyDatabaseId);
	const char *params[4] = {CLEANUP_JOB_NAME, schedule, CLEANUP_COMMAND, here};
	char	   *other;

	pg_cron_installed(session, true);
	other = cron_query(session,
					   "SELECT database FROM cron.job WHERE jobname" EQ "$1"
					   " AND username" EQ "CURRENT_USER", 1, params);
	if (other != NULL && strcmp(other, here) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("pg_cron job \"%s\" of this user already runs in database \"%s\"",
						CLEANUP_JOB_NAME, other),
				 errdetail("pg_cron job names are unique per user."),
				 errhint("Call idempotency.unschedule_cleanup() in database \"%s\" first, or schedule as another role.",
						 other)));
	return cron_query(session,
					  "SELECT cron.schedule_in_database($1, $2, $3, $4)",
					  4, params);
}

/*
 * Remove this database's job; returns NULL when there was none.
 */
static char *
unschedule_job(CronSession *session, const char *unused pg_attribute_unused())
{
	const char *params[2] = {CLEANUP_JOB_NAME, get_database_name(MyDatabaseId)};

	if (!pg_cron_installed(session, false))
		return NULL;
	return cron_query(session,
					  "SELECT cron.unschedule(jobid) FROM cron.job"
					  " WHERE jobname" EQ "$1 AND database" EQ "$2"
					  " AND username" EQ "CURRENT_USER", 2, params);
}

/*
 * schedule_cleanup(schedule text) RETURNS bigint: create or reschedule the
 * job, and return its id.
 */
Datum
idempotency_schedule_cleanup(PG_FUNCTION_ARGS)
{
	text	   *schedule = idem_arg_name(fcinfo, 0, "schedule", 1,
										 IDEM_MAX_NAME_CHARS);
	char	   *jobid;

	/* the job is written by another session: check this one first */
	PreventCommandIfReadOnly("idempotency.schedule_cleanup()");
	jobid = in_cron_session(schedule_job, text_to_cstring(schedule));
	if (jobid == NULL)
		elog(ERROR, "cron.schedule_in_database returned no job id");
	PG_RETURN_INT64(pg_strtoint64(jobid));
}

/*
 * unschedule_cleanup() RETURNS boolean: remove this database's job; false
 * when there was none.
 */
Datum
idempotency_unschedule_cleanup(PG_FUNCTION_ARGS)
{
	PreventCommandIfReadOnly("idempotency.unschedule_cleanup()");
	PG_RETURN_BOOL(in_cron_session(unschedule_job, NULL) != NULL);
}
