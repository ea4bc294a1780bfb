// Package e2e runs both example WatchTarget controllers against a real
// kube-apiserver and etcd (the harness of internal/e2e) and checks what a
// user of `kubectl wait` and a human reading Events would see: the target
// becomes Ready for its generation, stays Ready across routine watch
// closes, goes Stalled with exactly one Warning when RBAC denies a
// followed resource for longer than the grace, and recovers when the Role
// is repaired.
package e2e
