package pgidempotency

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func client(t *testing.T) *Client {
	t.Helper()
	c, err := NewClient(ctxT(t), testDB)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestVersionChecked(t *testing.T) {
	c := client(t)
	if versionLess(c.Version, MinVersion) {
		t.Fatalf("version %s", c.Version)
	}
	if !versionLess("1.2", "1.3") || versionLess("1.10", "1.3") || versionLess("1.3", "1.3") {
		t.Fatal("versionLess")
	}
	// a database without the extension
	other, err := open("dbname=postgres")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := NewClient(ctxT(t), other); !errors.Is(err, ErrVersion) {
		t.Fatalf("no extension: %v", err)
	}
}

func TestClaimCompleteReplayAndLeaseLost(t *testing.T) {
	c, ctx, key := client(t), ctxT(t), newKey(t)
	req := map[string]any{"amount": 5}
	r, err := c.Claim(ctx, key, req, ClaimOptions{Scope: "tenant-1", TTL: 24 * time.Hour, Lease: 30 * time.Second})
	if err != nil || r.Outcome != "claimed" || !r.Holds() || r.Fence == 0 {
		t.Fatalf("claim: %+v %v", r, err)
	}
	dup, err := c.Claim(ctx, key, req, ClaimOptions{Scope: "tenant-1"})
	if err != nil || dup.Outcome != "in_progress" || dup.RetryAfterSeconds() < 29 || dup.RetryAfterSeconds() > 30 {
		t.Fatalf("in_progress: %+v %v", dup, err)
	}
	if m, _ := c.Claim(ctx, key, map[string]any{"amount": 6}, ClaimOptions{Scope: "tenant-1"}); m.Outcome != "mismatch" {
		t.Fatalf("mismatch: %+v", m)
	}
	err = c.Complete(ctx, key, r.Fence+1000, map[string]any{"body": "x"}, 201, CompleteOptions{Scope: "tenant-1"})
	var e *Error
	if !errors.Is(err, ErrLeaseLost) || !errors.As(err, &e) || e.Code != "55000" || SQLState(err) != "55000" {
		t.Fatalf("lease lost: %v", err)
	}
	if err := c.Checkpoint(ctx, key, r.Fence, "charged", 0, "tenant-1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx, key, r.Fence, map[string]any{"paid": 5}, 201, CompleteOptions{Scope: "tenant-1", TTL: 48 * time.Hour, ResponseTTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Claim(ctx, key, req, ClaimOptions{Scope: "tenant-1"})
	if err != nil || rep.Outcome != "replay" || rep.ResponseCode != 201 || string(rep.ResponseBody) != `{"paid": 5}` {
		t.Fatalf("replay: %+v %v", rep, err)
	}
	row, err := c.Lookup(ctx, key, "tenant-1")
	if err != nil || row["status"] != "completed" || row["recovery_point"] != "charged" {
		t.Fatalf("lookup: %v %v", row, err)
	}
	exp, err := c.KeyExpiry(ctx, key, "tenant-1")
	if err != nil || exp == nil || exp.ResponseExpiresAt == nil ||
		time.Until(exp.ExpiresAt) < 47*time.Hour || time.Until(*exp.ResponseExpiresAt) > time.Hour+time.Second {
		t.Fatalf("expiry: %+v %v", exp, err)
	}
	if row, err := c.Lookup(ctx, "absent-"+key, ""); row != nil || err != nil {
		t.Fatalf("absent: %v %v", row, err)
	}
	if exp, err := c.KeyExpiry(ctx, "absent-"+key, ""); exp != nil || err != nil {
		t.Fatalf("absent expiry: %v %v", exp, err)
	}
}

func TestFailRetryableResumesAndRelease(t *testing.T) {
	c, ctx, key := client(t), ctxT(t), newKey(t)
	r, _ := c.Claim(ctx, key, "{}", ClaimOptions{})
	if err := c.Fail(ctx, key, r.Fence, map[string]string{"body": "upstream timeout"}, 503, true, FailOptions{}); err != nil {
		t.Fatal(err)
	}
	r2, err := c.Claim(ctx, key, "{}", ClaimOptions{})
	if err != nil || r2.Outcome != "resumed" || r2.Attempts != 2 {
		t.Fatalf("resumed: %+v %v", r2, err)
	}
	if err := c.Release(ctx, key, r2.Fence, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.Fail(ctx, key, r2.Fence, nil, 500, false, FailOptions{TTL: time.Hour}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("after release: %v", err)
	}
	// a final failure with response_ttl is fine; with retryable the server refuses it (22023)
	r3, _ := c.Claim(ctx, key, "{}", ClaimOptions{})
	if err := c.Fail(ctx, key, r3.Fence, nil, 500, true, FailOptions{ResponseTTL: time.Hour}); !errors.Is(err, ErrInvalidParameter) {
		t.Fatalf("retryable with response_ttl: %v", err)
	}
}

func TestExecute(t *testing.T) {
	c, ctx, key := client(t), ctxT(t), newKey(t)
	sqlExec(t, "CREATE TABLE IF NOT EXISTS go_exec (k text, n int)")
	stmt := "INSERT INTO go_exec VALUES ($1, $2::int) RETURNING n"
	for i := 0; i < 2; i++ {
		r, err := c.Execute(ctx, key, map[string]int{"n": 7}, stmt, []string{key, "7"}, ExecuteOptions{ResponseTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"claimed", "replay"}[i]; r.Outcome != want {
			t.Fatalf("execute %d: %+v", i, r)
		}
		if i == 1 && !strings.Contains(string(r.ResponseBody), "7") {
			t.Fatalf("the replay has not the statement's result: %s", r.ResponseBody)
		}
	}
	var n int
	testDB.QueryRow("SELECT count(*) FROM go_exec WHERE k = $1", key).Scan(&n)
	if n != 1 {
		t.Fatalf("%d rows", n)
	}
}

func TestTokensAndTransition(t *testing.T) {
	c, ctx := client(t), ctxT(t)
	tok, err := c.IssueToken(ctx, "form", time.Hour)
	if err != nil || len(tok) != 36 {
		t.Fatalf("token %q %v", tok, err)
	}
	first, err1 := c.ConsumeToken(ctx, tok, "form")
	again, err2 := c.ConsumeToken(ctx, tok, "form")
	if !first || again || err1 != nil || err2 != nil {
		t.Fatalf("consume: %v %v %v %v", first, again, err1, err2)
	}
	sqlExec(t, "CREATE TABLE IF NOT EXISTS go_orders (id text PRIMARY KEY, state text, paid_at text)")
	id := newKey(t)
	sqlExec(t, "INSERT INTO go_orders VALUES ($1, 'new')", id)
	r, err := c.Transition(ctx, "go_orders", "id", id, "state", "new", "paid", map[string]any{"paid_at": "now"})
	if err != nil || r.Outcome != "applied" {
		t.Fatalf("applied: %+v %v", r, err)
	}
	r, _ = c.Transition(ctx, "go_orders", "id", id, "state", "new", "paid", nil)
	if r.Outcome != "already" || r.CurrentState != "paid" {
		t.Fatalf("already: %+v", r)
	}
	r, _ = c.Transition(ctx, "go_orders", "id", id, "state", "new", "shipped", nil)
	if r.Outcome != "rejected" || r.CurrentState != "paid" {
		t.Fatalf("rejected: %+v", r)
	}
	r, _ = c.Transition(ctx, "go_orders", "id", "absent", "state", "new", "paid", nil)
	if r.Outcome != "not_found" {
		t.Fatalf("not_found: %+v", r)
	}
}

func TestInboxProcessOnce(t *testing.T) {
	c, ctx := client(t), ctxT(t)
	sqlExec(t, "CREATE TABLE IF NOT EXISTS go_effects (event_id text)")
	id := newKey(t)
	boom := errors.New("boom")
	ran, err := c.ProcessOnce(ctx, "billing", id, func(tx *sql.Tx) error {
		if _, err := tx.Exec("INSERT INTO go_effects VALUES ($1)", id); err != nil {
			return err
		}
		return boom
	})
	if ran || !errors.Is(err, boom) {
		t.Fatalf("failing: %v %v", ran, err)
	}
	for i, want := range []bool{true, false} {
		ran, err := c.ProcessOnce(ctx, "billing", id, func(tx *sql.Tx) error {
			_, err := tx.Exec("INSERT INTO go_effects VALUES ($1)", id)
			return err
		})
		if err != nil || ran != want {
			t.Fatalf("try %d: %v %v", i, ran, err)
		}
	}
	var n int
	testDB.QueryRow("SELECT count(*) FROM go_effects WHERE event_id = $1", id).Scan(&n)
	if n != 1 {
		t.Fatalf("%d effects", n)
	}
	fresh, err := c.MarkProcessedBatch(ctx, "billing", []string{id, id + "b", id + "b", id + "c"})
	if err != nil || strings.Join(fresh, ",") != id+"b,"+id+"c" {
		t.Fatalf("batch: %v %v", fresh, err)
	}
}

func TestOutboxCalls(t *testing.T) {
	c, ctx := client(t), ctxT(t)
	drainOutbox(t)
	tx, err := testDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := On(tx).EnqueueEvent(ctx, Event{"order", "7", "created", map[string]int{"amount": 5}, nil})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := On(tx).EnqueueEvents(ctx, []Event{
		{"order", "7", "paid", json.RawMessage(`{"x": 1}`), map[string]string{"trace": "t"}},
		{"order", "8", "created", nil, nil}})
	if err != nil || len(ids) != 2 || ids[0] <= id || ids[1] <= ids[0] {
		t.Fatalf("enqueue_events: %v %v", ids, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	events, err := c.ClaimEvents(ctx, 10, 30*time.Second)
	if err != nil || len(events) != 3 || events[0].ID != id || string(events[1].Headers) != `{"trace": "t"}` ||
		events[0].Headers != nil || events[2].AggregateID != "8" {
		t.Fatalf("claim_events: %+v %v", events, err)
	}
	tok := events[0].LeaseToken
	if n, err := c.MarkPublished(ctx, []int64{events[0].ID, events[1].ID}, tok+1000); n != 0 || err != nil {
		t.Fatalf("wrong token: %d %v", n, err)
	}
	if n, err := c.MarkPublished(ctx, []int64{events[0].ID, events[1].ID}, tok); n != 2 || err != nil {
		t.Fatalf("mark_published: %d %v", n, err)
	}
	if n, err := c.MarkFailed(ctx, []int64{events[2].ID}, "broker down", tok); n != 1 || err != nil {
		t.Fatalf("mark_failed: %d %v", n, err)
	}
	if _, err := c.OutboxQuietCommits(ctx); err != nil {
		t.Fatal(err)
	}
	drainOutbox(t)
}

// drainOutbox leaves no pending event for the next test.
func drainOutbox(t *testing.T) {
	sqlExec(t, "DELETE FROM idempotency.outbox_events")
}

func TestCancelEndsAWaitingClaim(t *testing.T) {
	c, key := client(t), newKey(t)
	if _, err := c.Claim(ctxT(t), key, "{}", ClaimOptions{Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.Claim(ctx, key, "{}", ClaimOptions{Wait: 30 * time.Second})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the cancel took %v", d)
	}
	// the server cancelled the statement (57014), and the connection is usable again
	if SQLState(err) != "" && !errors.Is(err, ErrQueryCanceled) {
		t.Fatalf("cancelled with %s", SQLState(err))
	}
	waitFor(t, "the server to end the claim", 2*time.Second, func() bool {
		return count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		 AND pid <> pg_backend_pid() AND state = 'active' AND query LIKE '%idempotency.claim(%wait%'`) == 0
	})
	t.Logf("cancelled after %v: %v", time.Since(start), err)
}
