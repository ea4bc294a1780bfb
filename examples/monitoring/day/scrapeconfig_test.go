package day

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	_ "github.com/prometheus/prometheus/discovery/kubernetes" // kubernetes_sd_configs
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/scrape"
)

// TestScrapeConfigSnippet loads scrape-config.yaml as Prometheus loads
// prometheus.yml and runs its relabelling on pods as kubernetes_sd's pod
// role reports them: the controller's metrics port is kept, with the
// target labels the rules expect (namespace, pod, container, job,
// instance), and nothing else is.
func TestScrapeConfigSnippet(t *testing.T) {
	cfg, err := config.LoadFile("../prometheus/scrape-config.yaml", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.ScrapeConfigs) != 1 {
		t.Fatalf("%d scrape configs, want 1", len(cfg.ScrapeConfigs))
	}
	sc := cfg.ScrapeConfigs[0]
	if sc.HonorLabels {
		t.Errorf("honor_labels: true; the snippet keeps the default, false (the rules handle both)")
	}
	meta := func(app, port string) model.LabelSet {
		return model.LabelSet{
			model.AddressLabel:                                   "10.0.3.17:" + model.LabelValue(map[string]string{"metrics": "8080", "health": "8081"}[port]),
			"__meta_kubernetes_namespace":                        controllerNamespace,
			"__meta_kubernetes_pod_name":                         "ctl-a",
			"__meta_kubernetes_pod_container_name":               "controller",
			"__meta_kubernetes_pod_container_port_name":          model.LabelValue(port),
			"__meta_kubernetes_pod_label_app_kubernetes_io_name": model.LabelValue(app),
		}
	}
	tg := &targetgroup.Group{Source: "pod/" + controllerNamespace + "/ctl-a", Targets: []model.LabelSet{
		meta("watchtarget-controller", "metrics"), meta("watchtarget-controller", "health"), meta("something-else", "metrics"),
	}}
	targets, errs := scrape.TargetsFromGroup(tg, sc, nil, labels.NewBuilder(labels.EmptyLabels()))
	for _, err := range errs {
		t.Error(err)
	}
	var got []map[string]string
	for _, tgt := range targets {
		if l := tgt.Labels(labels.NewBuilder(labels.EmptyLabels())); !l.IsEmpty() {
			got = append(got, l.Map())
		}
	}
	want := []map[string]string{{
		"namespace": controllerNamespace, "pod": "ctl-a", "container": "controller",
		"job": "watchtarget-controller", "instance": "10.0.3.17:8080",
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("targets of scrape-config.yaml (-want +got):\n%s", diff)
	}
}
