// http.go: the Idempotency-Key header for net/http (and so chi,
// gorilla/mux and anything that takes an http.Handler).  The behaviour
// table is doc/clients.md's, as in the Node and Python packages:
//
//	no key where one is required         400 problem+json
//	key empty, over 400 characters or    400 problem+json, before any query
//	  with control characters
//	claim raises 22023 and the key is    400 problem+json; another 22023 goes
//	  over idempotency.max_key_length    to Options.OnError
//	Scope returns ErrUnauthenticated     401 problem+json; another error: 500
//	claimed / resumed                    the handler runs; its answer is stored
//	replay                               stored status, headers, body + Idempotent-Replayed: true
//	gone (1.6)                           410 problem+json; the handler does not run again
//	in_progress (Wait ran out)           409 problem+json, Retry-After
//	mismatch                             422 problem+json
//	handler answers 5xx or panics        fail(retryable): the next try runs again
//	lease lost (55000) at complete       409 problem+json, Retry-After: 1
//	answer over max_response_bytes       500 problem+json; fail(retryable)
//	claim raises another error           Options.OnError (default: 500 problem+json)
//
// Every answer that follows a claim of the key carries
// Idempotency-Key-Expires and, while the answer is kept for less than the
// key, Idempotency-Replay-Expires.

package pgidempotency

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// KeyMaxChars is the most characters idempotency.max_key_length allows; a
// shorter key may still be over the database's setting.
const KeyMaxChars = 400

// ErrUnauthenticated, returned by Options.Scope, answers 401.
var ErrUnauthenticated = errors.New("idempotency: no authenticated caller")

// Options configure Middleware; only DB is required.
type Options struct {
	DB *sql.DB
	// Header names the key's header (default Idempotency-Key).
	Header string
	// Methods that take a key (default POST and PATCH); others pass through.
	Methods []string
	// Optional: a guarded request without a key runs unguarded instead
	// of being answered 400.
	Optional bool
	// Scope names the key's owner (the tenant or user, from
	// authentication); nil: "". ErrUnauthenticated answers 401, another
	// error 500 (nothing is claimed).
	Scope func(r *http.Request) (string, error)
	// Fingerprint is the JSON value compared between requests of a key;
	// default: method, path and body (parsed when it is JSON).
	Fingerprint func(r *http.Request, body []byte) (any, error)
	// TTL (retention), ResponseTTL (1.6), Lease and Wait (1.6): as for
	// Claim and Complete; zero is the server's setting (ResponseTTL and
	// Wait are then not sent).
	TTL, ResponseTTL, Lease, Wait time.Duration
	// ServerConnections: behind a transaction pooler, the server
	// connections it lends this service (its pool for the database and
	// user), which claims sleeping with Wait keep: at most this minus one
	// sleep at once, as SetMaxOpenConns bounds them without a pooler
	// (0: SetMaxOpenConns alone).
	ServerConnections int
	// OneTransaction: the claim, the handler's queries on TxFrom(ctx) and
	// the answer commit in one transaction; a 5xx or a panic rolls all
	// of them back, the claim included.
	OneTransaction bool
	// StoredHeaders are the response headers kept for replays (default
	// Content-Type and Location).
	StoredHeaders []string
	// KeyExpiresHeader and ReplayExpiresHeader name the expiry headers
	// (defaults Idempotency-Key-Expires, Idempotency-Replay-Expires); "-"
	// leaves one out (with both left out nothing is read).
	KeyExpiresHeader, ReplayExpiresHeader string
	// OnError answers a database error that is not the request's fault
	// (55000 or 0A000 from a claim with Wait, a lost connection …);
	// default: logs it and answers 500 problem+json.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
	// Logf logs handler failures (default log.Printf).
	Logf func(format string, args ...any)
}

// Holding is what a handler that holds the key learns about it: to
// checkpoint progress and, when resumed, skip the phases done before.
type Holding struct {
	Key, Scope    string
	Fence         int64
	Outcome       string // claimed or resumed
	RecoveryPoint string
	Attempts      int
}

type ctxKey int

const (
	holdingKey ctxKey = iota
	txKey
)

// HoldingFrom returns the key the request's handler holds.
func HoldingFrom(ctx context.Context) (Holding, bool) {
	h, ok := ctx.Value(holdingKey).(Holding)
	return h, ok
}

// TxFrom returns, in one-transaction mode, the transaction the handler's
// writes go in (it commits with the stored answer); nil otherwise.
func TxFrom(ctx context.Context) *sql.Tx {
	tx, _ := ctx.Value(txKey).(*sql.Tx)
	return tx
}

// answer is an HTTP answer to send.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a *answer) send(w http.ResponseWriter) {
	for k, vs := range a.header {
		w.Header()[k] = vs
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

func problem(status int, title, detail string) *answer {
	body, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", title, status, detail})
	h := http.Header{}
	h.Set("Content-Type", "application/problem+json")
	return &answer{status, h, body}
}

// KeyProblem says why key cannot be an Idempotency-Key, or "": empty,
// over KeyMaxChars characters, or with control characters.
func KeyProblem(key string) string {
	if key == "" {
		return "The key is empty."
	}
	if n := utf8.RuneCountInString(key); n > KeyMaxChars {
		return fmt.Sprintf("The key has %d characters; at most %d are allowed.", n, KeyMaxChars)
	}
	for _, c := range key {
		if c < ' ' || c == 0x7f {
			return "The key contains control characters."
		}
	}
	return ""
}

// DefaultFingerprint is method, path and body (parsed when the content
// type says JSON, so key order and whitespace do not matter; text otherwise).
func DefaultFingerprint(r *http.Request, body []byte) (any, error) {
	var b any = strings.ToValidUTF8(string(body), "\uFFFD")
	if strings.Contains(r.Header.Get("Content-Type"), "json") {
		if len(body) == 0 {
			b = nil
		} else if json.Valid(body) {
			b = json.RawMessage(body)
		}
	}
	return map[string]any{"method": r.Method, "path": r.URL.Path, "body": b}, nil
}

// storedAnswer is the jsonb kept for a replay (the Python and Node
// packages' shape): headers as [name, value] pairs, the body as text, or
// body_base64 when it is not UTF-8.
type storedAnswer struct {
	Headers    [][2]string `json:"headers"`
	Body       *string     `json:"body,omitempty"`
	BodyBase64 *string     `json:"body_base64,omitempty"`
}

func store(a *answer, keep []string) storedAnswer {
	s := storedAnswer{Headers: [][2]string{}}
	names := make([]string, 0, len(a.header))
	for k := range a.header {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, want := range keep {
			if strings.EqualFold(k, want) {
				for _, v := range a.header[k] {
					s.Headers = append(s.Headers, [2]string{strings.ToLower(k), v})
				}
			}
		}
	}
	if utf8.Valid(a.body) {
		b := string(a.body)
		s.Body = &b
	} else {
		b := base64.StdEncoding.EncodeToString(a.body)
		s.BodyBase64 = &b
	}
	return s
}

// replayed is the answer of a replay of doc, stored by this package or
// another client.
func replayed(code int, doc json.RawMessage) *answer {
	if code == 0 {
		code = 200
	}
	h := http.Header{}
	var obj map[string]json.RawMessage
	if json.Unmarshal(doc, &obj) != nil || obj["headers"] == nil {
		h.Set("Content-Type", "application/json")
		return &answer{code, h, doc}
	}
	var body []byte
	var pairs [][2]string
	var old map[string]any
	if json.Unmarshal(obj["headers"], &pairs) == nil {
		for _, p := range pairs {
			h.Add(p[0], p[1])
		}
		var text string
		if raw, ok := obj["body"]; ok && json.Unmarshal(raw, &text) == nil {
			body = []byte(text)
		} else if raw, ok := obj["body_base64"]; ok && json.Unmarshal(raw, &text) == nil {
			body, _ = base64.StdEncoding.DecodeString(text)
		}
	} else if json.Unmarshal(obj["headers"], &old) == nil { // the Node package's 0.1.0: {"headers": {...}, "body": <JSON>}
		for k, v := range old {
			h.Set(k, fmt.Sprint(v))
		}
		var compact bytes.Buffer
		raw := obj["body"]
		if raw == nil {
			raw = json.RawMessage("null")
		}
		_ = json.Compact(&compact, raw)
		body = compact.Bytes()
	}
	h.Set("Idempotent-Replayed", "true")
	return &answer{code, h, body}
}

// answerFor is the answer of a claim that does not hold the key.
func answerFor(c ClaimResult) *answer {
	switch c.Outcome {
	case "replay":
		return replayed(c.ResponseCode, c.ResponseBody)
	case "gone":
		return problem(410, "The answer to this Idempotency-Key is gone",
			"The request was processed and its answer is no longer kept; it does not run again. "+
				"Use a new key to send it again.")
	case "in_progress":
		a := problem(409, "A request with this Idempotency-Key is being processed",
			"Retry after the time given in Retry-After.")
		a.header.Set("Retry-After", strconv.Itoa(c.RetryAfterSeconds()))
		return a
	}
	return problem(422, "Idempotency-Key reused with another request",
		"This key was used for a different request; use a new key.")
}

// recorder captures the handler's answer.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

type middleware struct {
	Options
	next http.Handler
}

// Middleware returns net/http middleware that guards o.Methods with the
// Idempotency-Key header (the table at the top of this file).
func Middleware(o Options) func(http.Handler) http.Handler {
	if o.DB == nil {
		panic("pgidempotency.Middleware: Options.DB is nil")
	}
	if o.Header == "" {
		o.Header = "Idempotency-Key"
	}
	if o.Methods == nil {
		o.Methods = []string{"POST", "PATCH"}
	}
	if o.Fingerprint == nil {
		o.Fingerprint = DefaultFingerprint
	}
	if o.StoredHeaders == nil {
		o.StoredHeaders = []string{"Content-Type", "Location"}
	}
	if o.KeyExpiresHeader == "" {
		o.KeyExpiresHeader = "Idempotency-Key-Expires"
	}
	if o.ReplayExpiresHeader == "" {
		o.ReplayExpiresHeader = "Idempotency-Replay-Expires"
	}
	if o.Logf == nil {
		o.Logf = log.Printf
	}
	if o.OnError == nil {
		logf := o.Logf
		o.OnError = func(w http.ResponseWriter, r *http.Request, err error) {
			logf("pgidempotency: %s %s: %v", r.Method, r.URL.Path, err)
			problem(500, "Internal Server Error", "The request could not be processed.").send(w)
		}
	}
	return func(next http.Handler) http.Handler { return &middleware{o, next} }
}

func (m *middleware) guarded(method string) bool {
	for _, g := range m.Methods {
		if strings.EqualFold(g, method) {
			return true
		}
	}
	return false
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !m.guarded(r.Method) {
		m.next.ServeHTTP(w, r)
		return
	}
	key := r.Header.Get(m.Header)
	if key == "" {
		if m.Optional {
			m.next.ServeHTTP(w, r)
			return
		}
		problem(400, "Idempotency-Key is missing", "This operation requires an Idempotency-Key header.").send(w)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		problem(400, "Bad Request", "The request body could not be read.").send(w)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	scope := ""
	if m.Scope != nil {
		if scope, err = m.Scope(r); errors.Is(err, ErrUnauthenticated) {
			problem(401, "Unauthenticated", "Idempotency keys belong to an authenticated caller.").send(w)
			return
		} else if err != nil {
			m.Logf("pgidempotency: scope function failed: %v", err)
			problem(500, "Internal Server Error",
				"The request's idempotency scope could not be computed; nothing was done.").send(w)
			return
		}
	}
	if bad := KeyProblem(key); bad != "" {
		problem(400, "Invalid Idempotency-Key", bad).send(w)
		return
	}
	fp, err := m.Fingerprint(r, body)
	if err != nil {
		m.OnError(w, r, err)
		return
	}
	a, err := m.exchange(r, key, scope, fp)
	if err != nil {
		m.OnError(w, r, err)
		return
	}
	a.send(w)
}

// sleepers counts, per *sql.DB, the claims that sleep with Wait. A
// sleeping claim keeps its connection, and a holder needs one for its
// handler's queries and for Complete: were every connection of the pool
// asleep in a claim, the holder would wait until its lease ran out and a
// waiter took the key over, running the request twice. The server lets one
// claim per key sleep (idempotency.max_waiters_per_key); enterWait bounds
// the sleepers of all keys to the pool's SetMaxOpenConns minus one, so a
// connection is always left for the holders (no bound when it is
// unlimited). A duplicate past the bound claims without Wait: 409 with
// Retry-After at once. The wait never outlasts the holder's lease: the
// server wakes the waiter when the lease runs out.  Behind a transaction
// pooler the connections a sleeper keeps are the pooler's server
// connections (servers, when set and fewer).
var sleepers sync.Map // *sql.DB -> *int64

func enterWait(db *sql.DB, servers int) bool {
	max := int64(db.Stats().MaxOpenConnections)
	if servers > 0 && (max == 0 || int64(servers) < max) {
		max = int64(servers)
	}
	v, _ := sleepers.LoadOrStore(db, new(int64))
	n := v.(*int64)
	if atomic.AddInt64(n, 1) > max-1 && max > 0 {
		atomic.AddInt64(n, -1)
		return false
	}
	return true
}

func leaveWait(db *sql.DB) {
	v, _ := sleepers.Load(db)
	atomic.AddInt64(v.(*int64), -1)
}

// storePatience is how long the holder's Complete or Fail waits for a
// connection: its handler's side effect has run, and an answer not stored
// lets a retry run it again once the lease (by default 30 s) is out.
const storePatience = 30 * time.Second

// detached has ctx's values but not its end: the holder stores its answer
// even when the client went away during the handler (its effect ran).
type detached struct{ context.Context }

func (detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (detached) Done() <-chan struct{}       { return nil }
func (detached) Err() error                  { return nil }

// exchange claims the key and answers; the expiry headers are added once
// the answer is settled.
func (m *middleware) exchange(r *http.Request, key, scope string, fp any) (*answer, error) {
	ctx := r.Context()
	var q Querier = m.DB
	var tx *sql.Tx
	if m.OneTransaction {
		var err error
		if tx, err = m.DB.BeginTx(ctx, nil); err != nil {
			return nil, wrap(ctx, err)
		}
		defer func() { _ = tx.Rollback() }() // after Commit: ErrTxDone, harmless
		q = tx
	}
	var wait time.Duration
	if m.Wait > 0 && enterWait(m.DB, m.ServerConnections) {
		wait = m.Wait
	}
	c, err := On(q).Claim(ctx, key, fp, ClaimOptions{Scope: scope, TTL: m.TTL, Lease: m.Lease, Wait: wait})
	if wait > 0 {
		leaveWait(m.DB)
	}
	if err != nil {
		if tx != nil {
			_ = tx.Rollback()
		}
		if errors.Is(err, ErrInvalidParameter) {
			// the key is to blame only when it is longer than the database's max_key_length
			if tooLong, e := On(m.DB).keyTooLong(ctx, key); e == nil && tooLong {
				return problem(400, "Invalid Idempotency-Key",
					"The key is longer than idempotency.max_key_length characters."), nil
			}
		}
		return nil, err
	}
	var a *answer
	if c.Holds() {
		if a, err = m.held(ctx, r, tx, key, scope, c); err != nil {
			return nil, err
		}
	} else {
		a = answerFor(c)
		if tx != nil {
			if err := tx.Commit(); err != nil {
				return nil, wrap(ctx, err)
			}
		}
	}
	m.expiryHeaders(ctx, a, key, scope)
	return a, nil
}

// held runs the handler of a request that holds the key and stores its
// answer (or fails the key).
func (m *middleware) held(ctx context.Context, r *http.Request, tx *sql.Tx, key, scope string, c ClaimResult) (*answer, error) {
	hctx := context.WithValue(ctx, holdingKey, Holding{key, scope, c.Fence, c.Outcome, c.RecoveryPoint, c.Attempts})
	if tx != nil {
		hctx = context.WithValue(hctx, txKey, tx)
	}
	a, failure := m.run(r.WithContext(hctx))
	if failure != nil {
		m.Logf("pgidempotency: idempotent handler failed: %v", failure)
	}
	// in one transaction the store goes with the request's transaction
	// (its end rolls back the handler's writes too); else it outlives it
	var q Querier = m.DB
	if tx != nil {
		q = tx
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(detached{ctx}, storePatience)
		defer cancel()
	}
	var err error
	if a.status >= 500 {
		if tx != nil {
			_ = tx.Rollback()
		} else {
			err = On(q).Fail(ctx, key, c.Fence, store(a, m.StoredHeaders), a.status, true, FailOptions{Scope: scope})
		}
	} else {
		err = On(q).Complete(ctx, key, c.Fence, store(a, m.StoredHeaders), a.status,
			CompleteOptions{Scope: scope, TTL: m.TTL, ResponseTTL: m.ResponseTTL})
		if err == nil && tx != nil {
			err = wrap(ctx, tx.Commit())
		}
	}
	switch {
	case err == nil:
		return a, nil
	case errors.Is(err, ErrLeaseLost):
		p := problem(409, "Idempotency-Key lease lost", "Another request holds this key now.")
		p.header.Set("Retry-After", "1")
		return p, nil
	case errors.Is(err, ErrResponseTooLarge):
		if tx == nil {
			if err := On(m.DB).Fail(ctx, key, c.Fence, nil, 500, true, FailOptions{Scope: scope}); err != nil {
				return nil, err
			}
		}
		return problem(500, "Response too large to store",
			"The answer exceeds idempotency.max_response_bytes; it was not kept."), nil
	}
	return nil, err
}

// run calls the handler and captures its answer; a panic is a 500.
func (m *middleware) run(r *http.Request) (a *answer, failure error) {
	rec := &recorder{header: http.Header{}}
	defer func() {
		if p := recover(); p != nil {
			a = problem(500, "Internal Server Error", "The request failed; it may be retried.")
			failure = fmt.Errorf("panic: %v", p)
		}
	}()
	m.next.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return &answer{rec.status, rec.header, rec.body.Bytes()}, nil
}

// expiryHeaders adds the key's expiry headers to a, none when the key is
// absent or the read fails.
func (m *middleware) expiryHeaders(ctx context.Context, a *answer, key, scope string) {
	if m.KeyExpiresHeader == "-" && m.ReplayExpiresHeader == "-" {
		return
	}
	e, err := On(m.DB).KeyExpiry(ctx, key, scope)
	if err != nil {
		m.Logf("pgidempotency: idempotency key expiry not read: %v", err)
		return
	}
	if e == nil {
		return
	}
	if m.KeyExpiresHeader != "-" {
		a.header.Set(m.KeyExpiresHeader, e.ExpiresAt.UTC().Format(http.TimeFormat))
	}
	if e.ResponseExpiresAt != nil && m.ReplayExpiresHeader != "-" {
		a.header.Set(m.ReplayExpiresHeader, e.ResponseExpiresAt.UTC().Format(http.TimeFormat))
	}
}
