package pgidempotency

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
)

// How the package sends its statements, by the driver's configuration
// (pooler.go): lib/pq binds in a second round trip unless
// binary_parameters=yes, and then gets a transaction per statement; pgx's
// default statement cache is refused; the README's lines send whole.
func TestSendModes(t *testing.T) {
	cases := map[string][]struct {
		dsn  string
		want sendMode
	}{
		"postgres": {{"", sendInTx}, {"binary_parameters=yes", sendWhole}},
		"pgx": {{"", sendRefused}, {"statement_cache_mode=describe", sendWhole},
			{"prefer_simple_protocol=true", sendWhole}},
	}
	// through a pooler pgx's named statement may collide with one of an
	// earlier connection of the test on that server connection: an error,
	// loud, is what the refusal is about too
	collided := func(err error) bool {
		return behindPooler && (SQLState(err) == "42P05" || SQLState(err) == "26000")
	}
	for _, c := range cases[driverName] {
		db, err := sql.Open(driverName, c.dsn) // without PGIDEM_DSN
		if err != nil {
			t.Fatal(err)
		}
		m, err := modeOf(ctxT(t), db)
		if c.want == sendRefused && collided(err) {
			t.Logf("%s %q: %v", driverName, c.dsn, err)
		} else if err != nil || m != c.want {
			t.Fatalf("%s %q: mode %d (%v), want %d", driverName, c.dsn, m, err, c.want)
		}
		_, err = NewClient(ctxT(t), db)
		if c.want == sendRefused && !errors.Is(err, ErrNamedStatements) && !collided(err) ||
			c.want != sendRefused && err != nil {
			t.Fatalf("%s %q: NewClient: %v", driverName, c.dsn, err)
		}
		_ = db.Close()
	}
}

// Package calls of many goroutines at once, on lib/pq as it comes (parse
// and bind in two round trips; pgx with PGIDEM_DSN, its default being
// refused): each binds its own statement, through a transaction pooler
// too, where another client's statement of as many parameters (Lookup's
// and KeyExpiry's) would run silently in its place.
func TestConcurrentCallsBindTheirOwnStatements(t *testing.T) {
	dsn := ""
	if driverName != "postgres" {
		dsn = os.Getenv("PGIDEM_DSN")
	}
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(16)
	c, err := NewClient(ctxT(t), db)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				ctx := context.Background()
				for i := 0; i < 20; i++ {
					key := newKey(t)
					r, err := c.Claim(ctx, key, map[string]int{"i": i}, ClaimOptions{Scope: "s"})
					if err != nil || r.Outcome != "claimed" {
						return fmt.Errorf("claim: %+v %v", r, err)
					}
					if row, err := c.Lookup(ctx, key, "s"); err != nil || row["idempotency_key"] != key {
						return fmt.Errorf("lookup: %v %v", row, err)
					}
					if err := c.Complete(ctx, key, r.Fence, map[string]int{"done": i}, 201, CompleteOptions{Scope: "s"}); err != nil {
						return fmt.Errorf("complete: %v", err)
					}
					if e, err := c.KeyExpiry(ctx, key, "s"); err != nil || e == nil {
						return fmt.Errorf("expiry: %v %v", e, err)
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
