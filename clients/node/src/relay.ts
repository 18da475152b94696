/*
 * relay.ts: OutboxRelay, a relay for the outbox (doc/reference.md, "Outbox
 * and inbox"): it LISTENs on idempotency_outbox on a connection of its own,
 * claims batches with claim_events on the pool, publishes each event in
 * order, and marks it with the batch's lease token (mark_published, or
 * mark_failed: the extension's backoff decides the next try). After a
 * failure the later events of the same aggregate stay leased, so they never
 * overtake it. It follows "Waking relays": claim until empty, look again
 * after secondLookMs while quiet commits are in flight, then wait for a
 * notification or the poll timer. stop() (and, with handleSignals, SIGTERM
 * and SIGINT) ends the loop after the event being published, and hands the
 * lease of the batch's unpublished events back with mark_failed (which
 * counts an attempt: the next relay gets them after the first backoff).
 *
 * Behind a transaction pooler (PgBouncer in transaction mode, RDS Proxy,
 * Supavisor) notifications do not reach a LISTEN: listenUrl names a direct
 * or session-mode address for the listener (claims and marks stay on the
 * pool). Each listener is probed: it LISTENs on a channel of its own too,
 * and pg_notify is sent there; when that does not arrive within 2 s, the
 * relay says so once in its log and polls every pollMs.
 */
import { randomBytes } from 'node:crypto';
import { Client } from 'pg';
import type { ClientBase, Notification, Pool } from 'pg';
import { IdempotencyClient, Interval, OutboxEvent } from './client';

const PROBE_WAIT_MS = 2000;

/** The line a relay logs once where notifications do not reach its listener. */
export const relayPollingLine = (pollMs: number): string =>
  `notifications do not reach this connection (a transaction pooler?); polling every ${pollMs / 1000}s; ` +
  'give the relay a direct or session-mode connection for LISTEN';

export interface RelayOptions {
  pool: Pool;
  /** Publishes one event; throw to have it retried later. */
  publish: (event: OutboxEvent) => Promise<void>;
  batch?: number;
  lease?: Interval;
  pollMs?: number;
  secondLookMs?: number;
  /** stop() on SIGTERM and SIGINT (default false). */
  handleSignals?: boolean;
  onError?: (err: unknown) => void;
  /**
   * Where to LISTEN when the pool reaches the database through a
   * transaction pooler: a direct or session-mode connection string.
   * Default: a client of the pool.
   */
  listenUrl?: string;
  /** Where the relay says that notifications do not arrive (default console.warn). */
  log?: (line: string) => void;
}

interface Listener {
  client: ClientBase;
  close: (err?: Error) => Promise<void>;
}

export class OutboxRelay {
  private readonly o: Required<Omit<RelayOptions, 'onError' | 'listenUrl'>> & Pick<RelayOptions, 'onError' | 'listenUrl'>;
  private readonly api: IdempotencyClient;
  private listener: Listener | null = null;
  private saidPolling = false;
  private listenAgainAt = 0;
  private stopping = false;
  private wake: (() => void) | null = null;
  private notified = false;
  private loop: Promise<void> | null = null;
  private readonly onSignal = () => { void this.stop(); };
  published = 0;
  failed = 0;
  handedBack = 0;
  /** Whether notifications reach the listener (else the relay polls every pollMs). */
  listening = false;

  constructor(opts: RelayOptions) {
    this.o = {
      batch: 100, lease: 30000, pollMs: 1000, secondLookMs: 20, handleSignals: false,
      log: (line) => console.warn(line), ...opts,
    };
    this.api = new IdempotencyClient(opts.pool);
  }

  async start(): Promise<void> {
    if (this.loop) throw new Error('OutboxRelay: already started');
    await this.listen();
    if (this.o.handleSignals) {
      process.on('SIGTERM', this.onSignal);
      process.on('SIGINT', this.onSignal);
    }
    this.loop = this.run();
  }

  /** Ends the loop; resolves when the relay has handed its lease back and closed its listener. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.poke();
    if (this.o.handleSignals) {
      process.off('SIGTERM', this.onSignal);
      process.off('SIGINT', this.onSignal);
    }
    await this.loop;
  }

  /** A listener on listenUrl or a client of the pool: LISTEN, then the probe. */
  private async listen(): Promise<void> {
    let listener: Listener;
    if (this.o.listenUrl) {
      const client = new Client({ connectionString: this.o.listenUrl });
      listener = { client, close: async () => { await client.end(); } };
      client.on('error', (err) => this.lost(listener, err));
      await client.connect();
    } else {
      const client = await this.o.pool.connect();
      listener = { client, close: async (err) => { client.release(err ?? true); } };
      client.on('error', (err) => this.lost(listener, err));
    }
    try {
      const channel = `idempotency_relay_${randomBytes(8).toString('hex')}`;
      let heard = (): void => {};
      const arrived = new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), PROBE_WAIT_MS);
        heard = () => { clearTimeout(timer); resolve(true); };
      });
      listener.client.on('notification', (n: Notification) => (n.channel === channel ? heard() : this.poke()));
      await listener.client.query('LISTEN idempotency_outbox');
      await listener.client.query(`LISTEN ${channel}`);
      // The probe is sent from another client of the pool: through a
      // transaction pooler the listener's next statement may run on the
      // very server connection that LISTENs, and a session's own
      // notification reaches it with the statement's answer, proving nothing.
      await this.o.pool.query("SELECT pg_notify($1, '')", [channel]);
      this.listening = await arrived;
      // where notifications do not arrive, nothing stays listening: a pooled
      // server connection would pass them to the other clients it serves
      await listener.client.query(this.listening ? `UNLISTEN ${channel}` : 'UNLISTEN *');
    } catch (err) {
      await listener.close(err as Error).catch(() => {});
      throw err;
    }
    this.listener = listener;
    if (!this.listening && !this.saidPolling) {
      this.saidPolling = true;
      this.o.log(relayPollingLine(this.o.pollMs));
    }
  }

  /** The listener's connection failed: the loop polls, and listens again at its next turn. */
  private lost(listener: Listener, err: Error): void {
    if (this.listener !== listener) return;
    this.listener = null;
    this.listening = false;
    void listener.close(err).catch(() => {});
    if (this.o.onError) this.o.onError(err);
  }

  private poke(): void {
    this.notified = true;
    if (this.wake) this.wake();
  }

  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wake = done;
    });
  }

  private async run(): Promise<void> {
    let looking = false;
    try {
      while (!this.stopping) {
        this.notified = false;
        try {
          if (!this.listener && Date.now() >= this.listenAgainAt) {
            // a lost listener is replaced at most once a poll; meanwhile the loop polls
            this.listenAgainAt = Date.now() + this.o.pollMs;
            await this.listen().catch((err) => { if (this.o.onError) this.o.onError(err); });
          }
          const quiet: number = looking ? await this.api.outboxQuietCommits() : 0;
          const events = await this.api.claimEvents({ batch: this.o.batch, lease: this.o.lease });
          if (events.length) {
            looking = false;
            await this.publishBatch(events);
            continue;
          }
          const lookAgain: boolean = !looking || quiet > 0;
          if (!this.notified) await this.sleep(lookAgain ? this.o.secondLookMs : this.o.pollMs);
          looking = lookAgain && !this.notified;
        } catch (err) {
          if (this.o.onError) this.o.onError(err);
          if (!this.stopping) await this.sleep(this.o.pollMs);
        }
      }
    } finally {
      const l = this.listener;
      this.listener = null;
      if (l) {
        await l.client.query('UNLISTEN *').catch(() => {});
        await l.close().catch(() => {});
      }
    }
  }

  /** Publishes a batch in order; see the header for failures and stop(). */
  private async publishBatch(events: OutboxEvent[]): Promise<void> {
    const token = events[0].leaseToken;
    const blocked = new Set<string>();
    const handBack: string[] = [];
    for (const e of events) {
      const aggregate = JSON.stringify([e.aggregateType, e.aggregateId]);
      if (this.stopping) { handBack.push(e.id); continue; }
      if (blocked.has(aggregate)) continue;
      try {
        await this.o.publish(e);
      } catch (err) {
        blocked.add(aggregate);
        this.failed += await this.api.markFailed([e.id], String((err as Error)?.message ?? err), token);
        continue;
      }
      this.published += await this.api.markPublished([e.id], token);
    }
    if (handBack.length) {
      this.handedBack += await this.api.markFailed(handBack, 'relay stopped before publishing', token);
    }
  }
}
