package monitoring_test

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/watchgrade/watchgrade/examples/monitoring"
)

// The collector reads an informer's store at every scrape; here a plain
// store stands in for the informer's.
func ExampleNewConditionCollector() {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	_ = store.Add(target("app", metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Forbidden"},
		metav1.Condition{Type: "Stalled", Status: metav1.ConditionTrue, Reason: "Forbidden"}))

	c, err := monitoring.NewConditionCollector(monitoring.ConditionCollectorOptions{Name: "watchtarget", Objects: store})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)

	err = testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP watchtarget_status_condition The status of each condition in status.conditions: 1 for the status it has, 0 for the others.
# TYPE watchtarget_status_condition gauge
watchtarget_status_condition{name="app",namespace="shop",status="False",type="Ready"} 1
watchtarget_status_condition{name="app",namespace="shop",status="False",type="Stalled"} 0
watchtarget_status_condition{name="app",namespace="shop",status="True",type="Ready"} 0
watchtarget_status_condition{name="app",namespace="shop",status="True",type="Stalled"} 1
watchtarget_status_condition{name="app",namespace="shop",status="Unknown",type="Ready"} 0
watchtarget_status_condition{name="app",namespace="shop",status="Unknown",type="Stalled"} 0
`), "watchtarget_status_condition")
	fmt.Println(err)
	// Output: <nil>
}
