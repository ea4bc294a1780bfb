package monitoring_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchgrade/watchgrade/examples/monitoring"
	"github.com/watchgrade/watchgrade/examples/watchtarget"
)

type objects []any

func (o objects) List() []any { return o }

func target(name string, conds ...metav1.Condition) *watchtarget.WatchTarget {
	return &watchtarget.WatchTarget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Status:     watchtarget.Status{Conditions: conds},
	}
}

func TestConditionCollectorReportsEachConditionOneHot(t *testing.T) {
	stalled := target("b",
		metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Forbidden"},
		metav1.Condition{Type: "Stalled", Status: metav1.ConditionTrue, Reason: "Forbidden"})
	u, err := watchtarget.ToUnstructured(stalled)
	if err != nil {
		t.Fatal(err)
	}
	c, err := monitoring.NewConditionCollector(monitoring.ConditionCollectorOptions{
		Name:    "watchtarget",
		Objects: objects{target("a", metav1.Condition{Type: "Ready", Status: metav1.ConditionUnknown, Reason: "Starting"}), u, target("new")},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP watchtarget_info One series per object, value 1.
# TYPE watchtarget_info gauge
watchtarget_info{name="a",namespace="shop"} 1
watchtarget_info{name="b",namespace="shop"} 1
watchtarget_info{name="new",namespace="shop"} 1
# HELP watchtarget_status_condition The status of each condition in status.conditions: 1 for the status it has, 0 for the others.
# TYPE watchtarget_status_condition gauge
watchtarget_status_condition{name="a",namespace="shop",status="False",type="Ready"} 0
watchtarget_status_condition{name="a",namespace="shop",status="True",type="Ready"} 0
watchtarget_status_condition{name="a",namespace="shop",status="Unknown",type="Ready"} 1
watchtarget_status_condition{name="b",namespace="shop",status="False",type="Ready"} 1
watchtarget_status_condition{name="b",namespace="shop",status="False",type="Stalled"} 0
watchtarget_status_condition{name="b",namespace="shop",status="True",type="Ready"} 0
watchtarget_status_condition{name="b",namespace="shop",status="True",type="Stalled"} 1
watchtarget_status_condition{name="b",namespace="shop",status="Unknown",type="Ready"} 0
watchtarget_status_condition{name="b",namespace="shop",status="Unknown",type="Stalled"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("CollectAndLint = %v, %v; want no problems", problems, err)
	}
}

func TestConditionCollectorReadsAtScrapeTime(t *testing.T) {
	var list objects
	c, err := monitoring.NewConditionCollector(monitoring.ConditionCollectorOptions{Name: "watchtarget", Objects: &dynamicList{&list}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	list = objects{target("a"), target("b")}
	if n, err := testutil.GatherAndCount(reg, "watchtarget_info"); err != nil || n != 2 {
		t.Errorf("with two objects: %d info series (%v), want 2", n, err)
	}
	list = objects{target("b")}
	if n, err := testutil.GatherAndCount(reg, "watchtarget_info"); err != nil || n != 1 {
		t.Errorf("after a delete: %d info series (%v), want 1", n, err)
	}
}

type dynamicList struct{ p *objects }

func (d *dynamicList) List() []any { return *d.p }

func TestNewConditionCollectorRequiresNameAndObjects(t *testing.T) {
	for _, opts := range []monitoring.ConditionCollectorOptions{{}, {Name: "x"}, {Objects: objects{}}} {
		if _, err := monitoring.NewConditionCollector(opts); !errors.Is(err, monitoring.ErrInvalidOptions) {
			t.Errorf("NewConditionCollector(%+v) error = %v, want ErrInvalidOptions", opts, err)
		}
	}
}
