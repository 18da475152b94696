// pooler.go: the package's statements behind a transaction pooler
// (PgBouncer in transaction mode, RDS Proxy, Supavisor), where each
// transaction of a client connection may run on another server connection
// and a server connection serves many clients.  A statement is safe there
// when everything it needs travels in its own transaction: no named
// prepared statement, no session setting, and the parameters bound in the
// round trip that parses the statement.  Drivers differ:
//
//   - lib/pq parses and describes a statement with parameters in one
//     round trip and binds it in a second, each ended by Sync, so the
//     pooler may bind the parameters to another client's unnamed
//     statement: an error when the counts differ, the wrong statement run
//     silently when they fit.  With binary_parameters=yes it sends both
//     at once.
//   - pgx's database/sql driver prepares named statements by default
//     (statement_cache_mode=prepare), which exist only in the server
//     session that prepared them; statement_cache_mode=describe and
//     prefer_simple_protocol=true send each statement whole.
//
// The first call on a *sql.DB looks, once, at what its driver does (a
// probe in one transaction, so that the probe itself is safe): lib/pq
// without binary_parameters gets each of the package's statements in a
// transaction of its own (two more round trips, BEGIN and COMMIT, keep
// parse and bind on one server connection); a driver that leaves named
// statements on the server is refused with ErrNamedStatements, as no
// call of the package could be made safe with it.  A *sql.Tx is safe as
// it is.  A *sql.Conn, or another Querier, runs the statements as its
// driver sends them.

package pgidempotency

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"sync"

	"github.com/lib/pq"
)

// sendMode is how the package sends its statements on one *sql.DB.
type sendMode int

const (
	sendWhole   sendMode = iota + 1 // each statement in one round trip
	sendInTx                        // parse and bind apart: each in a transaction of its own
	sendRefused                     // named prepared statements
)

var sendModes sync.Map // *sql.DB -> sendMode

// probeSQL is the probe's statement: an int8 parameter, which lib/pq's
// binary_parameters sends as the bytes of a []byte (eight bytes: a large
// number) and its text mode as their text (12345678).  Its text is the
// probe's own (a random comment): through a pooler a server session may
// keep another client's named statements, an earlier probe's among them.
const probeSQL = "SELECT $1::int8 AS pgidempotency_probe -- "

// modeOf probes db once (a probe that fails is tried again next call).
func modeOf(ctx context.Context, db *sql.DB) (sendMode, error) {
	if m, ok := sendModes.Load(db); ok {
		return m.(sendMode), nil
	}
	_, isPQ := db.Driver().(*pq.Driver)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, wrap(ctx, err)
	}
	defer func() { _ = tx.Rollback() }()
	var arg any = int64(12345678)
	if isPQ {
		arg = []byte("12345678")
	}
	var n int64
	var named bool
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	probe := probeSQL + hex.EncodeToString(nonce)
	if err := tx.QueryRowContext(ctx, probe, arg).Scan(&n); err != nil {
		return 0, wrap(ctx, err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_prepared_statements
	 WHERE statement = $1)`, probe).Scan(&named); err != nil {
		return 0, wrap(ctx, err)
	}
	m := sendWhole
	switch {
	case named:
		m = sendRefused
	case isPQ && n == 12345678:
		m = sendInTx
	}
	sendModes.Store(db, m)
	return m, nil
}

// do runs fn with a Querier on which q's statements are safe behind a
// transaction pooler: q itself, or for a *sql.DB whose driver binds in a
// second round trip, a transaction of its own, committed when fn returns
// nil.
func (q Queries) do(ctx context.Context, fn func(Querier) error) error {
	db, ok := q.q.(*sql.DB)
	if !ok {
		return fn(q.q)
	}
	m, err := modeOf(ctx, db)
	if err != nil {
		return err
	}
	switch m {
	case sendRefused:
		return ErrNamedStatements
	case sendWhole:
		return fn(db)
	}
	return inTx(ctx, db, func(tx *sql.Tx) error { return fn(tx) })
}
