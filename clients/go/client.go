// client.go: every function of the SQL contract (doc/reference.md) as a
// typed Go call over database/sql.  Queries run on any Querier (*sql.DB,
// *sql.Tx, *sql.Conn), so a call joins the caller's transaction when it
// is given one.  No SQL text is ever built from an argument: values are
// parameters, and the only optional parts (the 1.6 arguments passed by
// name) are this file's own fixed text.

package pgidempotency

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/lib/pq"
)

// Version is this package's version (CHANGELOG.md).
const Version = "0.1.0"

// MinVersion is the oldest extension version this package works with.
const MinVersion = "1.3"

// Querier runs statements: *sql.DB, *sql.Tx and *sql.Conn are Queriers.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Queries are the contract's functions on one Querier.
type Queries struct{ q Querier }

// On returns the contract's functions on q (a *sql.Tx to run them in a
// transaction).
func On(q Querier) Queries { return Queries{q} }

// Client is the contract's functions on a *sql.DB whose extension version
// was checked, and the calls that need a transaction of their own.
type Client struct {
	Queries
	DB      *sql.DB
	Version string
}

// NewClient checks the extension's version (ErrVersion when it is missing
// or older than MinVersion) and returns a Client on db.
func NewClient(ctx context.Context, db *sql.DB) (*Client, error) {
	v, err := ExtensionVersion(ctx, db)
	if err != nil {
		return nil, err
	}
	return &Client{Queries: On(db), DB: db, Version: v}, nil
}

// ExtensionVersion returns the installed version (pg_extension for the C
// edition and pg_tle; idempotency.plain_version for the portable edition
// installed as a plain script), or ErrVersion when it is missing or older
// than MinVersion.
func ExtensionVersion(ctx context.Context, q Querier) (string, error) {
	var v sql.NullString
	err := On(q).do(ctx, func(q Querier) error {
		return q.QueryRowContext(ctx, `SELECT coalesce((SELECT extversion FROM pg_catalog.pg_extension
	 WHERE extname = 'idempotency'),
	 CASE WHEN to_regclass('idempotency.plain_version') IS NOT NULL THEN
	 (xpath('/row/version/text()',
	  query_to_xml('SELECT version FROM idempotency.plain_version', false, true, '')))[1]::text END)`).Scan(&v)
	})
	if err != nil {
		return "", wrap(ctx, err)
	}
	if !v.Valid {
		return "", fmt.Errorf("%w: the idempotency extension is not installed in this database "+
			"(neither pg_extension nor idempotency.plain_version has it)", ErrVersion)
	}
	if versionLess(v.String, MinVersion) {
		return "", fmt.Errorf("%w: the database's idempotency extension is version %s; pgidempotency needs %s or later "+
			"(ALTER EXTENSION idempotency UPDATE)", ErrVersion, v.String, MinVersion)
	}
	return v.String, nil
}

func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < 2; i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// interval is d as an interval parameter; 0 is NULL (the server's default).
func interval(d time.Duration) any {
	if d == 0 {
		return nil
	}
	return fmt.Sprintf("%.6f seconds", d.Seconds())
}

// jsonArg is v as a jsonb parameter (json.RawMessage and []byte are sent
// as they are); nil is NULL.
func jsonArg(v any) (any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if x == nil {
			return nil, nil
		}
		return string(x), nil
	case []byte:
		return string(x), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// ClaimResult is claim_result (doc/reference.md, claim).
type ClaimResult struct {
	Outcome       string // claimed, resumed, replay, gone (1.6), in_progress, mismatch
	Fence         int64
	Status        string
	ResponseCode  int
	ResponseBody  json.RawMessage
	RecoveryPoint string
	Attempts      int
	RetryAfter    time.Duration // in_progress: when the holder's lease runs out
}

// Holds is true when the caller holds the key (claimed or resumed).
func (c ClaimResult) Holds() bool { return c.Outcome == "claimed" || c.Outcome == "resumed" }

// RetryAfterSeconds is Retry-After in whole seconds, rounded up, at least 1.
func (c ClaimResult) RetryAfterSeconds() int {
	s := int(math.Ceil(c.RetryAfter.Seconds()))
	if s < 1 {
		return 1
	}
	return s
}

const claimColumns = `outcome, fence, status::text, response_code, response_body, recovery_point, attempts,
 extract(epoch FROM retry_after)::float8`

// row runs query for one row through q.do and scans it into dest.
func (q Queries) row(ctx context.Context, query string, args []any, dest ...any) error {
	return q.do(ctx, func(x Querier) error {
		return wrap(ctx, x.QueryRowContext(ctx, query, args...).Scan(dest...))
	})
}

// exec runs a statement through q.do.
func (q Queries) exec(ctx context.Context, query string, args ...any) error {
	return q.do(ctx, func(x Querier) error {
		_, err := x.ExecContext(ctx, query, args...)
		return wrap(ctx, err)
	})
}

// rows runs query through q.do and scans each row with scan.
func (q Queries) rows(ctx context.Context, query string, args []any, scan func(*sql.Rows) error) error {
	return q.do(ctx, func(x Querier) error {
		rows, err := x.QueryContext(ctx, query, args...)
		if err != nil {
			return wrap(ctx, err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return wrap(ctx, err)
			}
		}
		return wrap(ctx, rows.Err())
	})
}

// claim runs claim's or execute's query and reads its claim_result.
func (q Queries) claim(ctx context.Context, query string, args []any) (ClaimResult, error) {
	var (
		r        ClaimResult
		fence    sql.NullInt64
		status   sql.NullString
		code     sql.NullInt64
		body     []byte
		rp       sql.NullString
		attempts sql.NullInt64
		retry    sql.NullFloat64
	)
	if err := q.row(ctx, query, args, &r.Outcome, &fence, &status, &code, &body, &rp, &attempts, &retry); err != nil {
		return r, err
	}
	r.Fence, r.Status, r.ResponseCode = fence.Int64, status.String, int(code.Int64)
	if body != nil {
		r.ResponseBody = json.RawMessage(body)
	}
	r.RecoveryPoint, r.Attempts = rp.String, int(attempts.Int64)
	r.RetryAfter = time.Duration(retry.Float64 * float64(time.Second))
	return r, nil
}

// ClaimOptions are claim's optional arguments; zero durations are NULL
// (the server's settings).
type ClaimOptions struct {
	Scope string
	TTL   time.Duration // retention: idempotency.default_ttl when 0
	Lease time.Duration // idempotency.lease_timeout when 0
	// Wait (1.6): wait up to this long for a holder of the key to finish,
	// then answer as a claim made after it; sent only when set. Needs the
	// library in shared_preload_libraries (else 55000) and READ COMMITTED
	// (else 0A000).
	Wait time.Duration
}

// Claim calls idempotency.claim. request is any JSON value (the
// fingerprint), marshalled with encoding/json.
func (q Queries) Claim(ctx context.Context, key string, request any, o ClaimOptions) (ClaimResult, error) {
	req, err := jsonArg(request)
	if err != nil {
		return ClaimResult{}, err
	}
	sqlText := "SELECT " + claimColumns + " FROM idempotency.claim($1, $2::jsonb, $3, $4::interval, $5::interval"
	args := []any{key, req, o.Scope, interval(o.TTL), interval(o.Lease)}
	if o.Wait != 0 {
		sqlText += ", wait => $6::interval"
		args = append(args, interval(o.Wait))
	}
	return q.claim(ctx, sqlText+")", args)
}

// CompleteOptions are complete's optional arguments.
type CompleteOptions struct {
	Scope       string
	TTL         time.Duration
	ResponseTTL time.Duration // 1.6: how long the answer is replayed; sent only when set
}

// Complete calls idempotency.complete: stores response (any JSON value)
// and code under the holder's fence; ErrLeaseLost when another holder has
// the key, ErrResponseTooLarge over idempotency.max_response_bytes.
func (q Queries) Complete(ctx context.Context, key string, fence int64, response any, code int, o CompleteOptions) error {
	body, err := jsonArg(response)
	if err != nil {
		return err
	}
	if body == nil {
		body = "null"
	}
	sqlText := "SELECT idempotency.complete($1, $2, $3::jsonb, $4, $5, $6::interval"
	args := []any{key, fence, body, code, o.Scope, interval(o.TTL)}
	if o.ResponseTTL != 0 {
		sqlText += ", response_ttl => $7::interval"
		args = append(args, interval(o.ResponseTTL))
	}
	return q.exec(ctx, sqlText+")", args...)
}

// FailOptions are fail's optional arguments (TTL and ResponseTTL for a
// final failure only).
type FailOptions struct {
	Scope       string
	TTL         time.Duration
	ResponseTTL time.Duration
}

// Fail calls idempotency.fail: a retryable failure lets the next claim
// resume the key; a final one is replayed like an answer.
func (q Queries) Fail(ctx context.Context, key string, fence int64, errBody any, code int, retryable bool, o FailOptions) error {
	body, err := jsonArg(errBody)
	if err != nil {
		return err
	}
	sqlText := "SELECT idempotency.fail($1, $2, $3::jsonb, $4, $5, $6, $7::interval"
	args := []any{key, fence, body, code, retryable, o.Scope, interval(o.TTL)}
	if o.ResponseTTL != 0 {
		sqlText += ", response_ttl => $8::interval"
		args = append(args, interval(o.ResponseTTL))
	}
	return q.exec(ctx, sqlText+")", args...)
}

// Checkpoint calls idempotency.checkpoint: records a recovery point and
// extends the lease (lease 0: idempotency.lease_timeout).
func (q Queries) Checkpoint(ctx context.Context, key string, fence int64, recoveryPoint string, lease time.Duration, scope string) error {
	return q.exec(ctx, "SELECT idempotency.checkpoint($1, $2, $3, $4::interval, $5)",
		key, fence, recoveryPoint, interval(lease), scope)
}

// Release calls idempotency.release: gives the key up without an answer.
func (q Queries) Release(ctx context.Context, key string, fence int64, scope string) error {
	return q.exec(ctx, "SELECT idempotency.release($1, $2, $3)", key, fence, scope)
}

// Lookup calls idempotency.lookup: the key's row (its columns in the
// installed version, by name), or nil when absent or expired.
func (q Queries) Lookup(ctx context.Context, key, scope string) (map[string]any, error) {
	var b []byte
	err := q.row(ctx, `SELECT CASE WHEN l IS NULL THEN NULL ELSE to_jsonb(l) END
	 FROM idempotency.lookup($1, $2) AS l`, []any{key, scope}, &b)
	if err != nil || b == nil {
		return nil, err
	}
	var row map[string]any
	if err := json.Unmarshal(b, &row); err != nil {
		return nil, err
	}
	if row["idempotency_key"] == nil {
		return nil, nil
	}
	return row, nil
}

// keyTooLong is true when key has more characters than the database's
// idempotency.max_key_length (255 when unset).
func (q Queries) keyTooLong(ctx context.Context, key string) (bool, error) {
	var tooLong bool
	err := q.row(ctx, `SELECT char_length($1) >
	 coalesce(current_setting('idempotency.max_key_length', true)::int, 255)`, []any{key}, &tooLong)
	return tooLong, err
}

// KeyExpiry is when a key is forgotten and when its stored answer goes,
// rounded up to the second (doc/clients.md, "Expiry headers").
type KeyExpiry struct {
	ExpiresAt         time.Time
	ResponseExpiresAt *time.Time // nil when the answer lives as long as the key, or is gone
}

// KeyExpiry reads the key's expiry, or nil when it is absent. It works
// before 1.6 (no response_expires_at) and does not read the answer.
func (q Queries) KeyExpiry(ctx context.Context, key, scope string) (*KeyExpiry, error) {
	var at time.Time
	var answer sql.NullTime
	err := q.row(ctx, `SELECT to_timestamp(ceil(extract(epoch FROM k.expires_at))),
	 CASE WHEN k.answer_goes > clock_timestamp()
	      THEN to_timestamp(ceil(extract(epoch FROM k.answer_goes))) END
	 FROM (SELECT l.expires_at,
	              (to_jsonb(jsonb_populate_record(l, '{"response_body": null}'))
	                 ->> 'response_expires_at')::timestamptz AS answer_goes
	         FROM idempotency.lookup($1, $2) AS l
	        WHERE l.idempotency_key IS NOT NULL) AS k`, []any{key, scope}, &at, &answer)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	e := &KeyExpiry{ExpiresAt: at}
	if answer.Valid {
		e.ResponseExpiresAt = &answer.Time
	}
	return e, nil
}

// ExecuteOptions are execute's optional arguments.
type ExecuteOptions struct {
	Scope       string
	TTL         time.Duration
	ResponseTTL time.Duration // 1.6, sent only when set
	Wait        time.Duration // 1.6, sent only when set
}

// Execute calls idempotency.execute: runs statement (the application's
// own fixed SQL text, never client input; its values in params, bound as
// text to $1..$n) once per key, storing its result.
func (q Queries) Execute(ctx context.Context, key string, request any, statement string, params []string, o ExecuteOptions) (ClaimResult, error) {
	req, err := jsonArg(request)
	if err != nil {
		return ClaimResult{}, err
	}
	if params == nil {
		params = []string{}
	}
	sqlText := "SELECT " + claimColumns + " FROM idempotency.execute($1, $2::jsonb, $3, $4::text[], $5, $6::interval"
	args := []any{key, req, statement, pq.Array(params), o.Scope, interval(o.TTL)}
	if o.ResponseTTL != 0 {
		args = append(args, interval(o.ResponseTTL))
		sqlText += fmt.Sprintf(", response_ttl => $%d::interval", len(args))
	}
	if o.Wait != 0 {
		args = append(args, interval(o.Wait))
		sqlText += fmt.Sprintf(", wait => $%d::interval", len(args))
	}
	return q.claim(ctx, sqlText+")", args)
}

// IssueToken calls idempotency.issue_token: a one-time token (a uuid).
func (q Queries) IssueToken(ctx context.Context, scope string, ttl time.Duration) (string, error) {
	var t string
	err := q.row(ctx, "SELECT idempotency.issue_token($1, $2::interval)::text", []any{scope, interval(ttl)}, &t)
	return t, err
}

// ConsumeToken calls idempotency.consume_token: true the one time the
// token is consumed.
func (q Queries) ConsumeToken(ctx context.Context, token, scope string) (bool, error) {
	var ok sql.NullBool
	err := q.row(ctx, "SELECT idempotency.consume_token($1::uuid, $2)", []any{token, scope}, &ok)
	return ok.Bool, err
}

// TransitionResult is transition's result.
type TransitionResult struct {
	Outcome      string // applied, already, rejected, not_found
	CurrentState string
}

// Transition calls idempotency.transition: table and columns are passed
// as values (regclass, name) and quoted by the extension. set (may be
// nil) is a JSON object of other columns to set with the transition.
func (q Queries) Transition(ctx context.Context, table, keyColumn, key, stateColumn, from, to string, set map[string]any) (TransitionResult, error) {
	var s any
	if set != nil {
		var err error
		if s, err = jsonArg(set); err != nil {
			return TransitionResult{}, err
		}
	}
	var r TransitionResult
	var cur sql.NullString
	err := q.row(ctx, `SELECT outcome, current_state FROM idempotency.transition(
	 $1::regclass, $2::name, $3, $4::name, $5, $6, $7::jsonb)`,
		[]any{table, keyColumn, key, stateColumn, from, to, s}, &r.Outcome, &cur)
	r.CurrentState = cur.String
	return r, err
}

// Event is an outbox event to enqueue.
type Event struct {
	AggregateType, AggregateID, EventType string
	Payload                               any // any JSON value
	Headers                               any // a JSON value, or nil
}

// EnqueueEvent calls idempotency.enqueue_event in q's transaction (give
// it the *sql.Tx of the business write); returns the event's id.
func (q Queries) EnqueueEvent(ctx context.Context, e Event) (int64, error) {
	p, err := jsonArg(e.Payload)
	if err != nil {
		return 0, err
	}
	if p == nil {
		p = "null"
	}
	h, err := jsonArg(e.Headers)
	if err != nil {
		return 0, err
	}
	var id int64
	err = q.row(ctx, "SELECT idempotency.enqueue_event($1, $2, $3, $4::jsonb, $5::jsonb)",
		[]any{e.AggregateType, e.AggregateID, e.EventType, p, h}, &id)
	return id, err
}

// EnqueueEvents calls idempotency.enqueue_events: many events in one
// statement; returns their ids in order.
func (q Queries) EnqueueEvents(ctx context.Context, events []Event) ([]int64, error) {
	types := make([]string, len(events))
	ids := make([]string, len(events))
	kinds := make([]string, len(events))
	payloads := make([]string, len(events))
	headers := make([]sql.NullString, len(events))
	for i, e := range events {
		types[i], ids[i], kinds[i] = e.AggregateType, e.AggregateID, e.EventType
		p, err := jsonArg(e.Payload)
		if err != nil {
			return nil, err
		}
		if p == nil {
			p = "null"
		}
		payloads[i] = p.(string)
		h, err := jsonArg(e.Headers)
		if err != nil {
			return nil, err
		}
		if h != nil {
			headers[i] = sql.NullString{String: h.(string), Valid: true}
		}
	}
	return column[int64](ctx, q, `SELECT * FROM idempotency.enqueue_events($1::text[], $2::text[], $3::text[],
	 $4::text[]::jsonb[], $5::text[]::jsonb[])`,
		pq.Array(types), pq.Array(ids), pq.Array(kinds), pq.Array(payloads), pq.GenericArray{A: headers})
}

// column runs query through q.do and returns its one column.
func column[T any](ctx context.Context, q Queries, query string, args ...any) ([]T, error) {
	out := []T{}
	err := q.rows(ctx, query, args, func(rows *sql.Rows) error {
		var v T
		err := rows.Scan(&v)
		out = append(out, v)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// OutboxEvent is a claimed event.
type OutboxEvent struct {
	ID            int64
	AggregateType string
	AggregateID   string
	EventType     string
	Payload       json.RawMessage
	Headers       json.RawMessage // nil when NULL
	Attempts      int
	LeaseToken    int64
	CreatedAt     time.Time
}

// ClaimEvents calls idempotency.claim_events: leases up to batch pending
// events for lease (0: 30 seconds). Run it on a *sql.DB (each call its
// own READ COMMITTED transaction) or in a READ COMMITTED *sql.Tx.
func (q Queries) ClaimEvents(ctx context.Context, batch int, lease time.Duration) ([]OutboxEvent, error) {
	if lease == 0 {
		lease = 30 * time.Second
	}
	out := []OutboxEvent{}
	err := q.rows(ctx, `SELECT id, aggregate_type, aggregate_id, event_type, payload, headers,
	 attempts, lease_token, created_at FROM idempotency.claim_events($1, $2::interval)`, []any{batch, interval(lease)},
		func(rows *sql.Rows) error {
			var e OutboxEvent
			var payload, headers []byte
			if err := rows.Scan(&e.ID, &e.AggregateType, &e.AggregateID, &e.EventType, &payload, &headers,
				&e.Attempts, &e.LeaseToken, &e.CreatedAt); err != nil {
				return err
			}
			e.Payload = json.RawMessage(payload)
			if headers != nil {
				e.Headers = json.RawMessage(headers)
			}
			out = append(out, e)
			return nil
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MarkPublished calls idempotency.mark_published under the batch's lease
// token; returns how many it marked.
func (q Queries) MarkPublished(ctx context.Context, ids []int64, leaseToken int64) (int, error) {
	var n int
	err := q.row(ctx, "SELECT idempotency.mark_published($1::bigint[], $2::bigint)", []any{pq.Array(ids), leaseToken}, &n)
	return n, err
}

// MarkFailed calls idempotency.mark_failed: counts an attempt, keeps
// reason, releases the lease.
func (q Queries) MarkFailed(ctx context.Context, ids []int64, reason string, leaseToken int64) (int, error) {
	var n int
	err := q.row(ctx, "SELECT idempotency.mark_failed($1::bigint[], $2, $3::bigint)",
		[]any{pq.Array(ids), reason, leaseToken}, &n)
	return n, err
}

// notify sends an empty notification on channel (the relay's probe).
func (q Queries) notify(ctx context.Context, channel string) error {
	return q.exec(ctx, "SELECT pg_notify($1, '')", channel)
}

// OutboxQuietCommits calls idempotency.outbox_quiet_commits (the relays'
// wake-up rule, doc/reference.md "Waking relays").
func (q Queries) OutboxQuietCommits(ctx context.Context) (int, error) {
	var n int
	err := q.row(ctx, "SELECT idempotency.outbox_quiet_commits()", nil, &n)
	return n, err
}

// MarkProcessed calls idempotency.process_once(consumer, event_id) in q's
// transaction: true the first time. Client.ProcessOnce runs it with the
// side effects in one transaction.
func (q Queries) MarkProcessed(ctx context.Context, consumer, eventID string) (bool, error) {
	var first bool
	err := q.row(ctx, "SELECT idempotency.process_once($1, $2::text)", []any{consumer, eventID}, &first)
	return first, err
}

// MarkProcessedBatch calls idempotency.process_once(consumer, event_ids):
// the ids seen for the first time, in order of first occurrence.
func (q Queries) MarkProcessedBatch(ctx context.Context, consumer string, eventIDs []string) ([]string, error) {
	return column[string](ctx, q, "SELECT * FROM idempotency.process_once($1, $2::text[])",
		consumer, pq.Array(eventIDs))
}

// InTx runs fn in a transaction on c.DB and commits when it returns nil
// (rolls back otherwise).
func (c *Client) InTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return inTx(ctx, c.DB, fn)
}

// inTx runs fn in a transaction on db and commits when it returns nil
// (rolls back otherwise).
func inTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return wrap(ctx, err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return wrap(ctx, tx.Commit())
}

// ProcessOnce is the inbox: in one transaction it marks (consumer,
// eventID) processed and, the first time only, runs fn with that
// transaction for the side effects; both commit together, and an error
// from fn rolls both back (the event is processed again next time).
// It returns whether fn ran.
func (c *Client) ProcessOnce(ctx context.Context, consumer, eventID string, fn func(tx *sql.Tx) error) (bool, error) {
	ran := false
	err := c.InTx(ctx, func(tx *sql.Tx) error {
		first, err := On(tx).MarkProcessed(ctx, consumer, eventID)
		if err != nil || !first {
			return err
		}
		ran = true
		return fn(tx)
	})
	if err != nil {
		return false, err
	}
	return ran, nil
}
