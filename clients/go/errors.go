// errors.go: the extension's SQLSTATEs as errors matched with errors.Is
// and errors.As, and a cancelled context as context.Canceled.

package pgidempotency

import (
	"context"
	"errors"
	"fmt"

	"github.com/lib/pq"
)

// Sentinel errors; every error of a database call that carries one of
// these SQLSTATEs matches it with errors.Is.
var (
	// ErrLeaseLost: 55000, object_not_in_prerequisite_state: a holder
	// call whose fence (or lease token) no longer holds; also a claim
	// with Wait when the library is not preloaded.
	ErrLeaseLost        = errors.New("idempotency: lease lost or not the holder (55000)")
	ErrInvalidParameter = errors.New("idempotency: invalid parameter value (22023)")
	ErrResponseTooLarge = errors.New("idempotency: answer over idempotency.max_response_bytes (54000)")
	ErrNotSupported     = errors.New("idempotency: feature not supported, e.g. not READ COMMITTED (0A000)")
	ErrForbidden        = errors.New("idempotency: insufficient privilege (42501)")
	ErrReadOnly         = errors.New("idempotency: read-only transaction (25006)")
	ErrQueryCanceled    = errors.New("idempotency: statement canceled (57014)")
	ErrLockTimeout      = errors.New("idempotency: lock not available (55P03)")
	ErrCheckViolation   = errors.New("idempotency: check violation, e.g. a state machine refused an update (23514)")
	// ErrVersion: the extension is missing or older than MinVersion.
	ErrVersion = errors.New("idempotency: extension missing or too old")
	// ErrNamedStatements: the *sql.DB's driver prepares named statements
	// (pgx's default statement cache), which live in one server session
	// only, while a transaction pooler runs a client's next transaction on
	// another (pooler.go). Add statement_cache_mode=describe (or
	// prefer_simple_protocol=true) to pgx's DSN.
	ErrNamedStatements = errors.New("idempotency: the database/sql driver prepares named statements, " +
		"which a transaction pooler (PgBouncer, RDS Proxy, Supavisor) hands to other server sessions; " +
		"with pgx add statement_cache_mode=describe to the DSN")
)

var sentinels = map[string]error{
	"55000": ErrLeaseLost,
	"22023": ErrInvalidParameter,
	"54000": ErrResponseTooLarge,
	"0A000": ErrNotSupported,
	"42501": ErrForbidden,
	"25006": ErrReadOnly,
	"57014": ErrQueryCanceled,
	"55P03": ErrLockTimeout,
	"23514": ErrCheckViolation,
}

// Error is a database error of a call: its SQLSTATE and message. It
// matches the sentinel of its SQLSTATE, and context.Canceled or
// context.DeadlineExceeded when the call's context ended it (the driver
// sends the server a cancel request, which answers 57014).
type Error struct {
	Code    string // SQLSTATE
	Message string
	Detail  string
	Err     error // the driver's error (*pq.Error)
	ctxErr  error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("idempotency: %s (SQLSTATE %s)", e.Message, e.Code)
	if e.ctxErr != nil {
		msg += ": " + e.ctxErr.Error()
	}
	return msg
}

// Is matches the sentinel of e's SQLSTATE and the context's error.
func (e *Error) Is(target error) bool {
	if e == nil {
		return false
	}
	if s, ok := sentinels[e.Code]; ok && s == target {
		return true
	}
	return e.ctxErr != nil && e.ctxErr == target
}

func (e *Error) Unwrap() error { return e.Err }

// sqlStater is a driver's server error: lib/pq's *pq.Error and pgx's
// *pgconn.PgError (so pgx's database/sql driver works too).
type sqlStater interface {
	error
	SQLState() string
}

// SQLState returns err's SQLSTATE, or "" when it has none.
func SQLState(err error) string {
	var s sqlStater
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// wrap turns a driver error into *Error and a cancelled call into one
// that matches ctx.Err().
func wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	var s sqlStater
	if errors.As(err, &s) {
		out := &Error{Code: s.SQLState(), Message: s.Error(), Err: err}
		var p *pq.Error
		if errors.As(err, &p) {
			out.Message, out.Detail = p.Message, p.Detail
		}
		if ctx.Err() != nil {
			out.ctxErr = ctx.Err()
		}
		return out
	}
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}
