package watch

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Streams keeps the informers of one process by stream name, and answers
// what an owner that depends on a kind follows. A cache makes one
// informer per representation of a kind it is asked for (typed,
// unstructured, metadata-only) and, restricted to namespaces, one per
// namespace, all named for the kind; an informer removed and made again
// is a new one. Streams merges their states ([Merge]) and passes on:
//
//   - to Observer, the worst state of every informer of a name, as the
//     metrics, a probe and an owner that depends on the kind in every
//     namespace see it;
//   - to InNamespace, the worst state of the informers restricted to one
//     namespace, named [NamespacedStream] ("team-a/ConfigMap.v1"), which an
//     owner that depends on the kind in that namespace follows: another
//     namespace's denial is not its own.
//
// Each is passed on only when it changed. Streams is what wgctrl's Grader
// keeps of controller-runtime's cache; a client-go process with several
// informers of a kind uses it the same way. Its zero value is ready to
// use; it is safe for concurrent use, and passes on states in the order
// its informers published them.
type Streams struct {
	// Observer is told the worst state of each name's informers; nil:
	// nobody.
	Observer Observer
	// InNamespace is told the worst state of each namespace's informers
	// of a name, as [NamespacedStream]; nil: nobody.
	InNamespace Observer
	// Configured, if set, returns the namespaces the process's cache is
	// configured to restrict the kind named name to (none: every
	// namespace), so that an owner follows its namespace's stream under
	// the name it will have before the cache has made its informer.
	Configured func(name string) []string
	// Synced, if set, is the probe's [SyncCheck]: [Streams.Check] tells
	// it each name whose informers have all synced, and a name whose
	// last informer stopped is forgotten, so that the probe does not wait
	// for it.
	Synced *SyncCheck

	// merge serialises Publish and Stop, so that states reach the
	// observers in the order they were merged.
	merge sync.Mutex
	mu    sync.Mutex
	names map[string]*streamInformers
	shown map[string]State
	// leases are the channels AwaitLease was given.
	leases []<-chan struct{}
}

// streamInformers are the informers of one stream name.
type streamInformers struct {
	merge Merge
	infs  []informerRecord
}

// informerRecord is what Streams keeps of one informer.
type informerRecord struct {
	// namespace is the namespace its lists and watches are restricted to,
	// "" for every namespace.
	namespace string
	// synced is its HasSynced (nil: not known, not waited for); stopped
	// is true once it was told to stop or stopped.
	synced  func() bool
	stopped bool
	// opened counts its sessions that ended after their watch opened.
	opened int
}

// StreamName is the stream name of the informers of gvk's kind: the
// kind, its version and its group, dot-separated as kubectl accepts them
// ("ConfigMap.v1", "Deployment.v1.apps", "Guestbook.v1.webapp.example.com").
// It is made from the kind alone, so a kind whose CRD is not installed yet
// has its name too; a controller that knows a resource rather than a kind
// (a GroupVersionResource from a spec, say) names it after the kind its
// RESTMapper maps the resource to (RESTMapper.KindFor). Every informer of
// a kind carries the one name, whatever its representation (typed,
// unstructured, metadata-only) and, restricted to a namespace, with that
// namespace's [NamespacedStream] beside it: an owner depends on the kind,
// whichever informer of it runs, and the metrics see the worst state among
// them. wgctrl names the informers of controller-runtime's cache so.
func StreamName(gvk schema.GroupVersionKind) string {
	name := gvk.Kind + "." + gvk.Version
	if gvk.Group != "" {
		name += "." + gvk.Group
	}
	return name
}

// NamespacedStream is the name under which the state of the informers of
// the stream name restricted to namespace is passed on:
// "team-a/ConfigMap.v1".
func NamespacedStream(namespace, name string) string { return namespace + "/" + name }

// StreamInformer is one informer of a [Streams]: report what it
// publishes to it (it is an [Observer]) and when it stops.
type StreamInformer struct {
	s    *Streams
	name string
	i    int
}

var _ Observer = (*StreamInformer)(nil)

// Add adds an informer of the stream name restricted to namespace ("" for
// every namespace), with synced its HasSynced (nil if it has none), and
// reports whether it is the first of that name in that namespace.
func (s *Streams) Add(name, namespace string, synced func() bool) (inf *StreamInformer, newNamespace bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.names == nil {
		s.names, s.shown = map[string]*streamInformers{}, map[string]State{}
	}
	n := s.names[name]
	if n == nil {
		n = &streamInformers{}
		s.names[name] = n
	}
	newNamespace = namespace != "" && !slices.Contains(s.namespacesLocked(name), namespace)
	n.infs = append(n.infs, informerRecord{namespace: namespace, synced: synced})
	return &StreamInformer{s: s, name: name, i: n.merge.Add(namespace)}, newNamespace
}

// SetSynced sets the informer's HasSynced, for an informer made after
// the ListerWatcher that reports to it.
func (i *StreamInformer) SetSynced(synced func() bool) {
	i.s.mu.Lock()
	i.s.names[i.name].infs[i.i].synced = synced
	i.s.mu.Unlock()
}

// StateChanged merges s, the state the informer published, and passes on
// what changed.
func (i *StreamInformer) StateChanged(s State) {
	i.s.merge.Lock()
	defer i.s.merge.Unlock()
	i.s.mu.Lock()
	i.s.names[i.name].merge.Publish(i.i, s)
	i.s.mu.Unlock()
	i.s.passOn(i.name, i.i)
}

// SessionEnded counts the informer's sessions whose watch opened.
func (i *StreamInformer) SessionEnded(e SessionEnd) {
	if e.Stage == StageStream || e.Stage == StageReplay {
		i.s.mu.Lock()
		i.s.names[i.name].infs[i.i].opened++
		i.s.mu.Unlock()
	}
}

// Opened returns how many of the informer's sessions ended after their
// watch opened.
func (i *StreamInformer) Opened() int {
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	return i.s.names[i.name].infs[i.i].opened
}

// Stopping records that the informer was told to stop (its context
// ended): the probe no longer waits for it, though its Run may take a
// minute to return (a reflector sleeps out its backoff first).
func (i *StreamInformer) Stopping() {
	i.s.mu.Lock()
	i.s.names[i.name].infs[i.i].stopped = true
	i.s.mu.Unlock()
}

// Stopped forgets the informer's state (its Run returned): a stopped
// informer's last state must not keep the owners Stalled, nor its never
// finished sync the probe failing, once another informer serves the kind.
// A stall it stopped in stands until an informer of its namespace has
// been live or needs a human itself ([Merge]). What the informers still
// running publish is passed on if it changed.
func (i *StreamInformer) Stopped() {
	s := i.s
	s.merge.Lock()
	defer s.merge.Unlock()
	s.mu.Lock()
	n := s.names[i.name]
	n.infs[i.i].stopped = true
	running := n.merge.Stop(i.i)
	s.mu.Unlock()
	if !running && s.Synced != nil {
		s.Synced.Forget(i.name)
	}
	s.passOn(i.name, i.i)
}

// passOn passes on the worst state of the informers of name, and of those
// of the i-th one's namespace if it is restricted to one, each if it
// changed. Callers hold merge.
func (s *Streams) passOn(name string, i int) {
	s.mu.Lock()
	merged := &s.names[name].merge
	changed := func(stream string, st State) bool {
		if s.shown[stream] == st {
			return false
		}
		s.shown[stream] = st
		return true
	}
	all, ok := merged.Worst(i, true)
	passAll := ok && changed(name, all)
	var inNamespace State
	passNamespace := false
	if namespace := merged.Namespace(i); namespace != "" {
		if st, ok := merged.Worst(i, false); ok {
			st.Stream = NamespacedStream(namespace, name)
			inNamespace, passNamespace = st, changed(st.Stream, st)
		}
	}
	s.mu.Unlock()
	if passAll && s.Observer != nil {
		s.Observer.StateChanged(all)
	}
	if passNamespace && s.InNamespace != nil {
		s.InNamespace.StateChanged(inNamespace)
	}
}

// Names returns the stream names that have informers, sorted.
func (s *Streams) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.names))
}

// Has reports whether an informer of name was added. For a
// [NamespacedStream] ("shop/Secret.v1") it reports whether an informer of
// the kind restricted to that namespace was added: the informers whose
// states are passed on under that name. An informer of every namespace
// passes its states on under the kind's name only.
func (s *Streams) Has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns, kind, ok := strings.Cut(name, "/"); ok {
		return slices.Contains(s.namespacesLocked(kind), ns)
	}
	return s.names[name] != nil
}

// Shown returns the state last passed on under stream (a name, or a
// [NamespacedStream]), if any.
func (s *Streams) Shown(stream string) (State, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.shown[stream]
	return st, ok
}

// Namespaces returns the namespace of each informer of name ("" for
// every namespace), in the order they were added.
func (s *Streams) Namespaces(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var nss []string
	if n := s.names[name]; n != nil {
		for _, inf := range n.infs {
			nss = append(nss, inf.namespace)
		}
	}
	return nss
}

// namespacesLocked returns the namespaces the informers of name are
// restricted to, each once, in the order they were added.
func (s *Streams) namespacesLocked(name string) []string {
	var nss []string
	if n := s.names[name]; n != nil {
		for _, inf := range n.infs {
			if inf.namespace != "" && !slices.Contains(nss, inf.namespace) {
				nss = append(nss, inf.namespace)
			}
		}
	}
	return nss
}

// everyNamespaceLocked reports whether an informer of name serves every
// namespace.
func (s *Streams) everyNamespaceLocked(name string) bool {
	n := s.names[name]
	return n != nil && slices.ContainsFunc(n.infs, func(inf informerRecord) bool { return inf.namespace == "" })
}

func (s *Streams) configured(name string) []string {
	if s.Configured == nil {
		return nil
	}
	return s.Configured(name)
}

// Dependencies returns the streams an owner that depends on the kind
// named name in namespaces (nil: every namespace) follows: name itself,
// the worst of all its informers, unless the kind's informers are
// restricted to namespaces, in which case one [NamespacedStream] for each
// of namespaces. Before any informer of name is added, the namespaces
// Configured says the cache will restrict it to count. A namespace with
// no informer of its own is followed through name where an informer of
// every namespace serves it, and otherwise under its own
// [NamespacedStream], which waits: the informer is not made yet (a
// controller-runtime cache makes a kind's informers one namespace after
// another, each once the one before has synced), or the cache does not
// watch the kind there ([Streams.Missing]). Either way the owner's data
// there is not watched, and it is not the kind's worst state.
func (s *Streams) Dependencies(name string, namespaces []string) []string {
	s.mu.Lock()
	restricted := s.namespacesLocked(name)
	everyNamespace := s.everyNamespaceLocked(name)
	none := s.names[name] == nil
	s.mu.Unlock()
	if none {
		restricted = s.configured(name)
	}
	if len(restricted) == 0 || namespaces == nil {
		return []string{name}
	}
	var names []string
	for _, ns := range namespaces {
		n := NamespacedStream(ns, name)
		if !slices.Contains(restricted, ns) && everyNamespace {
			n = name
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// Missing returns the namespaces of namespaces in which the informers of
// name are restricted to other namespaces: no informer serves them (yet).
// None where an informer of every namespace serves the kind, or none of
// name was added.
func (s *Streams) Missing(name string, namespaces []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	restricted := s.namespacesLocked(name)
	if len(restricted) == 0 || s.everyNamespaceLocked(name) {
		return nil
	}
	var missing []string
	for _, ns := range namespaces {
		if !slices.Contains(restricted, ns) && !slices.Contains(missing, ns) {
			missing = append(missing, ns)
		}
	}
	return missing
}

// Aliases returns every name under which the state of the kind named name
// may be followed: name, and a [NamespacedStream] for each namespace its
// informers are restricted to or Configured says they will be. What is
// true of the kind as a whole (the API server does not serve it) is told
// under each.
func (s *Streams) Aliases(name string) []string {
	s.mu.Lock()
	nss := s.namespacesLocked(name)
	s.mu.Unlock()
	nss = slices.Concat(s.configured(name), nss)
	slices.Sort(nss)
	names := []string{name}
	for _, ns := range slices.Compact(nss) {
		names = append(names, NamespacedStream(ns, name))
	}
	return names
}

// AwaitLease makes [Streams.Check] pass until elected is closed: give it
// the channel a leader election closes once this process holds the lease
// (controller-runtime's manager.Elected(), or one closed by client-go's
// leaderelection OnStartedLeading). A replica waiting for the lease runs
// no controller, so it makes none of the informers the leader's
// controllers make, and has nothing to sync until it leads; a
// Deployment's rolling update stops the old pod, which holds the lease,
// only once the new one is ready, so a probe that waited there would hang
// every rollout of a leader-elected operator. Once elected, Check waits
// for its informers: it may fail for the seconds its caches take to sync,
// which takes the pod out of its Services and stops nothing. Give it only
// when leader election is on: a channel that never closes keeps the probe
// passing whatever the informers do.
func (s *Streams) AwaitLease(elected <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leases = append(s.leases, elected)
}

// awaitingLease reports whether a channel of AwaitLease is open.
func (s *Streams) awaitingLease() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, elected := range s.leases {
		select {
		case <-elected:
		default:
			return true
		}
	}
	return false
}

// Check is the probe's rule over the informers: it fails while an
// informer not stopped has not synced (its HasSynced, its first list in
// the cache, not its stream's phase: a stream is Streaming once its watch
// has stayed open for ShortSession, a second later), naming each, and
// then as Synced does, if set. A name whose informers have all synced is
// told to Synced as Streaming, for good: an informer added later is
// waited for by its HasSynced.
func (s *Streams) Check(req *http.Request) error {
	if s.awaitingLease() {
		return nil
	}
	var waiting, streamed []string
	s.mu.Lock()
	for _, name := range slices.Sorted(maps.Keys(s.names)) {
		running, synced := 0, 0
		for _, inf := range s.names[name].infs {
			if inf.stopped || inf.synced == nil {
				continue
			}
			running++
			if inf.synced() {
				synced++
				continue
			}
			w := name
			if inf.namespace != "" {
				w = NamespacedStream(inf.namespace, name)
			}
			if !slices.Contains(waiting, w) {
				waiting = append(waiting, w)
			}
		}
		if running > 0 && synced == running {
			streamed = append(streamed, name)
		}
	}
	s.mu.Unlock()
	if s.Synced != nil {
		for _, name := range streamed {
			s.Synced.markSynced(name)
		}
	}
	if len(waiting) > 0 {
		return fmt.Errorf("%w: the informers of %s have not synced", ErrNotSynced, strings.Join(waiting, ", "))
	}
	if s.Synced == nil {
		return nil
	}
	return s.Synced.Check(req)
}
