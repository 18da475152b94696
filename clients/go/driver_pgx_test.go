//go:build pgx

// driver_pgx_test.go: built with -tags pgx, the suite runs on pgx's
// database/sql driver (github.com/jackc/pgx/v4/stdlib) instead of lib/pq
// when PGIDEM_DRIVER=pgx.

package pgidempotency

import (
	"os"

	_ "github.com/jackc/pgx/v4/stdlib"
)

func init() {
	if os.Getenv("PGIDEM_DRIVER") == "pgx" {
		driverName = "pgx"
	}
}
