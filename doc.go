// Package watchgrade is the map of a library for Kubernetes controller
// authors that grades watch sessions, so that a Warning means a human must
// act, Ready=True means no data is being lost, and nothing about a healthy
// cluster looks like a failure.
//
// This package holds no code; start in one of these:
//
//   - [github.com/watchgrade/watchgrade/watch]: graded watch streams, the
//     grading function, and instrumentation for client-go and
//     controller-runtime informers. Start here.
//   - [github.com/watchgrade/watchgrade/watch/watchtest]: a scripted
//     ListerWatcher that produces every way a watch ends, for your tests.
//
// # Import aliases
//
// The package names collide with packages every controller imports
// (k8s.io/apimachinery/pkg/watch, k8s.io/client-go/tools/events,
// sigs.k8s.io/controller-runtime/pkg/metrics), so import them with a wg
// prefix:
//
//	import (
//		wgwatch "github.com/watchgrade/watchgrade/watch"
//		"github.com/watchgrade/watchgrade/watch/watchtest"
//	)
package watchgrade
