package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/watchgrade/watchgrade/examples/ctrlruntime"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

func TestControllerRuntimeController(t *testing.T) {
	var story timeline
	// Registered before the story's own cleanups, so it runs after them:
	// after the manager has stopped, whose shutdown is counted too.
	t.Cleanup(func() {
		if story.denied.IsZero() {
			return // the story did not get as far as the denial
		}
		// Until the denial, the routine closes of every watch: no error.
		// From the denial on, Secrets' one escalation: one error at most.
		checkErrorLogs(t, "story", story.began, story.denied, fmt.Sprintf("%T", &corev1.Secret{}), 1)
	})
	story = exercise(t, "ctrlruntime", func(t *testing.T, cfg *rest.Config, namespace string, observer wgwatch.Observer) prometheus.Gatherer {
		// A registry of its own, rather than controller-runtime's global
		// one, so that this test reads only its own manager's metrics.
		reg := prometheus.NewRegistry()
		cfg = rest.CopyConfig(cfg)
		cfg.Wrap(shortWatches)
		mgr, _, err := ctrlruntime.NewManager(cfg, ctrlruntime.Options{Namespace: namespace, Observer: observer, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
		return reg
	})
}

// shortWatches asks the server to end every watch after two seconds. An
// informer's reflector sends a timeout of its own (5 to 10 minutes), which
// the server honours over --min-request-timeout; this puts the routine
// closes of a real cluster's 30 to 60 minutes within the test. Two, not
// one: a session goes live once it has stayed open for ShortSession (1 s)
// and the informer has taken what it delivered, so watches of exactly one
// second would close before they go live, and be graded as flapping.
func shortWatches(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		q := req.URL.Query()
		if q.Get("watch") == "true" || q.Get("watch") == "1" {
			req = req.Clone(req.Context())
			q.Set("timeoutSeconds", "2")
			req.URL.RawQuery = q.Encode()
		}
		return next.RoundTrip(req)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// ctrlErrors holds every line the controller-runtime controller logs at
// error level. controller-runtime's logger (sigs.k8s.io/controller-runtime/pkg/log)
// is what its manager, cache, controllers and event recorder log to, the
// reflectors too (through the context the cache runs them with: client-go's
// default watch error handler's "Failed to watch" lands there), and
// wgctrl's Grader, whose graded watch error log replaces that handler.
// controller-runtime takes the first logger set in a process, so it is set
// once here for the whole test binary; only the controller-runtime
// managers log through it (the example controller's, and those of
// TestControllerRuntimeInformerOutage; the client-go controller logs
// nothing at error level, the kubebuilder operator runs as a process of its own, and
// the embedded kube-apiserver logs through klog). Tests in this package
// run one after another, so a test counts the lines logged while it runs.
var ctrlErrors = &ctrlErrorLog{}

func init() { ctrllog.SetLogger(logr.New(&ctrlErrorSink{lines: ctrlErrors})) }

// ctrlErrorLine is one line logged at error level.
type ctrlErrorLine struct {
	at   time.Time
	name string // the logger's name, dot-joined
	msg  string
	err  error
	kv   []any // the logger's values, then the line's
}

// value returns the value of key on the line, or "".
func (l ctrlErrorLine) value(key string) string {
	for i := 0; i+1 < len(l.kv); i += 2 {
		if k, ok := l.kv[i].(string); ok && k == key {
			return fmt.Sprint(l.kv[i+1])
		}
	}
	return ""
}

func (l ctrlErrorLine) String() string {
	return fmt.Sprintf("%s %s %q err=%q %v", l.at.Format("15:04:05.000"), l.name, l.msg, fmt.Sprint(l.err), l.kv)
}

type ctrlErrorLog struct {
	mu    sync.Mutex
	lines []ctrlErrorLine
}

func (e *ctrlErrorLog) add(l ctrlErrorLine) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lines = append(e.lines, l)
}

// since returns the lines logged at or after from.
func (e *ctrlErrorLog) since(from time.Time) []ctrlErrorLine {
	e.mu.Lock()
	defer e.mu.Unlock()
	i, _ := slices.BinarySearchFunc(e.lines, from, func(l ctrlErrorLine, t time.Time) int { return l.at.Compare(t) })
	return slices.Clone(e.lines[i:])
}

// ctrlErrorSink is a logr.LogSink that keeps the lines logged at error level
// and drops the rest (it enables V(0) only: nothing more is needed).
type ctrlErrorSink struct {
	lines  *ctrlErrorLog
	name   string
	values []any
}

func (s *ctrlErrorSink) Init(logr.RuntimeInfo)    {}
func (s *ctrlErrorSink) Enabled(level int) bool   { return level <= 0 }
func (s *ctrlErrorSink) Info(int, string, ...any) {}
func (s *ctrlErrorSink) WithName(name string) logr.LogSink {
	c := *s
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (s *ctrlErrorSink) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.values = append(slices.Clip(c.values), kv...)
	return &c
}

func (s *ctrlErrorSink) Error(err error, msg string, kv ...any) {
	s.lines.add(ctrlErrorLine{at: time.Now(), name: s.name, msg: msg, err: err, kv: append(slices.Clip(s.values), kv...)})
}

// checkErrorLogs counts the lines the controller-runtime controller logged
// at error level from `from` on, prints them on an e2e line and asserts:
// none, but for the escalations of a denial that began at `denied`, which
// may log one line each (lines about the denied type, whose reflector's
// description is deniedType, "*v1.Secret"); escalations counts the
// controller processes that met the denial. A graded watch error log
// gives exactly that; client-go's default logs a line per failed list or
// watch: one per informer across an apiserver restart, one per retry of
// a denied one.
func checkErrorLogs(t *testing.T, scenario string, from, denied time.Time, deniedType string, escalations int) {
	t.Helper()
	var other, denial []ctrlErrorLine
	for _, l := range ctrlErrors.since(from) {
		if !l.at.Before(denied) && l.value("type") == deniedType {
			denial = append(denial, l)
		} else {
			other = append(other, l)
		}
	}
	fmt.Printf("e2e: error-logs controller=ctrlruntime scenario=%s error_logs=%d denial_error_logs=%d escalations=%d\n",
		scenario, len(other), len(denial), escalations)
	if len(other) != 0 {
		t.Errorf("the controller logged %d lines at error level, not about the denial; want 0 (routine closes and restarts are not errors):%s", len(other), formatErrorLines(other))
	}
	if len(denial) > escalations {
		t.Errorf("the controller logged %d lines at error level about the denial of %s, want at most one per escalation (%d), not one per retry:%s",
			len(denial), deniedType, escalations, formatErrorLines(denial))
	}
}

func formatErrorLines(ls []ctrlErrorLine) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString("\n    " + l.String())
	}
	return b.String()
}
