package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"

	"github.com/watchgrade/watchgrade/examples/clientgo"
	"github.com/watchgrade/watchgrade/examples/internal/sandbox"
	"github.com/watchgrade/watchgrade/examples/monitoring"
	"github.com/watchgrade/watchgrade/examples/watchtarget"
	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
)

// CaptureEnv names the directory where a run writes what it saw, for the
// tests of examples/monitoring: `make monitoring-capture` sets it to
// monitoring/testdata/e2e. Unset, nothing is written; the scrapes and
// their checks run all the same.
const CaptureEnv = "WATCHGRADE_MONITORING_CAPTURE"

// observatory is what an operator runs next to a controller: a scrape of
// its /metrics, plus a process of its own that follows the WatchTargets
// with an informer and publishes their conditions
// ([monitoring.ConditionCollector]) and their time to first Ready
// ([wgmetrics.FirstReady], fed from the informer's events).
type observatory struct {
	t         *testing.T
	dir       string // where to write; "" writes nothing
	url       string
	namespace string

	store   cache.Store
	mu      sync.Mutex
	changed chan struct{}
}

// observe starts the observatory for the controller called name, whose
// metrics are on g; it stops when the test ends.
func observe(t *testing.T, name string, env *sandbox.Env, g prometheus.Gatherer) *observatory {
	o := &observatory{t: t, namespace: env.Namespace, changed: make(chan struct{})}
	if root := os.Getenv(CaptureEnv); root != "" {
		o.dir = filepath.Join(root, name)
		if err := os.MkdirAll(o.dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	fr, err := wgmetrics.NewFirstReady(reg, wgmetrics.FirstReadyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gr := watchtarget.Resource.GroupResource()
	sighting := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			conds, _ := conditionsOf(u)
			fr.Observe(gr, u, meta.FindStatusCondition(conds, "Ready"))
		}
		o.notify()
	}
	informer := cache.NewSharedIndexInformer(clientgo.ListWatch(env.Dynamic, watchtarget.Resource, env.Namespace),
		&unstructured.Unstructured{}, 0, cache.Indexers{})
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    sighting,
		UpdateFunc: func(_, obj any) { sighting(obj) },
		DeleteFunc: func(obj any) {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				fr.Delete(u.GetUID())
			}
			o.notify()
		},
	}); err != nil {
		t.Fatal(err)
	}
	o.store = informer.GetStore()
	cc, err := monitoring.NewConditionCollector(monitoring.ConditionCollectorOptions{Name: "watchtarget", Objects: o.store})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(cc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go informer.Run(ctx.Done())
	srv := httptest.NewServer(promhttp.HandlerFor(prometheus.Gatherers{g, reg}, promhttp.HandlerOpts{}))
	o.url = srv.URL + "/metrics"
	t.Cleanup(func() {
		srv.Close()
		cancel()
	})
	return o
}

func (o *observatory) notify() {
	o.mu.Lock()
	defer o.mu.Unlock()
	close(o.changed)
	o.changed = make(chan struct{})
}

// scrape waits until the observatory's informer holds the WatchTarget
// name in a state that satisfies ok (it follows its own watch, so it can
// lag the test's), then scrapes /metrics as Prometheus would and, when
// capturing, writes the text to metrics-<checkpoint>.txt.
func (o *observatory) scrape(ctx context.Context, checkpoint, name string, ok func(*unstructured.Unstructured) bool) string {
	o.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		o.mu.Lock()
		changed := o.changed
		o.mu.Unlock()
		item, found, _ := o.store.GetByKey(o.namespace + "/" + name)
		if u, isU := item.(*unstructured.Unstructured); found && isU && ok(u) {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			o.t.Fatalf("observatory: WatchTarget %s not seen in state %q within 30s", name, checkpoint)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.url, nil)
	if err != nil {
		o.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		o.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		o.t.Fatalf("scrape: %v %s", err, resp.Status)
	}
	o.write("metrics-"+checkpoint+".txt", body)
	return string(body)
}

// fixtures writes, when capturing, the WatchTarget as the API server sent
// it, the first time the run showed each of these states: ready (kstatus
// Current), inprogress (Reconciling=True: kstatus InProgress), stalled
// (kstatus Failed), and unobserved (a generation the controller had not
// observed yet: kstatus InProgress). These are the fixtures of the Argo CD
// health check. A state a run did not show (the client-go controller
// often goes straight to Ready) leaves its file as it was.
func (o *observatory) fixtures(history []sandbox.Target) {
	o.t.Helper()
	states := []struct {
		file string
		is   func(s sandbox.Target, kstatus status.Status) bool
	}{
		{"ready", func(_ sandbox.Target, k status.Status) bool { return k == status.CurrentStatus }},
		{"inprogress", func(s sandbox.Target, _ status.Status) bool {
			return s.Status(wgreadiness.ConditionReconciling) == metav1.ConditionTrue
		}},
		{"stalled", func(_ sandbox.Target, k status.Status) bool { return k == status.FailedStatus }},
		{"unobserved", func(s sandbox.Target, _ status.Status) bool { return s.Generation > s.ObservedGeneration }},
	}
	for _, st := range states {
		found := false
		for _, s := range history {
			if s.Object == nil || len(s.Conditions) == 0 {
				continue // not yet written by the controller
			}
			res, err := status.Compute(s.Object)
			if err != nil {
				o.t.Fatalf("kstatus of %v: %v", s, err)
			}
			if !st.is(s, res.Status) {
				continue
			}
			out, err := yaml.Marshal(s.Object.Object)
			if err != nil {
				o.t.Fatal(err)
			}
			o.write(st.file+".yaml", out)
			found = true
			break
		}
		if !found {
			o.t.Logf("observatory: no %s object in this run", st.file)
		}
	}
}

func (o *observatory) write(file string, data []byte) {
	if o.dir == "" {
		return
	}
	if err := os.WriteFile(filepath.Join(o.dir, file), data, 0o644); err != nil {
		o.t.Fatal(err)
	}
}

// conditionsOf reads status.conditions of a WatchTarget.
func conditionsOf(u *unstructured.Unstructured) ([]metav1.Condition, error) {
	wt, err := watchtarget.FromUnstructured(u)
	if err != nil {
		return nil, err
	}
	return wt.Status.Conditions, nil
}

// hasCondition returns a predicate for scrape: condition typ has status s.
func hasCondition(typ string, s metav1.ConditionStatus) func(*unstructured.Unstructured) bool {
	return func(u *unstructured.Unstructured) bool {
		conds, err := conditionsOf(u)
		if err != nil {
			return false
		}
		return meta.IsStatusConditionPresentAndEqual(conds, typ, s)
	}
}

// seriesValue returns the value of the one sample line of text that starts
// with series (name and labels, exactly as the exposition prints them).
func seriesValue(text, series string) (string, error) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return strings.TrimSpace(rest), nil
		}
	}
	return "", fmt.Errorf("no series %s in the scrape", series)
}
