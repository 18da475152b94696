#!/usr/bin/python3
"""test/integration/patroni_failover.py: the body of patroni_failover.sh.

Runs against the Patroni cluster that scaleout/ha/start.sh started in
$HA_DIR (3 nodes, synchronous_mode_strict).  Two phases, each under load
from six client threads that connect with the multi-host connection string
(target_session_attrs=read-write) and reconnect and retry on their own:

  phased    claim (commits alone), then side-effect row + complete in one
            transaction
  onetx     BEGIN; claim; side-effect row; complete; COMMIT
  execute   idempotency.execute() whose statement inserts the side-effect row

Phase "failover": the leader's Patroni and postmaster get SIGKILL; Patroni
promotes the synchronous standby.  Then the old leader rejoins (crash
recovery and pg_rewind through Patroni) and must converge.
Phase "switchover": patronictl switchover to the synchronous standby.

After each phase, with the load stopped: every request a client saw
completed replays its answer and has exactly one side-effect row; every
claim a client saw is there; no key has two side-effect rows; fences only
grew; a holder cut off by the event gets 55000 once another resumed its key.
The pg_cron cleanup job must run on whichever node leads, never twice.
Prints "ok - ..." / "not ok - ..." lines, a figures block, and exits 1 on
any failure.  Figures also go to $HA_DIR/figures.md, and into the marked
section of $HA_DOC when that is set.
"""
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import psycopg2

HA_DIR = os.environ['HA_DIR']
HA_HOME = os.path.join(os.environ['IDEM_TOP'], 'scaleout', 'ha')
NODES = open(os.path.join(HA_DIR, 'nodes')).read().split()
PASSWORD = open(os.path.join(HA_DIR, 'password')).read().strip()
CONNSTR = open(os.path.join(HA_DIR, 'connstr')).read().strip()
LEASE = '5 seconds'          # lease of the phased clients' claims
HELD_LEASE = '2 seconds'     # lease of the holder cut off by each event
KINDS = ['phased', 'onetx', 'execute']
CLIENTS_PER_KIND = int(os.environ.get('HA_CLIENTS_PER_KIND', '2'))
WARMUP = 8                   # seconds of load before the event
WINDOW = 6                   # seconds of the "before" and "after" windows
SETTLE = 3                   # seconds after the first write that still count as "during"
CRON_WAIT = 90               # seconds to wait for a pg_cron run (schedule: every minute)

failures = 0


def log(msg):
    print(msg, flush=True)


def check(name, ok, detail=''):
    global failures
    if ok:
        log('ok - ' + name)
    else:
        failures += 1
        log('not ok - ' + name)
        if detail:
            for line in str(detail).splitlines()[:20]:
                log('    ' + line)
    return ok


def node_file(node, name):
    return open(os.path.join(HA_DIR, node, name)).read().strip()


def port(node):
    return int(node_file(node, 'port'))


def node_of_port(p):
    for n in NODES:
        if port(n) == p:
            return n
    return '?'


def connect(node, db='idempotency'):
    c = psycopg2.connect(host='127.0.0.1', port=port(node), dbname=db, user='postgres',
                         password=PASSWORD, connect_timeout=3, application_name='ha-test')
    c.autocommit = True
    return c


def query(node, sql, args=None, db='idempotency'):
    c = connect(node, db)
    try:
        with c.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall() if cur.description else None
    finally:
        c.close()


def rest(node, path):
    try:
        url = 'http://127.0.0.1:%s%s' % (node_file(node, 'api_port'), path)
        with urllib.request.urlopen(url, timeout=3) as r:
            return json.loads(r.read().decode() or 'null')
    except Exception:
        return None


def members():
    for n in NODES:
        c = rest(n, '/cluster')
        if c:
            return c['members']
    return []


def role_of(role):
    for m in members():
        if m['role'] == role:
            return m['name']
    return None


def healthy():
    """One running leader, a synchronous standby, every node running."""
    m = members()
    return (len(m) == len(NODES) and all(x['state'] == 'running' for x in m)
            and sum(x['role'] == 'leader' for x in m) == 1 and any(x['role'] == 'sync_standby' for x in m))


def lib(*args):
    """Run a function of scaleout/ha/lib.sh."""
    return subprocess.run(['bash', '-c', '. "$0/lib.sh" && "$@"', HA_HOME] + list(args),
                          check=True, stdout=subprocess.PIPE, text=True).stdout


def patronictl_list(title):
    out = subprocess.run(['patronictl', '-c', os.path.join(HA_DIR, NODES[0], 'patroni.yml'), 'list'],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    log('# patronictl list (%s):' % title)
    for line in out.splitlines():
        log('#   ' + line)


def wait_for(what, fn, timeout, interval=0.5):
    end = time.time() + timeout
    while time.time() < end:
        try:
            v = fn()
            if v:
                return v
        except Exception:
            pass
        time.sleep(interval)
    return None


def proc_is(pid, word):
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            return word in f.read().replace(b'\0', b' ').decode()
    except (OSError, ValueError):
        return False


class GiveUp(Exception):
    pass


class Client(threading.Thread):
    """One client: requests of one kind, new keys one after another,
    reconnecting and retrying on every error until each request is done."""

    def __init__(self, phase, kind, i, stop):
        super().__init__(name='%s-%s%d' % (phase, kind, i), daemon=True)
        self.kind, self.stop, self.prefix = kind, stop, '%s-%s%d' % (phase, kind, i)
        self.conn = None
        self.port = None
        self.writes = []        # (time, port) of every acknowledged commit
        self.done = []          # (time, key) of every request seen completed
        self.completed = {}     # key -> (request, response body) seen completed
        self.claims = {}        # key -> fence of the latest claim seen committed
        self.fences = []        # (time, key, fence) of every fence seen committed
        self.errors = []        # (time, code, key)
        self.violations = []
        self.samples = {}       # code -> first error message seen with it
        self.retry_outcomes = {}  # what the first claim/execute after an error said
        self.after_error = False
        self.deadline = None    # set when stopping: give up retrying after it

    # -- plumbing ---------------------------------------------------------
    def error(self, key, code, msg=''):
        self.errors.append((time.time(), code, key))
        self.samples.setdefault(code, ' '.join(msg.split())[:160])
        self.after_error = True
        if self.deadline and time.time() > self.deadline:
            raise GiveUp()

    def cur(self, key):
        while self.conn is None:
            try:
                self.conn = psycopg2.connect(CONNSTR, application_name=self.name)
                self.conn.autocommit = True
                self.port = int(self.conn.info.port)
            except psycopg2.OperationalError as e:
                self.conn = None
                self.error(key, '08001', str(e))  # could not connect to a read-write node
                time.sleep(0.1)
        return self.conn.cursor()

    def failed(self, key, e):
        code = getattr(e, 'pgcode', None)
        if not code:
            code = '08006' if isinstance(e, (psycopg2.OperationalError, psycopg2.InterfaceError)) else 'other'
        if self.conn is not None and not self.conn.closed:
            try:
                with self.conn.cursor() as c:
                    c.execute('ROLLBACK')
            except psycopg2.Error:
                self.close()
        else:
            self.close()
        self.error(key, code, str(e))
        time.sleep(0.05)

    def close(self):
        try:
            if self.conn is not None:
                self.conn.close()
        except psycopg2.Error:
            pass
        self.conn = None

    def outcome(self, outcome):
        """Count what the first claim or execute after an error said."""
        if self.after_error:
            self.after_error = False
            self.retry_outcomes[outcome] = self.retry_outcomes.get(outcome, 0) + 1

    def ack(self):
        self.writes.append((time.time(), self.port))

    def fence_seen(self, key, fence):
        old = self.claims.get(key)
        if old is not None and fence <= old:
            self.violations.append('%s: fence %d after %d' % (key, fence, old))
        self.claims[key] = fence
        self.fences.append((time.time(), key, fence))

    def finish(self, key, req, body):
        self.completed[key] = (req, body)
        self.done.append((time.time(), key))

    # -- the three kinds of request -----------------------------------------
    def phased(self, key, req):
        held = None     # our fence, once a claim of ours is known committed
        while True:
            try:
                cur = self.cur(key)
                cur.execute('SELECT outcome, fence, response_body, retry_after FROM '
                            'idempotency.claim(%s, %s::jsonb, lease => %s)', (key, req, LEASE))
                outcome, fence, body, retry_after = cur.fetchone()
                self.outcome(outcome if outcome != 'in_progress' or held is None else 'in_progress (still ours)')
                if outcome in ('claimed', 'resumed'):
                    if outcome == 'claimed' and key in self.claims:
                        self.violations.append('%s: claim seen committed (fence %d) was lost'
                                               % (key, self.claims[key]))
                    self.ack()
                    self.fence_seen(key, fence)
                    held = fence
                elif outcome == 'replay':
                    if body.get('key') != key:
                        self.violations.append('%s: replayed a foreign answer %s' % (key, body))
                    self.finish(key, req, body)
                    return
                elif outcome == 'in_progress':
                    if held is None:
                        # our claim committed but its answer was lost: wait for the lease
                        time.sleep(min(retry_after.total_seconds(), 6) + 0.05)
                        continue
                else:
                    self.violations.append('%s: claim said %s' % (key, outcome))
                    return
                body = {'key': key, 'fence': held}
                cur.execute('BEGIN')
                cur.execute("INSERT INTO side_effects (key, fence, client, kind) VALUES (%s, %s, %s, 'phased')",
                            (key, held, self.name))
                cur.execute('SELECT idempotency.complete(%s, %s, %s::jsonb)', (key, held, json.dumps(body)))
                cur.execute('COMMIT')
                self.ack()
                self.finish(key, req, body)
                return
            except psycopg2.Error as e:
                self.failed(key, e)

    def onetx(self, key, req):
        while True:
            try:
                cur = self.cur(key)
                cur.execute('BEGIN')
                cur.execute('SELECT outcome, fence, response_body FROM idempotency.claim(%s, %s::jsonb)', (key, req))
                outcome, fence, body = cur.fetchone()
                self.outcome(outcome)
                if outcome == 'replay':
                    cur.execute('ROLLBACK')
                    if body.get('key') != key:
                        self.violations.append('%s: replayed a foreign answer %s' % (key, body))
                    self.finish(key, req, body)
                    return
                if outcome != 'claimed':
                    cur.execute('ROLLBACK')
                    self.violations.append('%s: one-transaction claim said %s' % (key, outcome))
                    return
                body = {'key': key, 'fence': fence}
                cur.execute("INSERT INTO side_effects (key, fence, client, kind) VALUES (%s, %s, %s, 'onetx')",
                            (key, fence, self.name))
                cur.execute('SELECT idempotency.complete(%s, %s, %s::jsonb)', (key, fence, json.dumps(body)))
                cur.execute('COMMIT')
                self.ack()
                self.fence_seen(key, fence)
                self.finish(key, req, body)
                return
            except psycopg2.Error as e:
                self.failed(key, e)

    STATEMENT = ("INSERT INTO side_effects (key, client, kind) VALUES ($1, $2, 'execute') "
                 "RETURNING jsonb_build_object('id', id, 'key', key)")

    def execute(self, key, req):
        while True:
            try:
                cur = self.cur(key)
                cur.execute('SELECT outcome, fence, response_body FROM '
                            'idempotency.execute(%s, %s::jsonb, %s, ARRAY[%s, %s])',
                            (key, req, self.STATEMENT, key, self.name))
                outcome, fence, body = cur.fetchone()
                self.outcome(outcome)
                if outcome in ('claimed', 'resumed'):
                    self.ack()
                    self.fence_seen(key, fence)
                elif outcome != 'replay':
                    self.violations.append('%s: execute said %s' % (key, outcome))
                    return
                if not isinstance(body, dict) or body.get('key') != key:
                    self.violations.append('%s: execute answered %s' % (key, body))
                self.finish(key, req, body)
                return
            except psycopg2.Error as e:
                self.failed(key, e)

    def run(self):
        n = 0
        try:
            while not self.stop.is_set():
                n += 1
                key = '%s-%d' % (self.prefix, n)
                req = json.dumps({'client': self.name, 'n': n})
                getattr(self, self.kind)(key, req)
        except GiveUp:
            self.violations.append('gave up retrying %s-%d' % (self.prefix, n))
        except Exception as e:     # a bug here must fail the test, not hang it
            self.violations.append('client crashed: %r' % e)
        self.close()


def run_load(phase, event):
    """Start the clients, wait WARMUP s, run event() -> (t_event, info),
    keep the load on until WINDOW s after the first write on the new
    leader plus SETTLE, stop, and return the clients and timings."""
    stop = threading.Event()
    clients = [Client(phase, k, i, stop) for k in KINDS for i in range(1, CLIENTS_PER_KIND + 1)]
    for c in clients:
        c.start()
    time.sleep(WARMUP)
    t_event, info = event()
    new_port = port(info['new'])

    def first_new():
        ts = [t for c in clients for (t, p) in list(c.writes) if t > t_event and p == new_port]
        return min(ts) if ts else None
    t_first = wait_for('a write on the new leader', first_new, 90, 0.1)
    if t_first:
        time.sleep(max(0, t_first + SETTLE + WINDOW + 0.5 - time.time()))
    stop.set()
    for c in clients:
        c.deadline = time.time() + 60
    for c in clients:
        c.join(90)
    return clients, t_event, t_first, info


def claim_held(node, key):
    rows = query(node, "SELECT outcome, fence FROM idempotency.claim(%s, '{\"held\": true}', lease => %s)",
                 (key, HELD_LEASE))
    return rows[0][1]


def check_phase(phase, clients, t_event, t_first, info, held):
    """The checks after a phase; returns its figures."""
    leader = info['new']
    check('%s: a client wrote to the new leader %s' % (phase, leader), t_first is not None)
    hung = [c.name for c in clients if c.is_alive()]
    check('%s: every client finished its last request' % phase, not hung, hung)
    viol = [v for c in clients for v in c.violations]
    check('%s: clients saw no lost claim, foreign answer, shrinking fence or wrong outcome' % phase,
          not viol, '\n'.join(viol))

    completed = {k: v for c in clients for k, v in c.completed.items()}
    claims = {k: f for c in clients for k, f in c.claims.items()}
    check('%s: clients completed %d requests' % (phase, len(completed)), len(completed) > 50)
    keys = sorted(completed)
    c = connect(leader)
    cur = c.cursor()
    # every request seen completed replays its answer
    cur.execute('SELECT v.k, r.outcome, r.response_body FROM unnest(%s::text[], %s::jsonb[]) AS v(k, req), '
                'idempotency.claim(v.k, v.req) AS r',
                (keys, [completed[k][0] for k in keys]))
    bad = [(k, o, b) for k, o, b in cur.fetchall() if o != 'replay' or b != completed[k][1]]
    check('%s: every request a client saw completed (%d) replays its stored answer' % (phase, len(keys)),
          not bad, '\n'.join(map(str, bad[:10])))
    # exactly one side effect each, and none anywhere twice
    cur.execute('SELECT v.k, count(s.id) FROM unnest(%s::text[]) AS v(k) LEFT JOIN side_effects s ON s.key = v.k '
                'GROUP BY v.k HAVING count(s.id) <> 1', (keys,))
    bad = cur.fetchall()
    check('%s: each of them has exactly one side-effect row' % phase, not bad, bad[:10])
    cur.execute('SELECT key, count(*) FROM side_effects GROUP BY key HAVING count(*) > 1')
    bad = cur.fetchall()
    check('%s: no key was executed twice (side-effect rows per key = 1)' % phase, not bad, bad[:10])
    cur.execute("SELECT s.key, s.fence, k.status, k.fence FROM side_effects s "
                "LEFT JOIN idempotency.idempotency_keys k ON k.idempotency_key = s.key AND k.scope = '' "
                "WHERE k.status IS DISTINCT FROM 'completed' OR (s.fence IS NOT NULL AND s.fence <> k.fence)")
    bad = cur.fetchall()
    check('%s: every side-effect row belongs to a completed key, written under its completing fence' % phase,
          not bad, bad[:10])
    # every claim seen is there (completed by now, with that fence or a later one)
    ck = sorted(claims)
    cur.execute('SELECT v.k, v.f, l.status, l.fence FROM unnest(%s::text[], %s::bigint[]) AS v(k, f), '
                'idempotency.lookup(v.k) AS l WHERE l.fence IS NULL OR l.fence < v.f', (ck, [claims[k] for k in ck]))
    bad = cur.fetchall()
    check('%s: every claim a client saw (%d) is there, with its fence or a later one' % (phase, len(ck)),
          not bad, bad[:10])
    # fences only grew
    before = [f for cl in clients for (t, k, f) in cl.fences if t < t_event]
    after = [f for cl in clients for (t, k, f) in cl.fences if t_first and t >= t_first]
    check('%s: fences only grew: every fence after the event (min %s) > every fence before it (max %s)'
          % (phase, min(after) if after else '-', max(before) if before else '-'),
          before and after and min(after) > max(before))
    # the holder cut off by the event
    hkey, hfence = held
    time.sleep(max(0, 2.2 - (time.time() - t_event)))
    cur.execute("SELECT outcome, fence FROM idempotency.claim(%s, '{\"held\": true}')", (hkey,))
    outcome, newf = cur.fetchone()
    check('%s: the key of a holder cut off by the event is resumed after its lease, fence %s -> %s'
          % (phase, hfence, newf), outcome == 'resumed' and newf > hfence, outcome)
    state = None
    try:
        cur.execute('BEGIN')
        cur.execute("INSERT INTO side_effects (key, fence, client, kind) VALUES (%s, %s, 'held', 'held')",
                    (hkey, hfence))
        cur.execute("SELECT idempotency.complete(%s, %s, '{\"stale\": true}')", (hkey, hfence))
        cur.execute('COMMIT')
    except psycopg2.Error as e:
        state = e.pgcode
        cur.execute('ROLLBACK')
    check('%s: the cut-off holder\'s complete() with its old fence is refused with 55000' % phase,
          state == '55000', state)
    cur.execute('BEGIN')
    cur.execute("INSERT INTO side_effects (key, fence, client, kind) VALUES (%s, %s, 'held', 'held')", (hkey, newf))
    cur.execute("SELECT idempotency.complete(%s, %s, '{\"ok\": true}')", (hkey, newf))
    cur.execute('COMMIT')
    cur.execute('SELECT count(*) FROM side_effects WHERE key = %s', (hkey,))
    check('%s: the new holder completes it; one side-effect row' % phase, cur.fetchone()[0] == 1)
    c.close()
    return figures(phase, clients, t_event, t_first, info)


def figures(phase, clients, t_event, t_first, info):
    done = sorted(t for c in clients for (t, k) in c.done)
    old_port = port(info['old'])
    t_first = t_first or t_event

    def rate(a, b):
        return sum(1 for t in done if a <= t < b) / (b - a) if b > a else 0.0
    if phase == 'failover':
        down_from, down_label = t_event, 'SIGKILL'
    else:
        olds = [t for c in clients for (t, p) in c.writes if p == old_port and t < t_first]
        down_from, down_label = (max(olds) if olds else t_event), 'last write on the old leader'
    errors = {}
    for c in clients:
        for t, code, key in c.errors:
            e = errors.setdefault(code, [0, set()])
            e[0] += 1
            e[1].add(key)
    samples, outcomes = {}, {}
    for c in clients:
        for code, msg in c.samples.items():
            samples.setdefault(code, msg)
        for o, n in c.retry_outcomes.items():
            outcomes[o] = outcomes.get(o, 0) + n
    for code, msg in sorted(samples.items()):
        log('# %s: %s error, e.g.: %s' % (phase, code, msg))
    return {
        'retry_outcomes': dict(sorted(outcomes.items())),
        'phase': phase,
        'old': info['old'], 'new': info['new'],
        'outage': t_first - down_from, 'outage_from': down_label,
        'cmd': info.get('cmd'),
        'before': rate(t_event - WINDOW, t_event),
        'during': rate(t_event, t_first + SETTLE), 'during_len': t_first + SETTLE - t_event,
        'after': rate(t_first + SETTLE, t_first + SETTLE + WINDOW),
        'requests': len(done),
        'retried': len({k for c in clients for (t, code, k) in c.errors}),
        'errors': {code: (n, len(keys)) for code, (n, keys) in sorted(errors.items())},
    }


def converge(rejoined):
    """The rejoined node streams from the leader and has its data."""
    leader = role_of('leader')
    ok = wait_for('streaming', lambda: query(leader,
                  "SELECT state FROM pg_stat_replication WHERE application_name = %s", (rejoined,)) == [('streaming',)],
                  60)
    check('rejoin: the leader %s streams to %s (pg_stat_replication.state = streaming)' % (leader, rejoined), ok)
    rec = query(rejoined, 'SELECT pg_is_in_recovery(), (SELECT status FROM pg_stat_wal_receiver)')
    check('rejoin: %s is a replica whose WAL receiver is streaming' % rejoined,
          rec == [(True, 'streaming')], rec)
    lsn = query(leader, 'SELECT pg_current_wal_lsn()')[0][0]
    for n in NODES:
        if n != leader:
            caught = wait_for('replay', lambda: query(n, 'SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn',
                                                      (lsn,))[0][0], 60)
            check('rejoin: %s replayed up to the leader\'s WAL position %s' % (n, lsn), caught)
    digest = ("SELECT (SELECT count(*) || ' ' || md5(string_agg(concat_ws('|', id, key, fence, client, kind), ','"
              "               ORDER BY id)) FROM side_effects),"
              "       (SELECT count(*) || ' ' || md5(string_agg(concat_ws('|', scope, idempotency_key, status,"
              "               fence, attempts, response_body), ',' ORDER BY scope, idempotency_key))"
              "          FROM idempotency.idempotency_keys)")
    sums = {n: query(n, digest)[0] for n in NODES}
    check('rejoin: every node has the same side_effects and idempotency_keys as the leader (%s rows, %s keys)'
          % (sums[leader][0].split()[0], sums[leader][1].split()[0]),
          all(s == sums[leader] for s in sums.values()), sums)
    rewound = [l.strip() for l in open(os.path.join(HA_DIR, rejoined, 'patroni.log'))
               if 'pg_rewind' in l or 'crash recovery' in l]
    log('# %s rejoined through: %s' % (rejoined, '; '.join(sorted({re.sub(r'^\S+ \S+ ', '', l)
                                                                  for l in rewound if 'in progress' not in l}))
                                         or 'a plain restart (no rewind needed)'))


def cron_runs(leader, after):
    return query(leader, "SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FROM cron.job_run_details "
                 "WHERE jobid = (SELECT jobid FROM cron.job WHERE jobname = 'idempotency-cleanup') "
                 "AND start_time > to_timestamp(%s)", (after,), db='postgres')[0]


def wait_cron(label, after):
    """The job runs on the new leader after the event and does its work
    there: keys that expire now are gone after its next run."""
    leader = role_of('leader')
    query(leader, "SELECT count(*) FROM generate_series(1, 50) g, "
                  "idempotency.claim('expire-' || %s || '-' || g, NULL, ttl => '2 seconds', lease => '1 second')",
          (label,))
    after = max(after, time.time() + 2.5)
    runs = wait_for('a cron run', lambda: cron_runs(leader, after)[0] > 0 and cron_runs(leader, after), CRON_WAIT, 1)
    check('cron: the cleanup job ran and succeeded on the leader %s after the %s (%s)'
          % (leader, label, '%d succeeded of %d runs' % tuple(runs) if runs else 'no run'), runs)
    left = query(leader, "SELECT count(*) FROM idempotency.idempotency_keys WHERE idempotency_key LIKE %s",
                 ('expire-%s-%%' % label,))[0][0]
    check('cron: that run purged, on %s, the 50 keys that had expired there (%d left)' % (leader, left), left == 0)


def cron_final(leaders):
    """No two runs of the job overlap, at most one per minute, and every
    start pg_cron logged was on the node leading at that moment."""
    leader = role_of('leader')
    rows = query(leader, "SELECT runid, status, extract(epoch FROM start_time), extract(epoch FROM end_time), "
                 "return_message FROM cron.job_run_details "
                 "WHERE jobid = (SELECT jobid FROM cron.job WHERE jobname = 'idempotency-cleanup') ORDER BY start_time",
                 db='postgres')
    statuses, all_rows = {}, rows
    for r in rows:
        statuses[r[1]] = statuses.get(r[1], 0) + 1
    log('# cron.job_run_details of idempotency-cleanup on %s: %s' % (leader, statuses))
    for r in rows:
        if r[1] != 'succeeded':
            log('#   run %s: %s, start %s, "%s"' % (r[0], r[1], r[2], r[4]))
    if any(r[1] != 'succeeded' for r in rows):
        for n in NODES:
            lines = [l.rstrip() for l in open(os.path.join(HA_DIR, n, 'log', 'postgresql.log'), errors='replace')
                     if re.search(r'cron|FATAL|promot|shutting down|ready to accept', l)]
            for l in lines[-40:]:
                log('#   %s: %s' % (n, l[:200]))
    # a run cut off before it started (status "starting") has no start_time
    rows = [r for r in rows if r[2] is not None]
    overlap = [(a[0], b[0]) for i, a in enumerate(rows) for b in rows[i + 1:]
               if a[3] is not None and b[2] < a[3]]
    check('cron: no two runs of the cleanup job overlap (%d runs)' % len(rows), not overlap, overlap)
    schedule = query(leader, "SELECT schedule FROM cron.job WHERE jobname = 'idempotency-cleanup'", db='postgres')[0][0]
    m = re.match(r'(\d+) seconds?$', schedule)
    period = int(m.group(1)) if m else 60
    close = [(a[0], b[0]) for a, b in zip(rows, rows[1:]) if b[2] - a[2] < period / 2]
    check('cron: at most one run per scheduled time (%r): consecutive starts at least %g s apart'
          % (schedule, period / 2), not close, close)
    bad_fail = [r for r in all_rows if r[1] == 'failed' and r[4] != 'server restarted']
    check('cron: no run failed, but for runs cut off by an event ("server restarted")', not bad_fail, bad_fail)
    # pg_cron logs "cron job N starting: ..." on the node that runs it
    starts, wrong = {}, []
    for n in NODES:
        path = os.path.join(HA_DIR, n, 'log', 'postgresql.log')
        for line in open(path, errors='replace'):
            m = re.match(r'(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) UTC .*cron job \d+ starting', line)
            if not m:
                continue
            t = datetime.datetime.strptime(m.group(1), '%Y-%m-%d %H:%M:%S.%f').replace(
                tzinfo=datetime.timezone.utc).timestamp()
            starts[n] = starts.get(n, 0) + 1
            if not any(a - 1 <= t <= b + 1 and n == who for who, a, b in leaders):
                wrong.append('%s at %s' % (n, m.group(1)))
    check('cron: every job start in the server logs (%s) was on the node leading at that time'
          % ', '.join('%s: %d' % kv for kv in sorted(starts.items())), starts and not wrong, wrong)


def fmt_errors(errs):
    names = {'08001': 'cannot connect', '08006': 'connection lost', '57P01': 'admin shutdown',
             '25006': 'read-only transaction', '55000': 'stale fence', '40001': 'serialization'}
    return ', '.join('%s %s: %d on %d requests' % (code, names.get(code, ''), n, k)
                     for code, (n, k) in errs.items()) or 'none'


def report(figs, settings):
    lines = ['Measured by `test/integration/patroni_failover.sh` on %s (%d cores, shared with other work), %s.'
             % (datetime.date.today().isoformat(), os.cpu_count(), settings),
             '',
             '| event | no writable primary | requests/s before | during | after | requests that saw an error and retried | errors by SQLSTATE (count on requests) | the retry\'s claim / execute said |',
             '| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |']
    for f in figs:
        ev = ('failover: SIGKILL of leader %s (Patroni + postmaster), %s promoted' % (f['old'], f['new'])
              if f['phase'] == 'failover' else
              'switchover %s -> %s (`patronictl switchover`, %.1f s)' % (f['old'], f['new'], f['cmd']))
        lines.append('| %s | %.1f s (%s to first write) | %.0f | %.0f (%.1f s) | %.0f | %d of %d | %s | %s |'
                     % (ev, f['outage'], f['outage_from'], f['before'], f['during'], f['during_len'],
                        f['after'], f['retried'], f['requests'], fmt_errors(f['errors']),
                        ', '.join('%s %d' % kv for kv in f['retry_outcomes'].items()) or '-'))
    lines += ['',
              '"during" runs from the event to %d s after the first write on the new leader; "before" and "after" '
              'are the %d s on either side. Requests of all three kinds count.' % (SETTLE, WINDOW)]
    return '\n'.join(lines)


def main():
    global failures
    patronictl_list('start')
    old = role_of('leader')
    sync = role_of('sync_standby')
    check('start: leader %s, synchronous standby %s' % (old, sync), old and sync)
    if not (old and sync):
        return 1
    query(old, 'CREATE TABLE side_effects (id bigserial PRIMARY KEY, key text NOT NULL, fence bigint, '
               'client text NOT NULL, kind text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())')
    cfg = rest(old, '/config')
    settings = ('%d nodes, synchronous_mode %s, synchronous_mode_strict %s, ttl %s, loop_wait %s, '
                'retry_timeout %s, %d clients (%s), load average %.1f at the start'
                % (len(NODES), json.dumps(cfg.get('synchronous_mode')), json.dumps(cfg.get('synchronous_mode_strict')), cfg['ttl'],
                   cfg['loop_wait'], cfg['retry_timeout'], CLIENTS_PER_KIND * len(KINDS),
                   ', '.join('%d %s' % (CLIENTS_PER_KIND, k) for k in KINDS), os.getloadavg()[0]))
    log('# ' + settings)
    t0 = time.time()
    leaders = []     # (node, from, to): who led when, for the pg_cron check
    figs = []

    # ---- failover ---------------------------------------------------------
    held = ('held-failover', claim_held(old, 'held-failover'))

    def kill():
        pat = int(node_file(old, 'pid'))
        pm = int(open(os.path.join(HA_DIR, old, 'data', 'postmaster.pid')).readline())
        t = time.time()
        if proc_is(pat, 'patroni'):
            os.kill(pat, signal.SIGKILL)
        if proc_is(pm, 'postgres'):
            os.kill(pm, signal.SIGKILL)
        log('# killed leader %s: Patroni %d and postmaster %d (SIGKILL)' % (old, pat, pm))
        new = wait_for('a new leader', lambda: role_of('leader') if role_of('leader') not in (None, old) else None,
                       90, 0.2)
        return t, {'old': old, 'new': new or sync}
    clients, t_kill, t_first, info = run_load('failover', kill)
    new = info['new']
    check('failover: Patroni promoted the synchronous standby %s' % sync, new == sync, new)
    leaders.append((old, t0 - 3600, t_kill))
    patronictl_list('after the failover')
    figs.append(check_phase('failover', clients, t_kill, t_first, info, held))
    log('# failover figures: ' + json.dumps(figs[-1]))

    # ---- the old leader rejoins ----------------------------------------------
    lib('ha_start_patroni', old)
    ok = wait_for('3 members', healthy, 120)
    check('rejoin: %s is back as a replica (Patroni: one leader, one sync standby, all running)' % old, ok)
    patronictl_list('after the rejoin')
    converge(old)
    wait_cron('failover', t_first or t_kill)

    # ---- switchover -------------------------------------------------------
    lead, cand = role_of('leader'), role_of('sync_standby')
    held = ('held-switchover', claim_held(lead, 'held-switchover'))

    def switchover():
        t = time.time()
        r = subprocess.run(['patronictl', '-c', os.path.join(HA_DIR, NODES[0], 'patroni.yml'), 'switchover',
                            '--leader', lead, '--candidate', cand, '--force'],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        cmd = time.time() - t
        check('switchover: patronictl switchover --leader %s --candidate %s --force' % (lead, cand),
              r.returncode == 0 and 'Successfully switched over' in r.stdout, r.stdout)
        return t, {'old': lead, 'new': cand, 'cmd': cmd}
    clients, t_sw, t_first2, info = run_load('switchover', switchover)
    leaders.append((new, t_kill, t_sw + info['cmd']))
    leaders.append((cand, t_sw, time.time() + 3600))
    check('switchover: %s leads now' % cand, role_of('leader') == cand, role_of('leader'))
    ok = wait_for('state', healthy, 120)
    check('switchover: %s is back as a replica' % lead, ok)
    patronictl_list('after the switchover')
    figs.append(check_phase('switchover', clients, t_sw, t_first2, info, held))
    log('# switchover figures: ' + json.dumps(figs[-1]))
    converge(lead)
    wait_cron('switchover', t_first2 or t_sw)
    cron_final(leaders)

    text = report(figs, settings)
    log('')
    log('==================== Patroni HA figures ====================')
    for line in text.splitlines():
        log(line)
    log('=============================================================')
    with open(os.path.join(HA_DIR, 'figures.md'), 'w') as f:
        f.write(text + '\n')
    doc = os.environ.get('HA_DOC')
    if doc and failures == 0:
        s = open(doc).read()
        a, b = '<!-- figures: begin -->', '<!-- figures: end -->'
        if a in s and b in s:
            s = s[:s.index(a) + len(a)] + '\n' + text + '\n' + s[s.index(b):]
            open(doc, 'w').write(s)
            log('# figures written into %s' % doc)
    log('# %d checks failed; %.0f s' % (failures, time.time() - t0))
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
