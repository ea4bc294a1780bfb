// Package watchgrade is the map of a library for Kubernetes controller
// authors that grades watch sessions, so that a Warning means a human must
// act, Ready=True means no data is being lost, and nothing about a healthy
// cluster looks like a failure.
//
// This package holds no code; start in one of these:
//
//   - [github.com/watchgrade/watchgrade/watch]: graded watch streams, the
//     one function that grades every session ending, and instrumentation
//     for client-go and controller-runtime informers. Start here.
//   - [github.com/watchgrade/watchgrade/readiness]: stream states and your
//     own dependencies (gates) rolled up into the kstatus trio of
//     conditions, Ready, Reconciling and Stalled, with a concurrent
//     accumulator that tells you which owner to requeue.
//   - [github.com/watchgrade/watchgrade/readiness/status]: the status
//     step at the end of a Reconcile, one call: it writes the trio and
//     status.observedGeneration when a reader would see a change, records
//     the Event after the write, and publishes a failed Reconcile (never
//     Ready=True).
//   - [github.com/watchgrade/watchgrade/events]: Event severity from
//     Stalled, recorded only when Ready changes.
//   - [github.com/watchgrade/watchgrade/metrics]: Prometheus metrics that
//     separate routine endings from broken streams, and time to first
//     Ready.
//
// With controller-runtime (a kubebuilder or Operator SDK operator), start
// in github.com/watchgrade/watchgrade/examples/wgctrl instead, a module of
// its own so that this one never requires controller-runtime: it grades
// every informer of the manager's cache, ties each owner kind to the kinds
// its controller watches (For, Owns, Watches), writes the trio and Events
// from Reconcile, and tells owners about a watched kind that RBAC denies or
// whose CRD is missing even while controller-runtime holds the workers back.
// examples/README.md has the few lines to add to a scaffolded project.
//
// For tests: [github.com/watchgrade/watchgrade/watch/watchtest] is a
// scripted ListerWatcher that produces every way a watch ends, and
// [github.com/watchgrade/watchgrade/readiness/readinesstest] checks
// conditions against kstatus's rules.
//
// # Import aliases
//
// The package names collide with packages every controller imports
// (k8s.io/apimachinery/pkg/watch, k8s.io/client-go/tools/events,
// sigs.k8s.io/controller-runtime/pkg/metrics), so import them with a wg
// prefix:
//
//	import (
//		wgevents "github.com/watchgrade/watchgrade/events"
//		wgmetrics "github.com/watchgrade/watchgrade/metrics"
//		wgreadiness "github.com/watchgrade/watchgrade/readiness"
//		wgwatch "github.com/watchgrade/watchgrade/watch"
//	)
package watchgrade
