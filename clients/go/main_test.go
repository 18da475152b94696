// main_test.go: the tests' database (PGHOST, PGPORT, PGUSER, PGDATABASE
// as for psql; test/integration/go_package.sh runs them once per
// edition) and the relay's helper process.  PGIDEM_DSN is added to every
// connection's DSN: the README's line for a transaction pooler
// (binary_parameters=yes for lib/pq, statement_cache_mode=describe for
// pgx; test/pooler/go.sh).  PGIDEM_LISTEN_DSN is the relays' LISTEN
// connection (a direct one when PG* is a pooler), and PGIDEM_POOLER says
// that PG* is a transaction pooler.

package pgidempotency

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var testDB *sql.DB

// driverName is the database/sql driver of the tests: lib/pq, or pgx's
// stdlib with -tags pgx (driver_pgx_test.go).
var driverName = "postgres"

func TestMain(m *testing.M) {
	if os.Getenv("PGIDEM_RELAY_HELPER") != "" {
		os.Exit(relayHelper())
	}
	db, err := open("")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	db.SetMaxOpenConns(20)
	testDB = db
	code := m.Run()
	_ = db.Close()
	os.Exit(code)
}

var keySeq atomic.Int64

// newKey is a key no other test uses, in this run or an earlier one.
func newKey(t *testing.T) string {
	return fmt.Sprintf("go-%s-%d-%d", t.Name(), time.Now().UnixNano(), keySeq.Add(1))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func sqlExec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := testDB.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// open opens the test database with dsn and PGIDEM_DSN.
func open(dsn string) (*sql.DB, error) {
	return sql.Open(driverName, strings.TrimSpace(dsn+" "+os.Getenv("PGIDEM_DSN")))
}

// behindPooler: PG* is a transaction pooler (test/pooler/go.sh).
var behindPooler = os.Getenv("PGIDEM_POOLER") != ""

// openWith opens the test database as a role whose sessions have the
// extension's setting name (idempotency.name) at value, by ALTER ROLE …
// SET: a role's settings reach every server connection of its pool,
// through a transaction pooler too, which refuses a setting sent as a
// startup option (and where a session's SET would leak to the next
// client of its server connection).  The role is a member of the
// extension's owner, for its privileges.
func openWith(t *testing.T, name string, value int) *sql.DB {
	t.Helper()
	role := fmt.Sprintf("idem_go_%s_%d", name, value)
	sqlExec(t, fmt.Sprintf(`DO $$ BEGIN
	 IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '%[1]s') THEN
	  CREATE ROLE %[1]s LOGIN;
	 END IF;
	 EXECUTE format('GRANT %%s TO %[1]s', (SELECT nspowner::regrole FROM pg_catalog.pg_namespace
	                                       WHERE nspname = 'idempotency'));
	 END $$`, role))
	sqlExec(t, fmt.Sprintf("ALTER ROLE %s SET idempotency.%s = %d", role, name, value))
	db, err := open("user=" + role)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}
