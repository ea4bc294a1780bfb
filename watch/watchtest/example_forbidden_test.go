package watchtest_test

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// A server that denies Secrets in one namespace, as RBAC words it.
func ExampleForbiddenFor() {
	srv := watchtest.NewServer(watchtest.ServerOptions{})
	err := watchtest.ForbiddenFor(schema.GroupResource{Resource: "secrets"}, "team-a")
	srv.SetFaults(watchtest.Faults{Err: err})
	fmt.Println(err)
	// Output:
	// secrets is forbidden: User "system:serviceaccount:default:controller" cannot watch resource "secrets" in API group "" in the namespace "team-a"
}
