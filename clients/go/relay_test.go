package pgidempotency

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// sinkPublisher delivers into go_sink through the inbox (process_once),
// so a redelivery after a relay died is received once; go_attempts
// counts every delivery.
func sinkPublisher(db *sql.DB, delay time.Duration) Publisher {
	c := &Client{Queries: On(db), DB: db}
	return PublisherFunc(func(ctx context.Context, e OutboxEvent) error {
		time.Sleep(delay)
		if _, err := db.ExecContext(ctx, "INSERT INTO go_attempts VALUES ($1)", e.ID); err != nil {
			return err
		}
		_, err := c.ProcessOnce(ctx, "go-sink", strconv.FormatInt(e.ID, 10), func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO go_sink (event_id, aggregate) VALUES ($1, $2)",
				e.ID, e.AggregateType+"/"+e.AggregateID)
			return err
		})
		return err
	})
}

// relayHelper is the relay of another process (PGIDEM_RELAY_HELPER=1):
// it runs until SIGTERM, or until the test kills it.
func relayHelper() int {
	db, err := open("")
	if err != nil {
		return 1
	}
	delay, _ := time.ParseDuration(os.Getenv("PGIDEM_RELAY_DELAY"))
	r := &Relay{DB: db, DSN: listenDSN, Publisher: sinkPublisher(db, delay), Batch: 20, Lease: time.Minute,
		Poll: 200 * time.Millisecond}
	if err := r.RunUntilSignal(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("published %d\n", r.Published())
	return 0
}

// listenDSN is the relays' LISTEN connection: a direct one when the
// tests' connections go through a transaction pooler.
var listenDSN = os.Getenv("PGIDEM_LISTEN_DSN")

// probeLines counts the relay's line that notifications do not arrive.
type probeLines struct {
	t *testing.T
	n atomic.Int64
}

func (p *probeLines) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if strings.Contains(line, "notifications do not reach this connection") {
		p.n.Add(1)
	}
	p.t.Log(line)
}

func setupSink(t *testing.T) {
	drainOutbox(t)
	sqlExec(t, `DROP TABLE IF EXISTS go_sink, go_attempts;
	 CREATE TABLE go_sink (seq bigserial, event_id bigint PRIMARY KEY, aggregate text);
	 CREATE TABLE go_attempts (event_id bigint)`)
}

// enqueue writes n events over aggs aggregates, each in its own commit.
func enqueue(t *testing.T, n, aggs int) {
	for i := 0; i < n; i++ {
		if _, err := On(testDB).EnqueueEvent(ctxT(t), Event{"go", strconv.Itoa(i % aggs), "e", map[string]int{"i": i}, nil}); err != nil {
			t.Fatal(err)
		}
	}
}

func count(t *testing.T, query string) int {
	var n int
	if err := testDB.QueryRow(query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkOnceInOrder: every event received once, each aggregate's in id order.
func checkOnceInOrder(t *testing.T, n int) {
	t.Helper()
	if got := count(t, "SELECT count(DISTINCT event_id) FROM go_sink"); got != n {
		t.Fatalf("%d of %d events received", got, n)
	}
	if bad := count(t, `SELECT count(*) FROM (SELECT event_id, lag(event_id) OVER (PARTITION BY aggregate ORDER BY seq) AS prev
	 FROM go_sink) s WHERE prev > event_id`); bad != 0 {
		t.Fatalf("%d events out of order", bad)
	}
	if pending := count(t, "SELECT count(*) FROM idempotency.outbox_events WHERE published_at IS NULL"); pending != 0 {
		t.Fatalf("%d events pending", pending)
	}
}

func runRelay(t *testing.T, r *Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func TestRelayWakesAndPublishesInOrder(t *testing.T) {
	setupSink(t)
	lines := &probeLines{t: t}
	r := &Relay{DB: testDB, DSN: listenDSN, Publisher: sinkPublisher(testDB, 0), Batch: 7, Poll: 10 * time.Second,
		Logf: lines.logf}
	stop := runRelay(t, r)
	time.Sleep(100 * time.Millisecond) // idle: only a notification wakes it before the 10 s poll
	start := time.Now()
	enqueue(t, 30, 3)
	waitFor(t, "30 events", 5*time.Second, func() bool { return count(t, "SELECT count(*) FROM go_sink") == 30 })
	if d := time.Since(start); d > 8*time.Second { // the poll timer is 10 s
		t.Fatalf("woken after %v", d)
	}
	stop()
	checkOnceInOrder(t, 30)
	if lines.n.Load() != 0 {
		t.Fatal("the relay says that notifications do not arrive on its LISTEN connection, which has them")
	}
}

// Through a transaction pooler, without a LISTEN connection of its own:
// the relay says once (a second Run of it too) that notifications do not
// arrive, and polling delivers every event once, each aggregate's in
// order.  On a direct connection it says nothing.
func TestRelayWithoutNotificationsPolls(t *testing.T) {
	setupSink(t)
	lines := &probeLines{t: t}
	r := &Relay{DB: testDB, Publisher: sinkPublisher(testDB, 0), Batch: 7, Poll: 300 * time.Millisecond,
		Logf: lines.logf}
	for run, n := range []int{30, 60} {
		stop := runRelay(t, r)
		enqueue(t, 30, 3)
		waitFor(t, fmt.Sprintf("%d events", n), 20*time.Second, func() bool {
			return count(t, "SELECT count(*) FROM go_sink") == n
		})
		stop()
		checkOnceInOrder(t, n)
		want := int64(0)
		if behindPooler {
			want = 1
		}
		if got := lines.n.Load(); got != want {
			t.Fatalf("run %d: the relay said %d times that notifications do not arrive, not %d", run+1, got, want)
		}
	}
}

func TestRelayFailureHoldsBackItsAggregate(t *testing.T) {
	setupSink(t)
	enqueue(t, 6, 2) // aggregates 0: events 0 2 4, 1: 1 3 5
	var first int64
	testDB.QueryRow("SELECT min(id) FROM idempotency.outbox_events").Scan(&first)
	sink := sinkPublisher(testDB, 0)
	r := &Relay{DB: testDB, Batch: 10, Publisher: PublisherFunc(func(ctx context.Context, e OutboxEvent) error {
		if e.ID == first+2 {
			return errors.New("broker said no")
		}
		return sink.Publish(ctx, e)
	})}
	n, err := r.RunOnce(ctxT(t))
	if err != nil || n != 6 {
		t.Fatalf("run once: %d %v", n, err)
	}
	var got string
	testDB.QueryRow("SELECT string_agg((event_id - $1)::text, ',' ORDER BY seq) FROM go_sink", first).Scan(&got)
	if got != "0,1,3,5" || r.Published() != 4 || r.Failed() != 1 {
		t.Fatalf("published %s (%d, %d failed): event 4 must wait for event 2 of its aggregate", got, r.Published(), r.Failed())
	}
}

// helper starts the relay of another process.
func helper(t *testing.T, delay string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PGIDEM_RELAY_HELPER=1", "PGIDEM_RELAY_DELAY="+delay)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func TestRelayKilledMidBatchSecondFinishes(t *testing.T) {
	setupSink(t)
	enqueue(t, 40, 4)
	// the helper's batch has a minute's lease; after the kill it is cut
	// short below, as if the lease had run out
	cmd := helper(t, "40ms")
	waitFor(t, "the first relay's deliveries", 15*time.Second, func() bool { return count(t, "SELECT count(*) FROM go_sink") >= 5 })
	_ = cmd.Process.Kill() // SIGKILL mid-batch: no hand-back, no marks
	_ = cmd.Wait()
	before := count(t, "SELECT count(*) FROM go_sink")
	unmarked := before - count(t, "SELECT count(*) FROM idempotency.outbox_events WHERE published_at IS NOT NULL")
	sqlExec(t, "UPDATE idempotency.outbox_events SET locked_until = now() WHERE published_at IS NULL AND locked_until > now()")
	r := &Relay{DB: testDB, DSN: listenDSN, Publisher: sinkPublisher(testDB, 0), Batch: 20, Poll: 100 * time.Millisecond}
	stop := runRelay(t, r)
	waitFor(t, "all 40 events", 20*time.Second, func() bool { return count(t, "SELECT count(*) FROM go_sink") == 40 })
	stop()
	checkOnceInOrder(t, 40)
	redelivered := count(t, "SELECT count(*) - count(DISTINCT event_id) FROM go_attempts")
	t.Logf("first relay delivered %d before SIGKILL, %d of them unmarked; %d deliveries again (received once)",
		before, unmarked, redelivered)
	if redelivered < unmarked {
		t.Fatal("the killed relay's unmarked deliveries were not redelivered")
	}
	if unmarked == 0 {
		t.Log("the kill came between two batches (a slow machine): nothing was left unmarked")
	}
}

func TestRelaySIGTERMHandsBack(t *testing.T) {
	setupSink(t)
	enqueue(t, 20, 2)
	cmd := helper(t, "40ms")
	waitFor(t, "the first relay's deliveries", 15*time.Second, func() bool { return count(t, "SELECT count(*) FROM go_sink") >= 3 })
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("relay after SIGTERM: %v", err)
	}
	got := count(t, "SELECT count(*) FROM go_sink")
	if marked := count(t, "SELECT count(*) FROM idempotency.outbox_events WHERE published_at IS NOT NULL"); marked != got {
		t.Fatalf("%d delivered, %d marked: the event in hand was not finished", got, marked)
	}
	if leased := count(t, "SELECT count(*) FROM idempotency.outbox_events WHERE published_at IS NULL AND locked_until > now()"); leased != 0 {
		t.Fatalf("%d events still leased after the hand-back", leased)
	}
	// the rest go out at once, without waiting for the minute's lease (retry backoff aside)
	sqlExec(t, "UPDATE idempotency.outbox_events SET next_attempt_at = now() WHERE published_at IS NULL")
	r := &Relay{DB: testDB, DSN: listenDSN, Publisher: sinkPublisher(testDB, 0), Poll: 100 * time.Millisecond}
	stop := runRelay(t, r)
	waitFor(t, "all 20 events", 10*time.Second, func() bool { return count(t, "SELECT count(*) FROM go_sink") == 20 })
	stop()
	checkOnceInOrder(t, 20)
	if again := count(t, "SELECT count(*) - count(DISTINCT event_id) FROM go_attempts"); again != 0 {
		t.Fatalf("%d deliveries again after a clean stop", again)
	}
}
