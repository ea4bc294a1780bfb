package day

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	config_util "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/util/teststorage"
)

const (
	rulesFile = "../prometheus/rules.yaml"
	// job is the job name the Prometheus Operator gives the first
	// endpoint of servicemonitor.yaml's ServiceMonitor.
	job = "serviceMonitor/watchtarget-system/watchtarget-controller/0"
	// controllerNamespace is where the controller runs.
	controllerNamespace = "watchtarget-system"
	service             = "watchtarget-controller-metrics"
)

// serviceMonitorConfig is the scrape job the Prometheus Operator (v0.93)
// generates for servicemonitor.yaml: kubernetes_sd endpoints discovery in
// the ServiceMonitor's namespace, kept to the selected Service and port,
// and the target labels the operator attaches (namespace, service, pod,
// container, endpoint, job). The test feeds the target groups that
// discovery would produce (pod and Service metadata), so the relabelling
// below is Prometheus's own; only the discovery itself is left out.
func serviceMonitorConfig(honor bool) string {
	return fmt.Sprintf(`global:
  scrape_interval: 30s
  scrape_timeout: 10s
  evaluation_interval: 1m
scrape_configs:
- job_name: %s
  honor_labels: %v
  scrape_interval: 30s
  metrics_path: /metrics
  relabel_configs:
  - source_labels: [__meta_kubernetes_service_label_app_kubernetes_io_name]
    regex: watchtarget-controller
    action: keep
  - source_labels: [__meta_kubernetes_endpoint_port_name]
    regex: metrics
    action: keep
  - source_labels: [__meta_kubernetes_namespace]
    target_label: namespace
  - source_labels: [__meta_kubernetes_service_name]
    target_label: service
  - source_labels: [__meta_kubernetes_pod_name]
    target_label: pod
  - source_labels: [__meta_kubernetes_pod_container_name]
    target_label: container
  - source_labels: [__meta_kubernetes_service_name]
    target_label: job
  - target_label: endpoint
    replacement: metrics
`, job, honor)
}

// pod is a controller pod as the endpoints discovery reports it.
func pod(name, ip string) model.LabelSet {
	return model.LabelSet{
		model.AddressLabel:                                         model.LabelValue(ip + ":8080"),
		"__meta_kubernetes_namespace":                              controllerNamespace,
		"__meta_kubernetes_service_name":                           service,
		"__meta_kubernetes_service_label_app_kubernetes_io_name":   "watchtarget-controller",
		"__meta_kubernetes_endpoint_port_name":                     "metrics",
		"__meta_kubernetes_pod_name":                               model.LabelValue(name),
		"__meta_kubernetes_pod_container_name":                     "controller",
		"__meta_kubernetes_pod_label_app_kubernetes_io_name":       "watchtarget-controller",
		"__meta_kubernetes_endpoint_address_target_name":           model.LabelValue(name),
		"__meta_kubernetes_endpoints_label_app_kubernetes_io_name": "watchtarget-controller",
	}
}

// prom is a Prometheus in process: its TSDB, its scrape manager scraping
// over the day's network, and its rule groups from rules.yaml, evaluated
// once a minute, in file order, as the rule manager would.
type prom struct {
	t      *testing.T
	db     *teststorage.TestStorage
	scrape *scrape.Manager
	tsets  chan map[string][]*targetgroup.Group
	ran    chan struct{}
	groups []*rules.Group

	// firing is each alert's firing spans, by alert name and labels.
	spans []span
	open  map[string]int // index in spans of each alert firing now
}

// A span is an alert firing from from to to (zero while it fires).
type span struct {
	alert       string
	labels      labels.Labels
	annotations labels.Labels
	from, to    time.Time
}

func (s span) String() string {
	to := "still firing"
	if !s.to.IsZero() {
		to = clock(s.to)
	}
	return fmt.Sprintf("%s%s from %s to %s", s.alert, s.labels, clock(s.from), to)
}

func startPrometheus(t *testing.T, n *network, honor bool) *prom {
	p := &prom{t: t, db: teststorage.New(t), tsets: make(chan map[string][]*targetgroup.Group), ran: make(chan struct{}), open: map[string]int{}}
	cfg, err := config.Load(serviceMonitorConfig(honor), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.scrape, err = scrape.NewManager(&scrape.Options{
		HTTPClientOptions:        []config_util.HTTPClientOption{config_util.WithDialContextFunc(n.dial)},
		DiscoveryReloadInterval:  model.Duration(time.Second),
		DiscoveryReloadOnStartup: true,
	}, nil, nil, p.db, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.scrape.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.ran)
		if err := p.scrape.Run(p.tsets); err != nil {
			t.Error(err)
		}
	}()

	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	manager := rules.NewManager(&rules.ManagerOptions{
		Appendable: p.db, Queryable: p.db, QueryFunc: rules.EngineQueryFunc(engine, p.db),
		NotifyFunc: func(context.Context, string, ...*rules.Alert) {}, Context: context.Background(),
		Registerer: prometheus.NewRegistry(),
	})
	loaded, errs := manager.LoadGroups(time.Minute, labels.EmptyLabels(), "", nil, false, rulesFile)
	for _, err := range errs {
		t.Fatal(err)
	}
	rgs, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, parser.NewParser(parser.Options{}), nil)
	for _, err := range errs {
		t.Fatal(err)
	}
	for _, g := range rgs.Groups {
		p.groups = append(p.groups, loaded[rules.GroupKey(rulesFile, g.Name)])
	}
	return p
}

// targets sets the controller pods the discovery finds.
func (p *prom) targets(pods ...model.LabelSet) {
	p.tsets <- map[string][]*targetgroup.Group{job: {{Source: "endpoints/" + controllerNamespace + "/" + service, Targets: pods}}}
}

// eval evaluates every rule group at now and records which alerts fire.
func (p *prom) eval(ctx context.Context, now time.Time) {
	firing := map[string]span{}
	for _, g := range p.groups {
		g.Eval(ctx, now)
		for _, r := range g.AlertingRules() {
			for _, a := range r.ActiveAlerts() {
				if a.State == rules.StateFiring {
					firing[r.Name()+a.Labels.String()] = span{alert: r.Name(), labels: a.Labels, annotations: a.Annotations}
				}
			}
		}
	}
	for key, i := range p.open {
		if _, ok := firing[key]; !ok {
			p.spans[i].to = now
			delete(p.open, key)
		}
	}
	for key, s := range firing {
		if _, ok := p.open[key]; !ok {
			s.from = now
			p.open[key] = len(p.spans)
			p.spans = append(p.spans, s)
		}
	}
}

// stop stops scraping.
func (p *prom) stop() {
	close(p.tsets)
	<-p.ran
	p.scrape.Stop()
}

// series returns every series stored whose name is one of names, with
// its samples from..to, in label order.
func (p *prom) series(from, to time.Time, names ...string) []stored {
	q, err := p.db.Querier(from.UnixMilli(), to.UnixMilli())
	if err != nil {
		p.t.Fatal(err)
	}
	defer q.Close()
	m, err := labels.NewMatcher(labels.MatchRegexp, labels.MetricName, strings.Join(names, "|"))
	if err != nil {
		p.t.Fatal(err)
	}
	var out []stored
	set := q.Select(context.Background(), true, nil, m)
	for set.Next() {
		s := set.At()
		it := s.Iterator(nil)
		x := stored{labels: s.Labels()}
		for it.Next() != 0 {
			ts, v := it.At()
			x.samples = append(x.samples, sample{t: time.UnixMilli(ts).UTC(), v: v})
		}
		out = append(out, x)
	}
	if err := set.Err(); err != nil {
		p.t.Fatal(err)
	}
	return out
}

type stored struct {
	labels  labels.Labels
	samples []sample
}

type sample struct {
	t time.Time
	v float64
}

// firingBetween returns the spans of alert that overlap [from, to).
func (p *prom) firingBetween(alert string, from, to time.Time) []span {
	var out []span
	for _, s := range p.spans {
		if s.alert == alert && s.from.Before(to) && (s.to.IsZero() || s.to.After(from)) {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].from.Before(out[j].from) })
	return slices.Clip(out)
}
