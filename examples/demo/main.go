// Command demo shows watchgrade grading the watches of a real controller,
// with no cluster to set up:
//
//	cd examples && go run ./demo
//
// It starts etcd and a kube-apiserver on loopback (with
// --min-request-timeout=1, so the routine watch closes a real cluster makes
// every 30 to 60 minutes come every second or two), installs the
// WatchTarget CRD, and runs the plain client-go example controller
// (package clientgo) as its own user with just enough RBAC, following
// ConfigMaps and Secrets that a writer keeps changing. Then, on a timeline
// set by --duration, it
//
//   - restarts the kube-apiserver, as a rollout would: every watch cursor
//     expires (410 Gone) and each stream replays its collection;
//   - takes away the controller's permission to watch Secrets: graded as
//     trouble that may pass, then, once it outlasts the grace, as needing a
//     human: the WatchTarget goes Stalled with one Warning;
//   - gives the permission back: Ready again, with one Normal Event.
//
// It prints every session ending with its grade, each stream state change,
// the WatchTarget's conditions and each Event, and a summary at the end.
//
// With --kubeconfig it runs against an existing cluster instead, in its
// own namespace (deleted at the end; the CRD stays), without the restart.
// That needs rights to create the CRD, Roles and RoleBindings, and to
// impersonate the demo's controller user.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	var opts options
	flag.DurationVar(&opts.duration, "duration", 2*time.Minute, "how long the story runs once the servers are up (at least 45s)")
	flag.StringVar(&opts.kubeconfig, "kubeconfig", "", "run against the cluster in this kubeconfig instead of an embedded one")
	flag.StringVar(&opts.namespace, "namespace", "watchgrade-demo", "namespace the demo creates and works in")
	flag.BoolVar(&opts.routine, "routine", true, "print every routine session ending too (false: only what changes something)")
	flag.BoolVar(&opts.verbose, "verbose", false, "also print the servers' own logs")
	flag.Parse()
	opts.out = os.Stdout

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := run(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	if !sum.told() {
		os.Exit(2)
	}
}
