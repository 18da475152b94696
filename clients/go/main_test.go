// main_test.go: the tests' database (PGHOST, PGPORT, PGUSER, PGDATABASE
// as for psql; test/integration/go_package.sh runs them once per
// edition) and the relay's helper process.

package pgidempotency

import (
	"context"
	"database/sql"
	"fmt"
	"os"
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
	db, err := sql.Open(driverName, "")
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

// openWith opens the test database with extra connection settings
// (lib/pq sends unknown keys as run-time parameters).
func openWith(settings string) (*sql.DB, error) {
	return sql.Open(driverName, settings)
}
