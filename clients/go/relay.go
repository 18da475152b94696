// relay.go: an outbox relay (doc/reference.md, "Waking relays" and
// "Stale relays"; doc/clients.md, "The relay").  It LISTENs on
// idempotency_outbox with lib/pq's Listener (a connection of its own, to
// Relay.DSN), claims batches with
// claim_events (each call its own READ COMMITTED transaction on the
// *sql.DB), publishes each event in id order through the user's
// Publisher and marks the batch under its lease token.  After a failed
// event the later events of its aggregate are not published in this
// batch, so they never overtake it.  When its context ends (SIGTERM or
// SIGINT with RunUntilSignal) it finishes the event in hand and hands the
// rest of the batch back with mark_failed(..., "relay stopped").  A
// database error is retried with exponential backoff.
//
// Behind a transaction pooler a LISTEN runs on whichever server connection
// the pooler lends it and a notification reaches that connection when it
// serves another client, or none (PgBouncer drops it): the relay is never
// woken.  So once LISTENing, the relay LISTENs on a channel of its own too,
// notifies it from another connection (its DB: a notification from its own
// session would come back to it through the pooler as well) and waits up
// to probeWait for it; when it does not come the relay logs so, once, and
// polls at its interval.

package pgidempotency

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lib/pq"
)

// Channel is the channel producers' commits notify.
const Channel = "idempotency_outbox"

// secondLook is twice idempotency.outbox_notify_interval (10 ms).
const secondLook = 20 * time.Millisecond

// probeWait is how long the relay waits for its own notification.
const probeWait = 2 * time.Second

// Publisher sends one event to the broker; an error fails the event (the
// extension retries it later with backoff).
type Publisher interface {
	Publish(ctx context.Context, e OutboxEvent) error
}

// PublisherFunc adapts a function to Publisher.
type PublisherFunc func(ctx context.Context, e OutboxEvent) error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, e OutboxEvent) error { return f(ctx, e) }

// Relay is one relay worker; several may run at once, on any hosts.
type Relay struct {
	DB *sql.DB // claims and marks
	// DSN is the LISTEN connection's (lib/pq's Listener; "": the PG*
	// variables). Behind a transaction pooler give it a direct or
	// session-mode address: through the pooler notifications do not
	// arrive, and the relay says so once and polls every Poll.
	DSN       string
	Publisher Publisher     // the user's sink
	Batch     int           // claim_events' batch (default 100)
	Lease     time.Duration // claim_events' lease (default 30s)
	Poll      time.Duration // the idle timer (default 1s)
	// MaxBackoff is the longest wait after a database error (default 30s).
	MaxBackoff time.Duration
	Logf       func(format string, args ...any) // default log.Printf

	published, failed atomic.Int64
	probed            atomic.Bool // the notification probe ran
}

// Published and Failed count the events marked so far.
func (r *Relay) Published() int64 { return r.published.Load() }

// Failed counts the events marked failed (not the hand-backs).
func (r *Relay) Failed() int64 { return r.failed.Load() }

func (r *Relay) defaults() {
	if r.Batch == 0 {
		r.Batch = 100
	}
	if r.Lease == 0 {
		r.Lease = 30 * time.Second
	}
	if r.Poll == 0 {
		r.Poll = time.Second
	}
	if r.MaxBackoff == 0 {
		r.MaxBackoff = 30 * time.Second
	}
	if r.Logf == nil {
		r.Logf = log.Printf
	}
}

// RunUntilSignal runs the relay until SIGTERM or SIGINT (or ctx ends).
func (r *Relay) RunUntilSignal(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	return r.Run(ctx)
}

// Run runs the relay until ctx ends; it then returns nil once the event
// in hand is published and the rest of its batch handed back.
func (r *Relay) Run(ctx context.Context) error {
	r.defaults()
	if r.Publisher == nil || r.DB == nil {
		return errors.New("pgidempotency: Relay needs DB and Publisher")
	}
	listener := pq.NewListener(r.DSN, 100*time.Millisecond, r.MaxBackoff, func(ev pq.ListenerEventType, err error) {
		if err != nil {
			r.Logf("pgidempotency relay: listener: %v", err)
		}
	})
	defer listener.Close()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if err := listener.Listen(Channel); err == nil || errors.Is(err, pq.ErrChannelAlreadyOpen) {
			break
		} else {
			r.Logf("pgidempotency relay: LISTEN: %v; retrying in %v", err, backoff)
			backoff = r.sleep(ctx, backoff)
		}
	}
	if ctx.Err() == nil && !r.probed.Swap(true) {
		r.probe(ctx, listener)
	}
	backoff = 100 * time.Millisecond
	for ctx.Err() == nil {
		err := r.cycle(ctx, listener)
		if err == nil || ctx.Err() != nil {
			backoff = 100 * time.Millisecond
			continue
		}
		r.Logf("pgidempotency relay: %v; retrying in %v", err, backoff)
		backoff = r.sleep(ctx, backoff)
	}
	return nil
}

// probe checks that a notification reaches the listener (see the top of
// this file) and says once when none does.
func (r *Relay) probe(ctx context.Context, l *pq.Listener) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	channel := "idempotency_relay_" + hex.EncodeToString(b)
	arrived := false
	if err := l.Listen(channel); err != nil {
		r.Logf("pgidempotency relay: LISTEN %s: %v", channel, err)
		return
	}
	defer func() { _ = l.Unlisten(channel) }()
	if err := On(r.DB).notify(ctx, channel); err != nil {
		r.Logf("pgidempotency relay: pg_notify: %v", err)
		return
	}
	t := time.NewTimer(probeWait)
	defer t.Stop()
	for !arrived {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Logf("pgidempotency relay: notifications do not reach this connection (a transaction pooler?); "+
				"polling every %v; give the relay a direct or session-mode connection for LISTEN", r.Poll)
			return
		case n := <-l.Notify:
			// an outbox notification meanwhile is no loss: the first cycle claims anyway
			arrived = n != nil && n.Channel == channel
		}
	}
}

func (r *Relay) sleep(ctx context.Context, d time.Duration) time.Duration {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	if d *= 2; d > r.MaxBackoff {
		d = r.MaxBackoff
	}
	return d
}

// cycle is one turn of the wake-up rule: claim until nothing is left,
// look again twice the notify interval later while commits are quiet,
// then wait for a notification or the poll timer.
func (r *Relay) cycle(ctx context.Context, l *pq.Listener) error {
	for {
		n, err := r.RunOnce(ctx)
		if err != nil {
			return err
		}
		if n == 0 || ctx.Err() != nil {
			break
		}
	}
	for ctx.Err() == nil {
		time.Sleep(secondLook)
		quiet, err := On(r.DB).OutboxQuietCommits(ctx)
		if err != nil {
			return err
		}
		n, err := r.RunOnce(ctx)
		if err != nil || n > 0 {
			return err
		}
		if quiet == 0 {
			break
		}
	}
	t := time.NewTimer(r.Poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-l.Notify: // a notification, or nil after the listener reconnected
	}
	// drain what else came meanwhile: the claims that follow read it all
	for {
		select {
		case <-l.Notify:
		default:
			return nil
		}
	}
}

// RunOnce claims one batch, publishes it and marks it; returns how many
// events it claimed. Once ctx ends, the events not yet published are
// handed back.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	r.defaults()
	events, err := On(r.DB).ClaimEvents(ctx, r.Batch, r.Lease)
	if err != nil || len(events) == 0 {
		if ctx.Err() != nil {
			return 0, nil
		}
		return 0, err
	}
	// the event in hand is finished and the marks sent after ctx ends
	work, cancel := context.WithTimeout(context.Background(), r.Lease)
	defer cancel()
	token := events[0].LeaseToken
	var done, failed, left []int64
	stopped := map[[2]string]bool{}
	reason := "error"
	for _, e := range events {
		agg := [2]string{e.AggregateType, e.AggregateID}
		switch {
		case ctx.Err() != nil:
			left = append(left, e.ID)
		case stopped[agg]:
			// stays leased until the lease runs out: never overtakes the failed one
		default:
			if err := r.Publisher.Publish(work, e); err != nil {
				failed = append(failed, e.ID)
				stopped[agg] = true
				reason = err.Error()
			} else {
				done = append(done, e.ID)
			}
		}
	}
	q := On(r.DB)
	if len(done) > 0 {
		n, err := q.MarkPublished(work, done, token)
		if err != nil {
			return len(events), fmt.Errorf("mark_published: %w", err)
		}
		r.published.Add(int64(n))
	}
	if len(failed) > 0 {
		n, err := q.MarkFailed(work, failed, reason, token)
		if err != nil {
			return len(events), fmt.Errorf("mark_failed: %w", err)
		}
		r.failed.Add(int64(n))
	}
	if len(left) > 0 {
		if _, err := q.MarkFailed(work, left, "relay stopped", token); err != nil {
			return len(events), fmt.Errorf("mark_failed (hand-back): %w", err)
		}
	}
	return len(events), nil
}
