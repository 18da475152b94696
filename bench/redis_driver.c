/*-------------------------------------------------------------------------
 *
 * redis_driver.c
 *	  The seeds' Redis idempotency scheme around a PostgreSQL business
 *	  write, as one client thread per connection pair:
 *
 *		SET key PROCESSING NX EX 86400		(Redis)
 *		INSERT INTO bench.payments ...		(PostgreSQL, prepared, autocommit)
 *		SET key <response> XX EX 86400		(Redis)
 *
 *	  Keys are <thread id>-<random 15-digit number>, as in the pgbench
 *	  scripts.  Prints "tps p50_ms p99_ms" of whole requests, measured
 *	  like pgbench (without connection time).
 *
 *	  usage: redis_driver REDIS_SOCKET PG_CONNINFO CLIENTS SECONDS
 *
 *-------------------------------------------------------------------------
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>

typedef struct Client
{
	int			id;
	const char *redis_socket;
	const char *conninfo;
	double		seconds;
	pthread_barrier_t *start;
	long		count;
	long		capacity;
	long	   *latency_us;		/* one entry per request */
	int			failed;
} Client;

static double
now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One Redis command that must answer OK (or nil for a lost NX race). */
static int
redis_set(redisContext *redis, const char *key, const char *value,
		  const char *mode)
{
	redisReply *reply = redisCommand(redis, "SET %s %s %s EX 86400",
									 key, value, mode);
	int			ok;

	if (reply == NULL)
	{
		fprintf(stderr, "redis: %s\n", redis->errstr);
		return -1;
	}
	ok = reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "OK") == 0;
	if (reply->type == REDIS_REPLY_ERROR)
	{
		fprintf(stderr, "redis: %s\n", reply->str);
		ok = -1;
	}
	freeReplyObject(reply);
	return ok;
}

static void *
client_main(void *arg)
{
	Client	   *c = arg;
	redisContext *redis = redisConnectUnix(c->redis_socket);
	PGconn	   *pg = PQconnectdb(c->conninfo);
	unsigned int seed = (unsigned int) time(NULL) ^ (c->id * 7919u);
	PGresult   *res;
	double		deadline;

	if (redis == NULL || redis->err || PQstatus(pg) != CONNECTION_OK)
	{
		fprintf(stderr, "connection failed: %s %s\n",
				redis ? redis->errstr : "", PQerrorMessage(pg));
		c->failed = 1;
		pthread_barrier_wait(c->start);
		return NULL;
	}
	res = PQprepare(pg, "pay",
					"INSERT INTO bench.payments (order_no, amount) VALUES ($1, $2::integer)",
					2, NULL);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		fprintf(stderr, "prepare: %s", PQerrorMessage(pg));
		c->failed = 1;
	}
	PQclear(res);

	pthread_barrier_wait(c->start);
	deadline = now_seconds() + c->seconds;
	while (!c->failed)
	{
		double		t0 = now_seconds();
		char		key[64];
		char		amount[16];
		const char *params[2] = {key, amount};
		long long	r;
		int			got;

		if (t0 >= deadline)
			break;
		r = 100000000000000LL +
			(((long long) rand_r(&seed) << 31 | rand_r(&seed)) % 900000000000000LL);
		snprintf(key, sizeof(key), "%d-%lld", c->id, r);
		snprintf(amount, sizeof(amount), "%d", 1 + rand_r(&seed) % 100000);

		got = redis_set(redis, key, "PROCESSING", "NX");
		if (got < 0)
		{
			c->failed = 1;
			break;
		}
		if (got == 1)
		{
			res = PQexecPrepared(pg, "pay", 2, params, NULL, NULL, 0);
			if (PQresultStatus(res) != PGRES_COMMAND_OK)
			{
				fprintf(stderr, "insert: %s", PQerrorMessage(pg));
				c->failed = 1;
			}
			PQclear(res);
			if (redis_set(redis, key, "{\"status\": \"paid\", \"code\": 201}", "XX") != 1)
				c->failed = 1;
		}
		if (c->count == c->capacity)
		{
			c->capacity = c->capacity ? c->capacity * 2 : 65536;
			c->latency_us = realloc(c->latency_us, c->capacity * sizeof(long));
		}
		c->latency_us[c->count++] = (long) ((now_seconds() - t0) * 1e6);
	}
	redisFree(redis);
	PQfinish(pg);
	return NULL;
}

static int
compare_long(const void *a, const void *b)
{
	long		x = *(const long *) a;
	long		y = *(const long *) b;

	return (x > y) - (x < y);
}

int
main(int argc, char **argv)
{
	int			nclients;
	Client	   *clients;
	pthread_t  *threads;
	pthread_barrier_t start;
	double		t0,
				elapsed;
	long		total = 0;
	long	   *all;
	int			i;

	if (argc != 5)
	{
		fprintf(stderr, "usage: %s REDIS_SOCKET PG_CONNINFO CLIENTS SECONDS\n", argv[0]);
		return 2;
	}
	nclients = atoi(argv[3]);
	clients = calloc(nclients, sizeof(Client));
	threads = calloc(nclients, sizeof(pthread_t));
	pthread_barrier_init(&start, NULL, nclients + 1);
	for (i = 0; i < nclients; i++)
	{
		clients[i].id = i;
		clients[i].redis_socket = argv[1];
		clients[i].conninfo = argv[2];
		clients[i].seconds = atof(argv[4]);
		clients[i].start = &start;
		pthread_create(&threads[i], NULL, client_main, &clients[i]);
	}
	pthread_barrier_wait(&start);
	t0 = now_seconds();
	for (i = 0; i < nclients; i++)
		pthread_join(threads[i], NULL);
	elapsed = now_seconds() - t0;

	for (i = 0; i < nclients; i++)
	{
		if (clients[i].failed)
			return 1;
		total += clients[i].count;
	}
	all = malloc((total + 1) * sizeof(long));
	total = 0;
	for (i = 0; i < nclients; i++)
	{
		memcpy(all + total, clients[i].latency_us, clients[i].count * sizeof(long));
		total += clients[i].count;
	}
	if (total == 0)
		return 1;
	qsort(all, total, sizeof(long), compare_long);
	printf("%.1f %.3f %.3f\n", total / elapsed,
		   all[(long) (total * 0.50)] / 1000.0,
		   all[(long) (total * 0.99)] / 1000.0);
	return 0;
}
