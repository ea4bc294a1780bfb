package monitoring_test

import (
	"os"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// decodeStrict decodes one YAML document into out, failing on an unknown
// or misspelt field, as kubectl apply --validate=strict would.
func decodeStrict(t *testing.T, file, doc string, out any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), out); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func readDocs(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n---\n")
}

// TestServiceMonitorAndPodMonitor decodes servicemonitor.yaml (a Service
// and a ServiceMonitor) and podmonitor.yaml strictly with the Kubernetes
// and Prometheus Operator API types, and holds them to each other and to
// what the rules need: the ServiceMonitor selects the Service and names
// its port, the Service and the PodMonitor select the same pods, both
// scrape /metrics every 30 s, and both say honorLabels outright.
func TestServiceMonitorAndPodMonitor(t *testing.T) {
	const smFile, pmFile = "prometheus/servicemonitor.yaml", "prometheus/podmonitor.yaml"
	docs := readDocs(t, smFile)
	if len(docs) != 2 {
		t.Fatalf("%s has %d documents, want 2 (Service, ServiceMonitor)", smFile, len(docs))
	}
	var svc corev1.Service
	decodeStrict(t, smFile, docs[0], &svc)
	var sm monitoringv1.ServiceMonitor
	decodeStrict(t, smFile, docs[1], &sm)
	pmDocs := readDocs(t, pmFile)
	if len(pmDocs) != 1 {
		t.Fatalf("%s has %d documents, want 1", pmFile, len(pmDocs))
	}
	var pm monitoringv1.PodMonitor
	decodeStrict(t, pmFile, pmDocs[0], &pm)

	if svc.APIVersion != "v1" || svc.Kind != "Service" {
		t.Errorf("%s: first document is %s %s, want v1 Service", smFile, svc.APIVersion, svc.Kind)
	}
	if sm.APIVersion != "monitoring.coreos.com/v1" || sm.Kind != monitoringv1.ServiceMonitorsKind {
		t.Errorf("%s: second document is %s %s, want monitoring.coreos.com/v1 ServiceMonitor", smFile, sm.APIVersion, sm.Kind)
	}
	if pm.APIVersion != "monitoring.coreos.com/v1" || pm.Kind != monitoringv1.PodMonitorsKind {
		t.Errorf("%s is %s %s, want monitoring.coreos.com/v1 PodMonitor", pmFile, pm.APIVersion, pm.Kind)
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which the Service does not carry (%v)", k, v, svc.Labels)
		}
	}
	if len(sm.Spec.Endpoints) != 1 || len(svc.Spec.Ports) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name {
		t.Fatalf("the ServiceMonitor's endpoints %+v do not name the Service's port %+v", sm.Spec.Endpoints, svc.Spec.Ports)
	}
	if svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("the Service targets port %s, want the container port named metrics", svc.Spec.Ports[0].TargetPort.String())
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 || pm.Spec.PodMetricsEndpoints[0].Port == nil || *pm.Spec.PodMetricsEndpoints[0].Port != "metrics" {
		t.Fatalf("the PodMonitor's endpoints %+v do not name the container port metrics", pm.Spec.PodMetricsEndpoints)
	}
	for k, v := range pm.Spec.Selector.MatchLabels {
		if svc.Spec.Selector[k] != v {
			t.Errorf("the PodMonitor selects pods by %s=%s, the Service by %v: they must select the same pods", k, v, svc.Spec.Selector)
		}
	}
	sme, pme := sm.Spec.Endpoints[0], pm.Spec.PodMetricsEndpoints[0]
	if sme.Path != "/metrics" || pme.Path != "/metrics" || sme.Interval != "30s" || pme.Interval != "30s" {
		t.Errorf("endpoints scrape %s every %s and %s every %s; want /metrics every 30s", sme.Path, sme.Interval, pme.Path, pme.Interval)
	}
	if !strings.Contains(docs[1], "honorLabels: false") || !strings.Contains(pmDocs[0], "honorLabels: false") {
		t.Errorf("both monitors must say honorLabels outright (false, the default, which rules.yaml handles, as it does true)")
	}
}
