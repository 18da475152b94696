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
 */
import type { Pool, PoolClient } from 'pg';
import { IdempotencyClient, Interval, OutboxEvent } from './client';

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
}

export class OutboxRelay {
  private readonly o: Required<Omit<RelayOptions, 'onError'>> & Pick<RelayOptions, 'onError'>;
  private readonly api: IdempotencyClient;
  private listener: PoolClient | null = null;
  private stopping = false;
  private wake: (() => void) | null = null;
  private notified = false;
  private loop: Promise<void> | null = null;
  private readonly onSignal = () => { void this.stop(); };
  published = 0;
  failed = 0;
  handedBack = 0;

  constructor(opts: RelayOptions) {
    this.o = { batch: 100, lease: 30000, pollMs: 1000, secondLookMs: 20, handleSignals: false, ...opts };
    this.api = new IdempotencyClient(opts.pool);
  }

  async start(): Promise<void> {
    if (this.loop) throw new Error('OutboxRelay: already started');
    this.listener = await this.o.pool.connect();
    this.listener.on('notification', () => this.poke());
    await this.listener.query('LISTEN idempotency_outbox');
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
        await l.query('UNLISTEN idempotency_outbox').catch(() => {});
        l.release();
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
