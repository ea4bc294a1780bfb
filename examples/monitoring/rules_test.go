package monitoring_test

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const (
	rulesFile          = "prometheus/rules.yaml"
	prometheusRuleFile = "prometheus/prometheusrule.yaml"
)

type rules struct{ *rulefmt.RuleGroups }

func (r rules) rules() []rulefmt.Rule {
	var out []rulefmt.Rule
	for _, g := range r.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// readRules parses rules.yaml as Prometheus does when it loads a rule
// file: unknown fields rejected, every expression parsed and checked.
func readRules(t *testing.T) rules {
	t.Helper()
	rgs, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, parser.NewParser(parser.Options{}), nil)
	for _, err := range errs {
		t.Error(err)
	}
	if rgs == nil || len(errs) > 0 {
		t.FailNow()
	}
	return rules{rgs}
}

func TestRulesFileLoads(t *testing.T) {
	r := readRules(t)
	var alerts, records int
	for _, rule := range r.rules() {
		if rule.Alert != "" {
			alerts++
			if rule.Labels["severity"] != "page" && rule.Labels["severity"] != "ticket" {
				t.Errorf("alert %s: severity %q, want page or ticket", rule.Alert, rule.Labels["severity"])
			}
		} else {
			records++
		}
	}
	if alerts == 0 || records == 0 {
		t.Errorf("%d alerts and %d recording rules, want some of each", alerts, records)
	}
}

// TestPrometheusRuleMatchesRulesFile decodes the PrometheusRule with the
// Prometheus Operator's own API types, strictly (an unknown or misspelt
// field fails), and holds its groups to rules.yaml's.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	b, err := os.ReadFile(prometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	var pr monitoringv1.PrometheusRule
	if err := yaml.UnmarshalStrict(b, &pr); err != nil {
		t.Fatalf("%s: %v", prometheusRuleFile, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != monitoringv1.PrometheusRuleKind {
		t.Errorf("%s is %s %s, want monitoring.coreos.com/v1 PrometheusRule", prometheusRuleFile, pr.APIVersion, pr.Kind)
	}
	if pr.Name == "" {
		t.Errorf("%s has no metadata.name", prometheusRuleFile)
	}
	var want []monitoringv1.RuleGroup
	for _, g := range readRules(t).Groups {
		wg := monitoringv1.RuleGroup{Name: g.Name}
		for _, r := range g.Rules {
			wr := monitoringv1.Rule{Record: r.Record, Alert: r.Alert, Expr: intstr.FromString(r.Expr), Labels: r.Labels, Annotations: r.Annotations}
			if r.For != 0 {
				d := monitoringv1.Duration(r.For.String())
				wr.For = &d
			}
			wg.Rules = append(wg.Rules, wr)
		}
		want = append(want, wg)
	}
	if diff := cmp.Diff(want, pr.Spec.Groups); diff != "" {
		t.Errorf("%s differs from %s (-rules.yaml +PrometheusRule):\n%s", prometheusRuleFile, rulesFile, diff)
	}
}
