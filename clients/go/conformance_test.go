package pgidempotency

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// test/conformance/http.json: doc/clients.md's behaviour table as cases
// every package runs (its "grammar" says what a step asks).  This is the
// Go runner; test/conformance/http_check.py runs the same cases against
// the README's quick start over real HTTP.
type confFixture struct {
	Cases []struct {
		Row        string `json:"row"`
		Concurrent *struct {
			N        int  `json:"n"`
			Distinct bool `json:"distinct"`
		} `json:"concurrent"`
		Steps []struct {
			Request confRequest `json:"request"`
			Expect  confExpect  `json:"expect"`
		} `json:"steps"`
	} `json:"cases"`
}

type confRequest struct {
	Method   string          `json:"method"`
	Key      *string         `json:"key"`
	User     json.RawMessage `json:"user"` // absent: alice; null: none
	Body     json.RawMessage `json:"body"`
	BodyText *string         `json:"body_text"`
}

type confExpect struct {
	Status        int                `json:"status"`
	Problem       *bool              `json:"problem"`
	Paid          *int               `json:"paid"`
	Headers       map[string]*string `json:"headers"`
	SameBodyAs    *int               `json:"same_body_as"`
	SameHeadersAs []json.RawMessage  `json:"same_headers_as"` // [step, [names]]
	Expires       []json.RawMessage  `json:"expires"`         // [name, seconds]
}

// confPath: the fixture of the checkout, or of IDEM_TOP when the suite
// runs from a copy of the package.
func confPath() string {
	if top := os.Getenv("IDEM_TOP"); top != "" {
		return filepath.Join(top, "test", "conformance", "http.json")
	}
	return filepath.Join("..", "..", "test", "conformance", "http.json")
}

// newConfApp serves the fixture's app: POST /payments guarded, the caller
// in X-User, 201 {"paid": amount}; {"slow": true} takes 300 ms.
func newConfApp(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/payments", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			fmt.Fprint(w, "no payments listed here")
			return
		}
		var p struct {
			Amount int
			Slow   bool
		}
		_ = json.NewDecoder(r.Body).Decode(&p)
		if p.Slow {
			time.Sleep(300 * time.Millisecond)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/payments/1")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"paid":%d}`, p.Amount)
	})
	srv := httptest.NewServer(Middleware(Options{DB: testDB, Logf: t.Logf,
		Scope: func(r *http.Request) (string, error) {
			if user := r.Header.Get("X-User"); user != "" {
				return user, nil
			}
			return "", ErrUnauthenticated
		}})(mux))
	t.Cleanup(srv.Close)
	return srv
}

var confRepeat = regexp.MustCompile(`\{k\*(\d+)\}`)

func confSend(srv *httptest.Server, q confRequest, key string) (resp, error) {
	method := q.Method
	if method == "" {
		method = http.MethodPost
	}
	body := []byte("{}")
	switch {
	case q.BodyText != nil:
		body = []byte(*q.BodyText)
	case q.Body != nil:
		body = q.Body
	case method == http.MethodGet:
		body = nil
	}
	req, _ := http.NewRequest(method, srv.URL+"/payments", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if q.Key != nil {
		k := confRepeat.ReplaceAllStringFunc(strings.ReplaceAll(*q.Key, "{key}", key), func(m string) string {
			n, _ := strconv.Atoi(confRepeat.FindStringSubmatch(m)[1])
			return strings.Repeat("k", n)
		})
		req.Header["Idempotency-Key"] = []string{k}
	}
	user := "alice"
	if q.User != nil {
		user = ""
		_ = json.Unmarshal(q.User, &user)
	}
	if user != "" {
		req.Header.Set("X-User", user)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		return resp{}, err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, string(b)}, nil
}

// confCheck: "" when r is what e says, else what differs.
func confCheck(r resp, e confExpect, earlier []resp) string {
	if e.Status != 0 && r.status != e.Status {
		return fmt.Sprintf("status %d", e.Status)
	}
	problem := strings.HasPrefix(r.header.Get("Content-Type"), "application/problem+json")
	if e.Problem != nil && *e.Problem != problem {
		return fmt.Sprintf("problem+json %v", *e.Problem)
	}
	if problem && e.Problem != nil {
		var p map[string]any
		if json.Unmarshal([]byte(r.body), &p) != nil || p["type"] != "about:blank" || p["status"] != float64(r.status) || p["title"] == "" {
			return "a problem's type, title and status"
		}
		if _, ok := p["detail"]; !ok {
			return "a problem's detail"
		}
	}
	if e.Paid != nil {
		var p struct{ Paid *int }
		if json.Unmarshal([]byte(r.body), &p) != nil || p.Paid == nil || *p.Paid != *e.Paid {
			return fmt.Sprintf("paid %d", *e.Paid)
		}
	}
	for name, want := range e.Headers {
		got, ok := r.header[http.CanonicalHeaderKey(name)]
		if (want == nil) != !ok || want != nil && got[0] != *want {
			return fmt.Sprintf("%s: %v", name, want)
		}
	}
	if e.SameBodyAs != nil && r.body != earlier[*e.SameBodyAs].body {
		return fmt.Sprintf("the bytes of step %d", *e.SameBodyAs)
	}
	if len(e.SameHeadersAs) == 2 {
		var step int
		var names []string
		_ = json.Unmarshal(e.SameHeadersAs[0], &step)
		_ = json.Unmarshal(e.SameHeadersAs[1], &names)
		for _, name := range names {
			if r.header.Get(name) != earlier[step].header.Get(name) {
				return fmt.Sprintf("%s of step %d", name, step)
			}
		}
	}
	if len(e.Expires) == 2 {
		var name string
		var seconds float64
		_ = json.Unmarshal(e.Expires[0], &name)
		_ = json.Unmarshal(e.Expires[1], &seconds)
		at, err := http.ParseTime(r.header.Get(name))
		if ahead := time.Until(at).Seconds(); err != nil || ahead < seconds-10 || ahead > seconds+10 {
			return fmt.Sprintf("%s %v s ahead", name, seconds)
		}
	}
	return ""
}

func TestHTTPConformance(t *testing.T) {
	raw, err := os.ReadFile(confPath())
	if err != nil {
		t.Fatal(err)
	}
	var fx confFixture
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	srv := newConfApp(t)
	for n, c := range fx.Cases {
		c := c
		t.Run(fmt.Sprintf("%02d %s", n, c.Row), func(t *testing.T) {
			fresh := fmt.Sprintf("conformance-%d-%s", n, newKey(t))
			if c.Concurrent != nil {
				step := c.Steps[0]
				answers := make([]resp, c.Concurrent.N)
				var wg sync.WaitGroup
				for i := range answers {
					key := fresh
					if c.Concurrent.Distinct {
						key = fmt.Sprintf("%s-%d", fresh, i)
					}
					wg.Add(1)
					go func(i int, key string) {
						defer wg.Done()
						answers[i], _ = confSend(srv, step.Request, key)
					}(i, key)
				}
				wg.Wait()
				runs := 0
				for i, a := range answers {
					switch {
					case c.Concurrent.Distinct || a.status != 409 && a.header.Get("Idempotent-Replayed") == "":
						runs++
						if why := confCheck(a, step.Expect, nil); why != "" {
							t.Fatalf("copy %d: want %s; got %d %v %s", i, why, a.status, a.header, a.body)
						}
					case a.status == 409:
						if n, _ := strconv.Atoi(a.header.Get("Retry-After")); n < 1 || !strings.HasPrefix(a.header.Get("Content-Type"), "application/problem+json") {
							t.Fatalf("copy %d: a 409 problem with Retry-After; got %v %s", i, a.header, a.body)
						}
					}
				}
				if !c.Concurrent.Distinct {
					var first resp
					for _, a := range answers {
						if a.status != 409 && a.header.Get("Idempotent-Replayed") == "" {
							first = a
						}
					}
					for i, a := range answers {
						if a.header.Get("Idempotent-Replayed") == "true" && (a.status != first.status || a.body != first.body) {
							t.Fatalf("copy %d: a replay of the run's answer; got %d %s", i, a.status, a.body)
						}
					}
					if runs != 1 {
						t.Fatalf("one run of %d duplicates, got %d", len(answers), runs)
					}
				}
				return
			}
			var earlier []resp
			for i, step := range c.Steps {
				r, err := confSend(srv, step.Request, fresh)
				if err != nil {
					t.Fatal(err)
				}
				if why := confCheck(r, step.Expect, earlier); why != "" {
					t.Fatalf("step %d: want %s; got %d %v %s", i, why, r.status, r.header, r.body)
				}
				earlier = append(earlier, r)
			}
		})
	}
}
