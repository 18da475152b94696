package pgidempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
)

type app struct {
	runs    atomic.Int64
	release chan struct{} // /slow waits for it
	srv     *httptest.Server
}

// newApp serves the test handlers behind Middleware(o) on real HTTP.
func newApp(t *testing.T, o Options) *app {
	a := &app{release: make(chan struct{})}
	if o.DB == nil {
		o.DB = testDB
	}
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/payments", func(w http.ResponseWriter, r *http.Request) {
		n := a.runs.Add(1)
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/payments/1")
		w.Header().Set("Set-Cookie", "secret=1")
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"amount":%v,"run":%d}`, body["amount"], n)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		<-a.release
		a.runs.Add(1)
		w.WriteHeader(201)
		fmt.Fprint(w, "slow done")
	})
	mux.HandleFunc("/flaky", func(w http.ResponseWriter, r *http.Request) {
		switch a.runs.Add(1) {
		case 1:
			w.WriteHeader(503)
		case 2:
			panic("boom")
		default:
			fmt.Fprint(w, "ok")
		}
	})
	mux.HandleFunc("/ledger", func(w http.ResponseWriter, r *http.Request) {
		a.runs.Add(1)
		tx := TxFrom(r.Context())
		h, _ := HoldingFrom(r.Context())
		if _, err := tx.ExecContext(r.Context(), "INSERT INTO go_ledger VALUES ($1)", h.Key); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		if r.URL.Query().Get("fail") != "" {
			w.WriteHeader(502)
			return
		}
		w.WriteHeader(201)
	})
	mux.HandleFunc("/steal", func(w http.ResponseWriter, r *http.Request) {
		h, _ := HoldingFrom(r.Context())
		// another holder takes the key over before the answer is stored
		_, _ = testDB.Exec("UPDATE idempotency.idempotency_keys SET locked_until = now() - interval '1s' WHERE idempotency_key = $1", h.Key)
		c, err := On(testDB).Claim(r.Context(), h.Key, map[string]any{"method": "POST", "path": "/steal", "body": nil}, ClaimOptions{})
		if err != nil || c.Outcome != "resumed" {
			t.Errorf("steal: %+v %v", c, err)
		}
		w.WriteHeader(201)
	})
	mux.HandleFunc("/resume", func(w http.ResponseWriter, r *http.Request) {
		a.runs.Add(1)
		h, _ := HoldingFrom(r.Context())
		if h.Outcome == "claimed" {
			if err := On(testDB).Checkpoint(r.Context(), h.Key, h.Fence, "charged", 0, h.Scope); err != nil {
				t.Error(err)
			}
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"resumed_from":%q,"attempts":%d}`, h.RecoveryPoint, h.Attempts)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		a.runs.Add(1)
		w.WriteHeader(200)
		fmt.Fprint(w, strings.Repeat("x", 1000))
	})
	a.srv = httptest.NewServer(Middleware(o)(mux))
	t.Cleanup(func() {
		a.srv.CloseClientConnections()
		a.srv.Close()
	})
	return a
}

type resp struct {
	status int
	header http.Header
	body   string
}

func (a *app) do(t *testing.T, method, path, key, body string, hdr ...string) resp {
	t.Helper()
	req, _ := http.NewRequest(method, a.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := a.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, string(b)}
}

func isProblem(t *testing.T, r resp, status int) {
	t.Helper()
	var p map[string]any
	if r.status != status || r.header.Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal([]byte(r.body), &p) != nil || p["status"] != float64(status) || p["type"] != "about:blank" || p["title"] == "" {
		t.Fatalf("want %d problem+json, got %d %v %s", status, r.status, r.header, r.body)
	}
}

func expiresIn(t *testing.T, r resp, name string, want time.Duration) {
	t.Helper()
	at, err := http.ParseTime(r.header.Get(name))
	if err != nil || time.Until(at) < want-5*time.Second || time.Until(at) > want+5*time.Second {
		t.Fatalf("%s: %q, want about %v ahead", name, r.header.Get(name), want)
	}
}

func TestHTTPKeyRules(t *testing.T) {
	a := newApp(t, Options{})
	isProblem(t, a.do(t, "POST", "/payments", "", `{"amount":1}`), 400)
	if r := a.do(t, "GET", "/payments", "", ""); r.status != 201 { // not guarded
		t.Fatal(r)
	}
	for _, bad := range []string{strings.Repeat("k", 401), "a\tb"} {
		r := a.do(t, "POST", "/payments", bad, `{}`)
		isProblem(t, r, 400)
		if r.header.Get("Idempotency-Key-Expires") != "" {
			t.Fatal("expiry header on a 400")
		}
	}
	if a.runs.Load() != 1 {
		t.Fatalf("%d runs", a.runs.Load())
	}
	opt := newApp(t, Options{Optional: true})
	if r := opt.do(t, "POST", "/payments", "", `{"amount":1}`); r.status != 201 {
		t.Fatal(r)
	}
}

func TestHTTPKeyOverTheRolesMaxKeyLength(t *testing.T) {
	a := newApp(t, Options{DB: openWith(t, "max_key_length", 40)})
	key := newKey(t)
	isProblem(t, a.do(t, "POST", "/payments", key+strings.Repeat("x", 41), `{}`), 400)
	if r := a.do(t, "POST", "/payments", fmt.Sprintf("k%d", time.Now().UnixNano()), `{}`); r.status != 201 || a.runs.Load() != 1 {
		t.Fatal(r)
	}
}

func TestHTTPReplayMismatchAndExpiry(t *testing.T) {
	a := newApp(t, Options{TTL: 24 * time.Hour})
	key := newKey(t)
	first := a.do(t, "POST", "/payments", key, `{"amount": 5, "currency": "EUR"}`)
	if first.status != 201 || first.body != `{"amount":5,"run":1}` || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatal(first)
	}
	expiresIn(t, first, "Idempotency-Key-Expires", 24*time.Hour)
	if first.header.Get("Idempotency-Replay-Expires") != "" {
		t.Fatal("replay expiry without response_ttl")
	}
	// key order and whitespace do not matter
	replay := a.do(t, "POST", "/payments", key, `{"currency":"EUR","amount":5}`)
	if replay.status != 201 || replay.body != first.body || replay.header.Get("Idempotent-Replayed") != "true" ||
		replay.header.Get("Location") != "/payments/1" || replay.header.Get("Set-Cookie") != "" ||
		replay.header.Get("Content-Type") != "application/json" ||
		replay.header.Get("Idempotency-Key-Expires") != first.header.Get("Idempotency-Key-Expires") {
		t.Fatal(replay)
	}
	other := a.do(t, "POST", "/payments", key, `{"amount": 6}`)
	isProblem(t, other, 422)
	expiresIn(t, other, "Idempotency-Key-Expires", 24*time.Hour)
	if a.runs.Load() != 1 {
		t.Fatalf("%d runs", a.runs.Load())
	}
	// per-tenant scope: the same key is another key for another tenant
	scoped := newApp(t, Options{Scope: func(r *http.Request) (string, error) {
		switch tenant := r.Header.Get("X-Tenant"); tenant {
		case "":
			return "", ErrUnauthenticated
		case "broken":
			return "", errors.New("no user")
		default:
			return tenant, nil
		}
	}})
	for _, tenant := range []string{"t1", "t2", "t1"} {
		scoped.do(t, "POST", "/payments", key, `{"amount": 5}`, "X-Tenant", tenant)
	}
	if scoped.runs.Load() != 2 {
		t.Fatalf("scoped runs %d", scoped.runs.Load())
	}
	isProblem(t, scoped.do(t, "POST", "/payments", key, `{}`), 401)
	isProblem(t, scoped.do(t, "POST", "/payments", newKey(t), `{}`, "X-Tenant", "broken"), 500)
	// renamed and left out
	renamed := newApp(t, Options{KeyExpiresHeader: "X-Key-Expires", ReplayExpiresHeader: "-"})
	r := renamed.do(t, "POST", "/payments", newKey(t), `{}`)
	if r.header.Get("X-Key-Expires") == "" || r.header.Get("Idempotency-Key-Expires") != "" {
		t.Fatal(r.header)
	}
}

func TestHTTPGoneAfterResponseTTL(t *testing.T) {
	a := newApp(t, Options{TTL: time.Hour, ResponseTTL: time.Minute})
	key := newKey(t)
	first := a.do(t, "POST", "/payments", key, `{"amount": 5}`)
	expiresIn(t, first, "Idempotency-Replay-Expires", time.Minute)
	expiresIn(t, first, "Idempotency-Key-Expires", time.Hour)
	sqlExec(t, "UPDATE idempotency.idempotency_keys SET response_expires_at = now() - interval '1 second' WHERE idempotency_key = $1", key)
	gone := a.do(t, "POST", "/payments", key, `{"amount": 5}`)
	isProblem(t, gone, 410)
	if gone.header.Get("Idempotency-Replay-Expires") != "" || gone.header.Get("Idempotency-Key-Expires") == "" || a.runs.Load() != 1 {
		t.Fatal(gone.header)
	}
}

func TestHTTPInFlight409AndWait(t *testing.T) {
	for _, wait := range []time.Duration{0, 10 * time.Second} {
		a := newApp(t, Options{Lease: 30 * time.Second, Wait: wait})
		key := newKey(t)
		done := make(chan resp)
		go func() { done <- a.do(t, "POST", "/slow", key, `{}`) }()
		waitFor(t, "the holder", 5*time.Second, func() bool {
			row, _ := On(testDB).Lookup(context.Background(), key, "")
			return row != nil
		})
		if wait == 0 {
			dup := a.do(t, "POST", "/slow", key, `{}`)
			isProblem(t, dup, 409)
			if dup.header.Get("Retry-After") != "30" && dup.header.Get("Retry-After") != "29" {
				t.Fatal(dup.header)
			}
			if dup.header.Get("Idempotency-Key-Expires") == "" {
				t.Fatal("no expiry on the 409")
			}
			close(a.release)
			<-done
			continue
		}
		dup := make(chan resp)
		go func() { dup <- a.do(t, "POST", "/slow", key, `{}`) }()
		time.Sleep(300 * time.Millisecond)
		close(a.release)
		first, second := <-done, <-dup
		if first.status != 201 || second.status != 201 || second.body != "slow done" ||
			second.header.Get("Idempotent-Replayed") != "true" || a.runs.Load() != 1 {
			t.Fatalf("wait: %v %v runs %d", first, second, a.runs.Load())
		}
	}
}

func TestHTTPConcurrentDuplicatesRunOnce(t *testing.T) {
	a := newApp(t, Options{Wait: 10 * time.Second})
	key := newKey(t)
	const n = 8
	var ready, start sync.WaitGroup
	ready.Add(n)
	start.Add(1)
	out := make(chan resp, n)
	for i := 0; i < n; i++ {
		go func() {
			ready.Done()
			start.Wait() // the barrier: all send at once
			out <- a.do(t, "POST", "/payments", key, `{"amount": 9}`)
		}()
	}
	ready.Wait()
	start.Done()
	// the server lets idempotency.max_waiters_per_key duplicates sleep for
	// the key; the others are answered 409 with Retry-After at once
	replays, busy := 0, 0
	for i := 0; i < n; i++ {
		r := <-out
		if r.status == 409 && r.header.Get("Retry-After") != "" {
			busy++
			continue
		}
		if r.status != 201 || r.body != `{"amount":9,"run":1}` {
			t.Fatalf("duplicate: %v", r)
		}
		if r.header.Get("Idempotent-Replayed") == "true" {
			replays++
		}
	}
	if a.runs.Load() != 1 || replays+busy != n-1 {
		t.Fatalf("%d runs, %d replays, %d busy", a.runs.Load(), replays, busy)
	}
}

func TestHTTPHandler5xxAndPanicRunAgain(t *testing.T) {
	a := newApp(t, Options{})
	key := newKey(t)
	if r := a.do(t, "POST", "/flaky", key, `{}`); r.status != 503 || r.header.Get("Idempotency-Key-Expires") == "" {
		t.Fatal(r)
	}
	isProblem(t, a.do(t, "POST", "/flaky", key, `{}`), 500)
	if r := a.do(t, "POST", "/flaky", key, `{}`); r.status != 200 || r.body != "ok" {
		t.Fatal(r)
	}
	if r := a.do(t, "POST", "/flaky", key, `{}`); r.header.Get("Idempotent-Replayed") != "true" || a.runs.Load() != 3 {
		t.Fatal(r, a.runs.Load())
	}
	row, _ := On(testDB).Lookup(context.Background(), key, "")
	if row["attempts"] != float64(3) {
		t.Fatalf("attempts %v", row["attempts"])
	}
}

func TestHTTPLeaseLostAtComplete409(t *testing.T) {
	a := newApp(t, Options{})
	r := a.do(t, "POST", "/steal", newKey(t), ``)
	isProblem(t, r, 409)
	if r.header.Get("Retry-After") != "1" {
		t.Fatal(r.header)
	}
}

func TestHTTPOneTransaction(t *testing.T) {
	sqlExec(t, "CREATE TABLE IF NOT EXISTS go_ledger (note text)")
	a := newApp(t, Options{OneTransaction: true})
	key := newKey(t)
	if r := a.do(t, "POST", "/ledger", key, `{}`); r.status != 201 || r.header.Get("Idempotency-Key-Expires") == "" {
		t.Fatal(r)
	}
	if r := a.do(t, "POST", "/ledger", key, `{}`); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal(r)
	}
	failed := newKey(t)
	r := a.do(t, "POST", "/ledger?fail=1", failed, `{}`)
	if r.status != 502 || r.header.Get("Idempotency-Key-Expires") != "" {
		t.Fatal(r) // the claim rolled back with the handler's write: no key
	}
	if n := count(t, fmt.Sprintf("SELECT count(*) FROM go_ledger WHERE note IN ('%s', '%s')", key, failed)); n != 1 {
		t.Fatalf("%d ledger rows", n)
	}
	if row, _ := On(testDB).Lookup(context.Background(), failed, ""); row != nil {
		t.Fatal("the failed key is there")
	}
}

func TestHTTPWithChi(t *testing.T) {
	r := chi.NewRouter()
	r.Use(Middleware(Options{DB: testDB, Logf: t.Logf}))
	var runs atomic.Int64
	r.Post("/orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(201)
		fmt.Fprintf(w, "order %s", chi.URLParam(r, "id"))
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	key := newKey(t)
	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest("POST", srv.URL+"/orders/7", bytes.NewReader(nil))
		req.Header.Set("Idempotency-Key", key)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 201 || string(b) != "order 7" || (i == 1) != (res.Header.Get("Idempotent-Replayed") == "true") {
			t.Fatal(res.StatusCode, string(b), res.Header)
		}
	}
	if runs.Load() != 1 {
		t.Fatal(runs.Load())
	}
}

func TestHTTPCheckpointThenResume(t *testing.T) {
	a := newApp(t, Options{})
	key := newKey(t)
	if r := a.do(t, "POST", "/resume", key, `{}`); r.status != 503 {
		t.Fatal(r)
	}
	if r := a.do(t, "POST", "/resume", key, `{}`); r.status != 201 || r.body != `{"resumed_from":"charged","attempts":2}` {
		t.Fatal(r)
	}
	if r := a.do(t, "POST", "/resume", key, `{}`); r.header.Get("Idempotent-Replayed") != "true" || a.runs.Load() != 2 {
		t.Fatal(r, a.runs.Load())
	}
}

func TestHTTPAnswerOverMaxResponseBytes500(t *testing.T) {
	a := newApp(t, Options{DB: openWith(t, "max_response_bytes", 200)})
	key := newKey(t)
	for i := 1; i <= 2; i++ { // not kept, failed retryably: the retry runs again
		r := a.do(t, "POST", "/big", key, `{}`)
		isProblem(t, r, 500)
		if !strings.Contains(r.body, "max_response_bytes") || a.runs.Load() != int64(i) {
			t.Fatal(r, a.runs.Load())
		}
	}
}
