// test/integration/wait_burst/main.go: the Go package's burst app for
// check.py. POST /wait-burst/<n>: the middleware with Wait on a *sql.DB
// limited to n open connections (2, 4, 10), scoped by X-User; the handler
// sleeps 0.35 s and records its run on the same pool.  The DSN is
// PGIDEM_DSN's (binary_parameters=yes through a pooler) and the PG*
// variables'; PGIDEM_SERVER_CONNECTIONS is the pooler's pool
// (Options.ServerConnections).
package main

import (
	"database/sql"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	_ "github.com/lib/pq"
	"pgidempotency"
)

func main() {
	servers, _ := strconv.Atoi(os.Getenv("PGIDEM_SERVER_CONNECTIONS"))
	mux := http.NewServeMux()
	for _, size := range []int{2, 4, 10} {
		db, err := sql.Open("postgres", os.Getenv("PGIDEM_DSN"))
		if err != nil {
			log.Fatal(err)
		}
		db.SetMaxOpenConns(size)
		pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := r.Header.Get("Idempotency-Key")
			time.Sleep(350 * time.Millisecond)
			if _, err := db.ExecContext(r.Context(), "INSERT INTO wait_burst_runs (key) VALUES ($1)", key); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"key": %q, "at": %q}`, key, time.Now().Format(time.RFC3339Nano))
		})
		mux.Handle(fmt.Sprintf("/wait-burst/%d", size), pgidempotency.Middleware(pgidempotency.Options{
			DB: db, Wait: 5 * time.Second, ServerConnections: servers,
			Scope: func(r *http.Request) (string, error) {
				if u := r.Header.Get("X-User"); u != "" {
					return u, nil
				}
				return "", pgidempotency.ErrUnauthenticated
			},
		})(pay))
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("PORT"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listening on", l.Addr())
	log.Fatal(http.Serve(l, mux))
}
