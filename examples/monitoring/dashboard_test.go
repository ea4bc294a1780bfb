package monitoring_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/watchgrade/watchgrade/examples/monitoring"
	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

const dashboardFile = "grafana/watchgrade.json"

// dashboard is the part of Grafana's dashboard JSON model the test reads.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource map[string]string        `json:"datasource"`
	GridPos    struct{ X, Y, W, H int } `json:"gridPos"`
	Targets    []struct {
		Expr   string `json:"expr"`
		Format string `json:"format"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// exposedNames returns the metric names a real registry holds once the
// library's collectors and the ConditionCollector have something to
// report, with a histogram's _bucket, _sum and _count series.
func exposedNames(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	wm, err := wgmetrics.NewWatchMetrics(reg, wgmetrics.WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gr := schema.GroupResource{Resource: "configmaps"}
	wm.AddResource(gr)
	wm.StateChanged(wgwatch.State{Stream: "s", Resource: gr, Phase: wgwatch.PhaseReplaying})
	wm.StateChanged(wgwatch.State{Stream: "s", Resource: gr, Phase: wgwatch.PhaseStreaming})
	fr, err := wgmetrics.NewFirstReady(reg, wgmetrics.FirstReadyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	obj := &metav1.ObjectMeta{UID: types.UID("u"), CreationTimestamp: metav1.NewTime(created)}
	fr.Observe(gr, obj, nil)
	fr.Observe(gr, obj, &metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(created.Add(3 * time.Second))})
	cc, err := monitoring.NewConditionCollector(monitoring.ConditionCollectorOptions{Name: "watchtarget", Objects: objects{target("app", metav1.Condition{Type: "Stalled", Status: metav1.ConditionTrue})}})
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(cc)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[f.GetName()+suffix] = true
			}
		default:
			names[f.GetName()] = true
		}
	}
	for _, want := range []string{"watchgrade_watch_streams", "watchgrade_time_to_first_ready_seconds_bucket", "watchtarget_status_condition"} {
		if !names[want] {
			t.Fatalf("the registry exposes no %s: %v", want, names)
		}
	}
	return names
}

// grafanaVariables are the variables the dashboard's queries may use,
// with a value Grafana could give each.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "${resource}", ".*", "$resource", ".*")

// grafanaVariable finds a variable left in a query ($1 in label_replace
// is no variable).
var grafanaVariable = regexp.MustCompile(`\$[A-Za-z_{]`)

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// TestDashboardQueriesParseAndNameExposedMetrics: every panel query parses
// with Prometheus's PromQL parser (Grafana's variables filled in) and
// selects only metrics that a real registry of the library exposes.
func TestDashboardQueriesParseAndNameExposedMetrics(t *testing.T) {
	exposed := exposedNames(t)
	d := readDashboard(t)
	p := parser.NewParser(parser.Options{})
	n := 0
	for _, pn := range allPanels(d.Panels) {
		for _, tg := range pn.Targets {
			n++
			q := grafanaVariables.Replace(tg.Expr)
			if grafanaVariable.MatchString(q) {
				t.Errorf("panel %q: query uses a variable the dashboard does not define: %s", pn.Title, tg.Expr)
				continue
			}
			expr, err := p.ParseExpr(q)
			if err != nil {
				t.Errorf("panel %q: %v\n\t%s", pn.Title, err, tg.Expr)
				continue
			}
			for _, vs := range parser.ExtractSelectors(expr) {
				name := ""
				for _, m := range vs {
					if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
						name = m.Value
					}
				}
				if !exposed[name] {
					t.Errorf("panel %q selects %q, which the library does not expose", pn.Title, name)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no queries in the dashboard")
	}
	panels := 0
	for _, pn := range allPanels(d.Panels) {
		if pn.Type != "row" {
			panels++
		}
	}
	fmt.Printf("monitoring: grafana panels=%d queries=%d\n", panels, n)
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, _ := q["query"].(string); strings.HasPrefix(s, "label_values(") {
				metric := strings.TrimSuffix(strings.SplitN(strings.TrimPrefix(s, "label_values("), ",", 2)[0], ")")
				if !exposed[strings.TrimSpace(metric)] {
					t.Errorf("variable %s reads %q, which the library does not expose", v.Name, metric)
				}
			}
		}
	}
}

// TestDashboardShowsWhatTheKitPromises: the panels the kit's README lists,
// each on a metric that holds the answer, laid out without overlap.
func TestDashboardShowsWhatTheKitPromises(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 39 {
		t.Errorf("uid %q, title %q, schemaVersion %d: want a uid, a title and a current schema (39 or later)", d.UID, d.Title, d.SchemaVersion)
	}
	want := map[string]struct{ typ, metric string }{
		"Streams by phase":                 {"timeseries", "watchgrade_watch_streams"},
		"Session endings by outcome":       {"timeseries", "watchgrade_watch_sessions_ended_total"},
		"Session lifetimes (clean closes)": {"heatmap", "watchgrade_watch_session_duration_seconds_bucket"},
		"Replay durations":                 {"timeseries", "watchgrade_watch_replay_duration_seconds_bucket"},
		"Time to first Ready":              {"heatmap", "watchgrade_time_to_first_ready_seconds_bucket"},
		"Stalled objects":                  {"table", "watchtarget_status_condition"},
		"Provisioned without a human":      {"timeseries", "watchgrade_first_outcomes_total"},
	}
	ids := map[int]bool{}
	type cell struct{ x, y int }
	used := map[cell]string{}
	for _, p := range allPanels(d.Panels) {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, taken := used[cell{x, y}]; taken {
					t.Errorf("panels %q and %q overlap at (%d, %d)", other, p.Title, x, y)
				}
				used[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource["uid"] != "${datasource}" {
			t.Errorf("panel %q: datasource %v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		w, ok := want[p.Title]
		if !ok {
			continue
		}
		delete(want, p.Title)
		if p.Type != w.typ {
			t.Errorf("panel %q is a %s, want a %s", p.Title, p.Type, w.typ)
		}
		if len(p.Targets) == 0 || !strings.Contains(p.Targets[0].Expr, w.metric) {
			t.Errorf("panel %q does not query %s", p.Title, w.metric)
		}
		if p.Type == "heatmap" && p.Targets[0].Format != "heatmap" {
			t.Errorf("heatmap %q: format %q, want heatmap (buckets by le)", p.Title, p.Targets[0].Format)
		}
	}
	var missing []string
	for title := range want {
		missing = append(missing, title)
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("dashboard lacks panels %v", missing)
	}
}
