// Command demo shows watchgrade grading the watches of a real controller,
// with no cluster to set up:
//
//	cd examples && go run ./demo
//	go run ./demo --timeline demo.html   # and draw the run
//
// It starts etcd and a kube-apiserver on loopback (with
// --min-request-timeout=1, so the routine watch closes a real cluster makes
// every 30 to 60 minutes come every second or two), installs the
// WatchTarget CRD, and runs the plain client-go example controller
// (package clientgo) as its own user with just enough RBAC, following
// ConfigMaps and Secrets that a writer keeps changing. Then, on a timeline
// set by --duration, it
//
//   - restarts the controller, as a rollout would, while the target is
//     Ready, and counts what the new instance publishes about a target
//     that did not change: status writes, Events, Ready dips;
//   - restarts the kube-apiserver: every watch cursor expires (410 Gone)
//     and each stream replays its collection;
//   - takes away the controller's permission to watch Secrets: graded as
//     trouble that may pass, then, once it outlasts the grace, as needing a
//     human: the WatchTarget goes Stalled with one Warning;
//   - gives the permission back: Ready again, with one Normal Event.
//
// It prints each stream state change, the WatchTarget's conditions, each
// Event and every session ending that is not routine; routine ones are
// counted, one line per stream every few seconds (--verbose prints each).
// A summary ends the run; --timeline also writes it as a picture, an HTML
// page or an SVG file that opens from disk.
//
// With --kubeconfig it runs against an existing cluster instead, in its
// own namespace (deleted at the end; the CRD stays). The controller then
// asks for watches of two seconds (timeoutSeconds), since the cluster's own
// last 30 to 60 minutes and RBAC is checked only when a watch opens; and
// instead of an apiserver restart, a stream resumes from a cursor older
// than the apiserver's watch cache. That needs rights to create the CRD,
// Roles and RoleBindings, and to impersonate the demo's controller user.
//
// The exit code is 0 when the story ended as told (stalled once, one
// Warning, recovered), 2 when it did not or the flags are wrong, 1 on an
// error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	opts, err := parseFlags(os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		os.Exit(2) // the flag package has said why
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	sum, err := run(ctx, opts)
	stop()
	os.Exit(exitCode(sum, err, os.Stderr))
}

// parseFlags reads the command line; the run prints to stdout, flag errors
// and usage go to stderr.
func parseFlags(args []string, stdout, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	opts := options{out: stdout}
	routine := fs.Bool("routine", true, "show routine session endings (false: only what changes something)")
	verbose := fs.Bool("verbose", false, fmt.Sprintf("one line per routine session ending, instead of one per stream every %v", foldEvery))
	fs.DurationVar(&opts.duration, "duration", 2*time.Minute, "how long the story runs once the servers are up (at least 45s)")
	fs.StringVar(&opts.kubeconfig, "kubeconfig", "", "run against the cluster in this kubeconfig instead of an embedded one")
	fs.StringVar(&opts.namespace, "namespace", "watchgrade-demo", "namespace the demo creates and works in")
	fs.StringVar(&opts.timeline, "timeline", "", "also draw the run to this file: a page (.html) or a picture (.svg) that opens from disk")
	fs.BoolVar(&opts.serverLogs, "server-logs", false, "also print the servers' and client-go's own logs")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	var err error
	switch {
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected arguments: %v", fs.Args())
	case opts.duration < minDuration:
		err = fmt.Errorf("--duration %v is too short: the story needs at least %v", opts.duration, minDuration)
	case opts.timeline != "":
		_, err = timelineFormat(opts.timeline)
	}
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		fs.Usage()
		return options{}, err
	}
	switch {
	case !*routine:
		opts.endings = endingsHidden
	case *verbose:
		opts.endings = endingsEach
	default:
		opts.endings = endingsFolded
	}
	return opts, nil
}

// exitCode reports err, if any, and returns the exit code for the run.
func exitCode(sum summary, err error, stderr io.Writer) int {
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	if !sum.told() {
		return 2
	}
	return 0
}
