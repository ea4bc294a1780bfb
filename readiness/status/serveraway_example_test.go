package status_test

import (
	"errors"
	"fmt"
	"net/url"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
)

// Which failures are the API server away or overloaded, retried quietly
// by the status step (Result.Retry), and which are returned as errors.
func ExampleServerAway() {
	gr := schema.GroupResource{Group: "example.dev", Resource: "databases"}
	for _, err := range []error{
		&url.Error{Op: "Put", URL: "https://apiserver:6443", Err: syscall.ECONNREFUSED},
		apierrors.NewServiceUnavailable("etcd leader changed"),
		apierrors.NewTooManyRequests("slow down", 1),
		apierrors.NewForbidden(gr, "db", errors.New("RBAC")),
		errors.New("spec.size is odd"),
	} {
		fmt.Println(wgstatus.ServerAway(err))
	}
	// Output:
	// true
	// true
	// true
	// false
	// false
}
