package watch_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/watchgrade/watchgrade/watch"
)

// seen records the states passed on, by stream name.
type seen struct{ got []string }

func (s *seen) StateChanged(st watch.State) {
	s.got = append(s.got, st.Stream+"="+string(st.Phase))
}
func (s *seen) SessionEnded(watch.SessionEnd) {}

// Two namespaces' informers of one kind: the kind shows the worst of
// them, each namespace its own, and each is passed on only when it
// changes.
func TestStreamsPassOnTheKindAndEachNamespace(t *testing.T) {
	var all, ns seen
	s := watch.Streams{Observer: &all, InNamespace: &ns}
	a, first := s.Add("ConfigMap.v1", "team-a", nil)
	b, _ := s.Add("ConfigMap.v1", "team-b", nil)
	if !first {
		t.Errorf("team-a's first informer: newNamespace = false")
	}
	a.StateChanged(denied)
	b.StateChanged(live)
	b.StateChanged(live)
	if want := []string{"ConfigMap.v1=Blocked"}; !reflect.DeepEqual(all.got, want) {
		t.Errorf("kind: %v, want %v", all.got, want)
	}
	if want := []string{"team-a/ConfigMap.v1=Blocked", "team-b/ConfigMap.v1=Streaming"}; !reflect.DeepEqual(ns.got, want) {
		t.Errorf("namespaces: %v, want %v", ns.got, want)
	}
	if st, _ := s.Shown("team-b/ConfigMap.v1"); st.Phase != watch.PhaseStreaming {
		t.Errorf("Shown(team-b) = %v, want Streaming", st.Phase)
	}
}

// What an owner follows: the kind for an informer of every namespace, its
// namespace's stream where the cache is restricted, the kind where an
// informer of every namespace serves a namespace without its own, and
// the configured namespaces before any informer exists.
func TestStreamsDependencies(t *testing.T) {
	var s watch.Streams
	s.Configured = func(name string) []string { return []string{"team-a"} }
	if got := s.Dependencies("Secret.v1", []string{"team-a"}); !reflect.DeepEqual(got, []string{"team-a/Secret.v1"}) {
		t.Errorf("configured, no informer: %v", got)
	}
	s.Add("Secret.v1", "team-a", nil)
	if got := s.Dependencies("Secret.v1", []string{"team-a", "team-b"}); !reflect.DeepEqual(got, []string{"team-a/Secret.v1", "team-b/Secret.v1"}) {
		t.Errorf("restricted: %v", got)
	}
	if got := s.Missing("Secret.v1", []string{"team-a", "team-b", "team-b"}); !reflect.DeepEqual(got, []string{"team-b"}) {
		t.Errorf("Missing: %v, want [team-b]", got)
	}
	if got := s.Dependencies("Secret.v1", nil); !reflect.DeepEqual(got, []string{"Secret.v1"}) {
		t.Errorf("every namespace: %v", got)
	}
	s.Add("Secret.v1", "", nil)
	if got := s.Dependencies("Secret.v1", []string{"team-a", "team-b"}); !reflect.DeepEqual(got, []string{"team-a/Secret.v1", "Secret.v1"}) {
		t.Errorf("an informer of every namespace serves team-b: %v", got)
	}
	if got := s.Missing("Secret.v1", []string{"team-b"}); got != nil {
		t.Errorf("Missing with an informer of every namespace: %v", got)
	}
	if got := s.Aliases("Secret.v1"); !reflect.DeepEqual(got, []string{"Secret.v1", "team-a/Secret.v1"}) {
		t.Errorf("Aliases: %v", got)
	}
}

// Has knows a kind by its name once an informer of it was added, and a
// NamespacedStream only where an informer of the kind is restricted to
// that namespace (an informer of every namespace is heard under the
// kind's name only).
func TestStreamsHas(t *testing.T) {
	var s watch.Streams
	s.Add("Secret.v1", "team-a", nil)
	s.Add("ConfigMap.v1", "", nil)
	for name, want := range map[string]bool{
		"Secret.v1":           true,
		"team-a/Secret.v1":    true,
		"team-b/Secret.v1":    false,
		"ConfigMap.v1":        true,
		"team-a/ConfigMap.v1": false,
		"Pod.v1":              false,
		"team-a/Pod.v1":       false,
		"":                    false,
		"/":                   false,
	} {
		if got := s.Has(name); got != want {
			t.Errorf("Has(%q) = %v, want %v", name, got, want)
		}
	}
}

// The probe waits for each informer not stopped until it has synced,
// naming its namespace, and forgets a kind whose last informer stopped.
func TestStreamsCheck(t *testing.T) {
	var sync watch.SyncCheck
	s := watch.Streams{Synced: &sync, Observer: &sync}
	synced := false
	a, _ := s.Add("Secret.v1", "team-a", func() bool { return synced })
	a.StateChanged(watch.State{Stream: "Secret.v1", Phase: watch.PhaseStarting})
	err := s.Check(nil)
	if !errors.Is(err, watch.ErrNotSynced) || !strings.Contains(err.Error(), "team-a/Secret.v1") {
		t.Fatalf("before the sync: %v, want ErrNotSynced naming team-a/Secret.v1", err)
	}
	synced = true
	if err := s.Check(nil); err != nil {
		t.Errorf("synced: %v", err)
	}
	b, _ := s.Add("ConfigMap.v1", "", func() bool { return false })
	b.StateChanged(watch.State{Stream: "ConfigMap.v1", Phase: watch.PhaseStarting})
	if err := s.Check(nil); err == nil {
		t.Errorf("a new informer not synced: the probe passes")
	}
	b.Stopping()
	b.Stopped()
	if err := s.Check(nil); err != nil {
		t.Errorf("its informer stopped: %v", err)
	}
}

// TestStreamsCheckAwaitingTheLease: a replica waiting for the lease is
// ready (a rollout completes), and once elected it waits for its
// informers as any process does.
func TestStreamsCheckAwaitingTheLease(t *testing.T) {
	var s watch.Streams
	s.Add("Secret.v1", "", func() bool { return false })
	if err := s.Check(nil); err == nil {
		t.Fatal("an informer not synced: the probe passes")
	}
	elected := make(chan struct{})
	s.AwaitLease(elected)
	if err := s.Check(nil); err != nil {
		t.Errorf("waiting for the lease: %v, want the probe to pass", err)
	}
	close(elected)
	if err := s.Check(nil); !errors.Is(err, watch.ErrNotSynced) {
		t.Errorf("elected, an informer not synced: %v, want ErrNotSynced", err)
	}
}

// An informer stopped in a denial and replaced: the kind stays Stalled
// through the new one's start, and is live once it is.
func TestStreamsReplacedInformer(t *testing.T) {
	var all seen
	s := watch.Streams{Observer: &all}
	old, _ := s.Add("ConfigMap.v1", "", nil)
	old.StateChanged(denied)
	old.Stopped()
	repl, newNamespace := s.Add("ConfigMap.v1", "", nil)
	if newNamespace {
		t.Errorf("an informer of every namespace: newNamespace = true")
	}
	repl.StateChanged(start)
	repl.StateChanged(live)
	if want := []string{"ConfigMap.v1=Blocked", "ConfigMap.v1=Streaming"}; !reflect.DeepEqual(all.got, want) {
		t.Errorf("passed on %v, want %v", all.got, want)
	}
	repl.SessionEnded(watch.SessionEnd{Stage: watch.StageStream})
	if repl.Opened() != 1 || old.Opened() != 0 {
		t.Errorf("Opened: replacement %d, old %d; want 1, 0", repl.Opened(), old.Opened())
	}
}

// A cache restricted to two namespaces runs an informer of ConfigMaps in
// each. RBAC denies team-b: the kind shows the denial, team-a's owners
// follow team-a's informer only, and stay unaffected.
func ExampleStreams() {
	show := func(who string) watch.Observer {
		return watch.ObserverFuncs{StateChangedFunc: func(s watch.State) {
			fmt.Printf("%s: %s %s\n", who, s.Stream, s.Phase)
		}}
	}
	s := watch.Streams{Observer: show("metrics"), InNamespace: show("owners")}
	a, _ := s.Add("ConfigMap.v1", "team-a", nil)
	b, _ := s.Add("ConfigMap.v1", "team-b", nil)
	a.StateChanged(watch.State{Stream: "ConfigMap.v1", Phase: watch.PhaseStreaming})
	b.StateChanged(watch.State{Stream: "ConfigMap.v1", Phase: watch.PhaseBlocked, Reason: watch.ReasonForbidden, NeedsHuman: true})
	fmt.Println("a team-a owner follows", s.Dependencies("ConfigMap.v1", []string{"team-a"}))
	fmt.Println("a team-c owner waits on", s.Missing("ConfigMap.v1", []string{"team-c"}))
	// Output:
	// metrics: ConfigMap.v1 Streaming
	// owners: team-a/ConfigMap.v1 Streaming
	// metrics: ConfigMap.v1 Blocked
	// owners: team-b/ConfigMap.v1 Blocked
	// a team-a owner follows [team-a/ConfigMap.v1]
	// a team-c owner waits on [team-c]
}

// The name under which the owners of one namespace follow a kind whose
// informers the cache restricts to namespaces.
func ExampleNamespacedStream() {
	fmt.Println(watch.NamespacedStream("team-a", "ConfigMap.v1"))
	// Output: team-a/ConfigMap.v1
}

func ExampleStreamName() {
	fmt.Println(watch.StreamName(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}))
	fmt.Println(watch.StreamName(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}))
	// Output:
	// ConfigMap.v1
	// Deployment.v1.apps
}

// On a replica waiting for the lease the probe passes: it runs no
// controller, so it has nothing to sync, and a rollout completes. Once
// elected, it waits for its informers.
func ExampleStreams_AwaitLease() {
	var s watch.Streams
	s.Add("ConfigMap.v1", "", func() bool { return false }) // not synced yet
	elected := make(chan struct{})                          // manager.Elected(), or closed by OnStartedLeading
	s.AwaitLease(elected)
	fmt.Println("waiting for the lease:", s.Check(nil))
	close(elected)
	fmt.Println("elected:", s.Check(nil))
	// Output:
	// waiting for the lease: <nil>
	// elected: watchgrade/watch: not synced: the informers of ConfigMap.v1 have not synced
}
