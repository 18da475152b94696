module pgidempotency

go 1.19

// The versions Debian 12 packages; chi and pgx are for the tests only
// (chi's router in http_test.go, pgx's database/sql driver with -tags pgx).
require (
	github.com/go-chi/chi/v5 v5.0.7
	github.com/jackc/pgx/v4 v4.15.0
	github.com/lib/pq v1.10.7
)
