package pipeline_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/watchgrade/watchgrade/internal/judgekit"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// world is a history being played: the simulated API servers of the
// streams, the store of owner objects, the controller processes, and the
// ground truth as it happens.
type world struct {
	t     *testing.T
	h     history
	start time.Time

	store *store

	// mu guards everything below, and what the processes record; stream
	// goroutines, the controller's worker and the history's own goroutine
	// all reach it. It is never held while calling into a server, a
	// stream, the accumulator or a recorder.
	mu      sync.Mutex
	servers []*server
	procs   []*process
	cur     *process
	lives   []*life
	// gates is the ground truth of the caller's own gates, by owner index
	// and gate name, as it changed.
	gates map[int]map[string][]gateMark
	// writesDown is set while status writes are answered 503; downs
	// holds each span of it, with RetryMax after it ended.
	writesDown bool
	downs      []downSpan
	// steps records when each step of the history ran.
	steps []ranStep
	// draining are the informers stopped but not yet returned.
	draining []chan struct{}
	// saved is what the last process persisted of each Stream when it
	// stopped (history.persist); only the history's goroutine reaches it.
	saved []checkpoint
}

// checkpoint is a Stream's cursor and its consumer's view, persisted.
type checkpoint struct {
	cursor string
	view   map[string]string
}

type ranStep struct {
	at   time.Duration
	desc string
}

// server is one stream's collection: its simulated API server and what
// happened to it.
type server struct {
	i    int
	name string // the stream's name
	gr   schema.GroupResource
	srv  *watchtest.Server
	spec streamSpec
	// truth is what the server holds: name -> resourceVersion.
	truth     map[string]string
	faults    map[slot]watchtest.Faults
	open      map[slot]*interval
	intervals []*interval
	actions   []time.Duration
	// handler is the handler fault in force, if any.
	handler *interval
	// served is whether the API server serves the stream's kind (its CRD
	// is installed); installed is when it was installed, 0 for a kind
	// served from the start, -1 while it is not served.
	served    bool
	installed time.Duration
}

// interval is one fault, in force from start to end (-1 while it is).
type interval struct {
	slot       slot
	human      bool
	err        error
	start, end time.Duration
}

func (iv interval) trouble() bool { return iv.slot.Trouble() }

// gateMark is a caller's gate as it became at a moment.
type gateMark struct {
	at       time.Duration
	present  bool
	level    wgreadiness.Level
	starting bool
}

// life is the ground truth of one owner object, by UID.
type life struct {
	o       int
	key     types.NamespacedName
	uid     types.UID
	created time.Duration
	// createdAt is its creationTimestamp, as the store stamped it.
	createdAt time.Time
	deleted   time.Duration // -1 while it exists
	gens      []genMark
	writes    []*write
	// unwritable are the spans in which no status write could land: the
	// status writes refused, and RetryMax after (the status step's
	// longest wait before its next try). The judge looks at what is
	// stored only outside them.
	unwritable *[]downSpan
}

// downSpan is a span of virtual time; to is -1 while it lasts.
type downSpan struct{ from, to time.Duration }

// genMark is a generation of an owner and the streams it depends on.
type genMark struct {
	at      time.Duration
	gen     int64
	streams int // bit i: depends on stream i
}

// write is one status write, as the store took it.
type write struct {
	at            time.Duration
	proc          int
	gen           int64 // the object's
	observed      int64 // status.observedGeneration written
	before, after []metav1.Condition
	obsBefore     *int64
	// events are the Events recorded after it, by recorder kind
	// (0: core/v1, 1: events.k8s.io/v1).
	events [2][]recorded
}

func newWorld(t *testing.T, h history) *world {
	w := &world{t: t, h: h, start: time.Now(), gates: map[int]map[string][]gateMark{}}
	w.store = &store{w: w, objs: map[types.NamespacedName]*ownerObj{}}
	for i, spec := range h.streams {
		s := &server{
			i: i, name: fmt.Sprint("s", i), gr: schema.GroupResource{Resource: "configmaps"},
			srv: watchtest.NewServer(spec.server), spec: spec,
			truth: map[string]string{}, faults: map[slot]watchtest.Faults{}, open: map[slot]*interval{},
			served: h.crd != i,
		}
		if !s.served {
			s.installed = -1
		}
		w.servers = append(w.servers, s)
	}
	return w
}

func (w *world) now() time.Duration { return time.Since(w.start) }

func (w *world) ran(desc string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.steps = append(w.steps, ranStep{w.now(), desc})
}

func ownerKey(o int) types.NamespacedName {
	return types.NamespacedName{Namespace: []string{"ns-a", "ns-b"}[o%2], Name: fmt.Sprint("o", o)}
}

// streamNames returns the names of the streams in the set bits.
func streamNames(bits int, n int) []string {
	var out []string
	for i := range n {
		if bits&(1<<i) != 0 {
			out = append(out, fmt.Sprint("s", i))
		}
	}
	return out
}

// --- the streams' collections --------------------------------------------

func (w *world) write(i int, name string, op int) {
	s := w.servers[i]
	cm := watchtest.ConfigMap(name, "")
	w.mu.Lock()
	_, exists := s.truth[name]
	w.mu.Unlock()
	var rv string
	deleted := false
	switch {
	case !exists:
		obj, err := s.srv.Create(cm)
		if err != nil {
			return
		}
		m, _ := meta.Accessor(obj)
		rv = m.GetResourceVersion()
	case op == 0:
		if err := s.srv.Delete(cm.Namespace, name); err != nil {
			return
		}
		deleted = true
	default:
		obj, err := s.srv.Update(cm)
		if err != nil {
			return
		}
		m, _ := meta.Accessor(obj)
		rv = m.GetResourceVersion()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if deleted {
		delete(s.truth, name)
	} else {
		s.truth[name] = rv
	}
	if w.cur != nil {
		w.cur.markViewLocked(i)
	}
}

func (w *world) faultOn(i int, sl slot, human bool, f watchtest.Faults, err error) {
	s := w.servers[i]
	w.mu.Lock()
	iv := &interval{slot: sl, human: human, err: err, start: w.now(), end: -1}
	s.open[sl] = iv
	s.intervals = append(s.intervals, iv)
	if sl == slotHandler {
		s.handler = iv
		w.mu.Unlock()
		return
	}
	s.faults[sl] = f
	faults := s.combined()
	w.mu.Unlock()
	s.srv.SetFaults(faults)
}

func (w *world) faultOff(i int, sl slot) {
	s := w.servers[i]
	w.mu.Lock()
	iv, ok := s.open[sl]
	if !ok {
		w.mu.Unlock()
		return
	}
	iv.end = w.now()
	delete(s.open, sl)
	if sl == slotHandler {
		s.handler = nil
		w.mu.Unlock()
		return
	}
	delete(s.faults, sl)
	faults := s.combined()
	w.mu.Unlock()
	s.srv.SetFaults(faults)
}

// combined is the faults in force on s, as one.
func (s *server) combined() watchtest.Faults { return judgekit.Combine(s.faults) }

// handlerErr is the error the consumer of stream i returns now, if any.
func (w *world) handlerErrLocked(i int) error {
	if iv := w.servers[i].handler; iv != nil {
		return iv.err
	}
	return nil
}

type actionKind int

const (
	actionClose actionKind = iota
	actionCompact
	actionFail
)

func (w *world) action(i int, kind actionKind) {
	s := w.servers[i]
	w.mu.Lock()
	s.actions = append(s.actions, w.now())
	w.mu.Unlock()
	switch kind {
	case actionClose:
		s.srv.CloseWatches()
	case actionCompact:
		s.srv.Compact()
	case actionFail:
		s.srv.FailWatches(apierrors.NewInternalError(errors.New("unable to decode an event from the watch stream: stream error: INTERNAL_ERROR")))
	}
}

// installCRD has the API server serve stream i's kind from now on.
func (w *world) installCRD(i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.servers[i].served, w.servers[i].installed = true, w.now()
}

// isServed reports whether the API server serves stream i's kind now.
func (w *world) isServed(i int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.servers[i].served
}

func (w *world) advance(i int, n int) { w.servers[i].srv.AdvanceRevision(n) }

// apiserverRestart restarts every server at once: every cursor expires.
func (w *world) apiserverRestart() {
	w.mu.Lock()
	for _, s := range w.servers {
		s.actions = append(s.actions, w.now())
	}
	w.mu.Unlock()
	for _, s := range w.servers {
		s.srv.Restart()
	}
}

// --- the owners ----------------------------------------------------------

func (w *world) lifeOfLocked(uid types.UID) *life {
	for _, l := range w.lives {
		if l.uid == uid {
			return l
		}
	}
	return nil
}

func (w *world) createOwner(o int, streams int) {
	obj, ok := w.store.create(ownerKey(o), streams)
	if !ok {
		return
	}
	w.mu.Lock()
	w.lives = append(w.lives, &life{
		o: o, key: ownerKey(o), uid: obj.meta.UID, created: w.now(), createdAt: obj.meta.CreationTimestamp.Time,
		deleted: -1, gens: []genMark{{w.now(), obj.meta.Generation, streams}}, unwritable: &w.downs,
	})
	p := w.cur
	w.mu.Unlock()
	if p != nil {
		p.ownerEvent(obj, false)
	}
}

func (w *world) deleteOwner(o int) {
	obj, ok := w.store.delete(ownerKey(o))
	if !ok {
		return
	}
	w.mu.Lock()
	w.lifeOfLocked(obj.meta.UID).deleted = w.now()
	p := w.cur
	w.mu.Unlock()
	if p != nil {
		p.ownerEvent(obj, true)
	}
}

// bumpOwner changes an owner's spec: a new generation, depending on the
// streams given (or the same ones for -1).
func (w *world) bumpOwner(o int, streams int) {
	obj, ok := w.store.bump(ownerKey(o), streams)
	if !ok {
		return
	}
	w.mu.Lock()
	l := w.lifeOfLocked(obj.meta.UID)
	l.gens = append(l.gens, genMark{w.now(), obj.meta.Generation, obj.streams})
	p := w.cur
	w.mu.Unlock()
	if p != nil {
		p.ownerEvent(obj, false)
	}
}

// follow makes owner o depend on stream i: created if it is missing,
// otherwise a new generation with i added to its streams, if it lacks it.
func (w *world) follow(o, i int) {
	obj, ok := w.store.get(ownerKey(o))
	switch {
	case !ok:
		w.createOwner(o, 1<<i)
	case obj.streams&(1<<i) == 0:
		w.bumpOwner(o, obj.streams|1<<i)
	}
}

func (w *world) setGate(o int, name string, level wgreadiness.Level, starting bool) {
	w.markGate(o, name, gateMark{present: true, level: level, starting: starting})
}

// failReconcile has owner o's Reconcile fail from now on: its status step
// makes the failure a gate of its own (wgstatus.GateReconcile), which the
// ground truth holds as the caller's gates, progressing while the failure
// is retried, stalled when it is terminal. The Reconcile runs at once, as
// the caller's check tells its controller of a gate.
func (w *world) failReconcile(o int, terminal bool) {
	level := wgreadiness.LevelProgressing
	if terminal {
		level = wgreadiness.LevelStalled
	}
	w.markGate(o, wgstatus.GateReconcile, gateMark{present: true, level: level})
}

// reconcileSucceeds has owner o's Reconcile succeed again, from its next
// run on (at once: what fixed it tells the controller, as a spec change or
// a child's event would).
func (w *world) reconcileSucceeds(o int) {
	w.markGate(o, wgstatus.GateReconcile, gateMark{})
}

// setWritesDown has the API server refuse status writes (503), or take
// them again.
func (w *world) setWritesDown(down bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writesDown = down
	if down {
		w.downs = append(w.downs, downSpan{from: w.now(), to: -1})
	} else if n := len(w.downs); n > 0 {
		w.downs[n-1].to = w.now() + wgstatus.RetryMax + time.Second
	}
}

// reconcileErr is what owner o's Reconcile returns now: nil, an error it
// retries, or a terminal one.
func (w *world) reconcileErr(o int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	marks := w.gates[o][wgstatus.GateReconcile]
	if len(marks) == 0 || !marks[len(marks)-1].present {
		return nil
	}
	if marks[len(marks)-1].level == wgreadiness.LevelStalled {
		return wgstatus.Terminal(errors.New("spec.replicas: must be at most 5, is 7"))
	}
	return errors.New("creating the owner's StatefulSet: the server is currently unable to handle the request")
}

func (w *world) removeGate(o int, name string) {
	w.markGate(o, name, gateMark{})
}

func (w *world) markGate(o int, name string, m gateMark) {
	w.mu.Lock()
	m.at = w.now()
	if w.gates[o] == nil {
		w.gates[o] = map[string][]gateMark{}
	}
	w.gates[o][name] = append(w.gates[o][name], m)
	p := w.cur
	w.mu.Unlock()
	if p == nil {
		return
	}
	// The caller's dependency check tells its controller at once.
	if obj, ok := w.store.get(ownerKey(o)); ok {
		p.ownerEvent(obj, false)
	}
}

// gatesOf returns owner o's gates as the caller's own check reports them
// now.
func (w *world) gatesOf(o int) (present []wgreadiness.Gate, absent []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(w.gates[o])) {
		if name == wgstatus.GateReconcile {
			continue // the status step's, from what the Reconcile returns
		}
		marks := w.gates[o][name]
		m := marks[len(marks)-1]
		if !m.present {
			absent = append(absent, name)
			continue
		}
		g := wgreadiness.Gate{Name: name, Level: m.level, Starting: m.starting}
		switch m.level {
		case wgreadiness.LevelEstablished:
			g.Reason, g.Message = "Accepted", "the dependency is in place"
		case wgreadiness.LevelProgressing:
			g.Reason, g.Message = "Waiting", "waiting for the dependency"
		default:
			g.Reason, g.Message = "Refused", "the dependency refuses our credentials"
		}
		present = append(present, g)
	}
	return present, absent
}

// gateAt returns the mark of owner o's gate in force at t.
func (w *world) gateAt(o int, name string, t time.Duration) gateMark {
	var m gateMark
	for _, g := range w.gates[o][name] {
		if g.at > t {
			break
		}
		m = g
	}
	return m
}

// --- the controller --------------------------------------------------------

func (w *world) startController() {
	w.mu.Lock()
	if w.cur != nil {
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	p := newProcess(w, len(w.procs))
	w.mu.Lock()
	w.procs = append(w.procs, p)
	w.cur = p
	w.mu.Unlock()
	p.run()
}

func (w *world) stopController() {
	w.mu.Lock()
	p := w.cur
	w.cur = nil
	w.mu.Unlock()
	if p != nil {
		p.stop()
		if w.h.persist {
			w.saved = p.checkpoints()
		}
	}
}

func (w *world) rerun(i int) {
	w.mu.Lock()
	p := w.cur
	w.mu.Unlock()
	if p != nil {
		p.rerun(i)
	}
}

// --- the owners' API server ------------------------------------------------

// ownerObj is an owner object as the store holds it.
type ownerObj struct {
	meta     metav1.ObjectMeta
	streams  int
	conds    []metav1.Condition
	observed *int64
}

func (o *ownerObj) clone() *ownerObj {
	c := *o
	o.meta.DeepCopyInto(&c.meta)
	c.conds = slices.Clone(o.conds)
	if o.observed != nil {
		v := *o.observed
		c.observed = &v
	}
	return &c
}

// store is the API server of the owner objects: it stamps UIDs,
// creationTimestamps, generations, resourceVersions and the managedFields
// time of status writes on its clock, and refuses a status write made
// from a stale read.
type store struct {
	w    *world
	mu   sync.Mutex
	rv   int64
	uids int
	objs map[types.NamespacedName]*ownerObj
}

var errConflict = errors.New("the object has been modified")

// stamp is the API server's time, to the second, as it stores times.
func stamp() metav1.Time { return metav1.NewTime(time.Now()).Rfc3339Copy() }

func (s *store) create(key types.NamespacedName, streams int) (*ownerObj, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objs[key]; ok {
		return nil, false
	}
	s.rv++
	s.uids++
	o := &ownerObj{streams: streams, meta: metav1.ObjectMeta{
		Namespace: key.Namespace, Name: key.Name, Generation: 1, CreationTimestamp: stamp(),
		UID:             types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", s.uids, s.uids)),
		ResourceVersion: fmt.Sprint(s.rv),
	}}
	s.objs[key] = o
	return o.clone(), true
}

func (s *store) delete(key types.NamespacedName) (*ownerObj, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[key]
	if !ok {
		return nil, false
	}
	delete(s.objs, key)
	return o.clone(), true
}

func (s *store) bump(key types.NamespacedName, streams int) (*ownerObj, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[key]
	if !ok {
		return nil, false
	}
	s.rv++
	o.meta.Generation++
	o.meta.ResourceVersion = fmt.Sprint(s.rv)
	if streams >= 0 {
		o.streams = streams
	}
	return o.clone(), true
}

func (s *store) get(key types.NamespacedName) (*ownerObj, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[key]
	if !ok {
		return nil, false
	}
	return o.clone(), true
}

func (s *store) list() []*ownerObj {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*ownerObj
	for _, key := range slices.SortedFunc(maps.Keys(s.objs), func(a, b types.NamespacedName) int {
		if a.Namespace != b.Namespace {
			return compareStrings(a.Namespace, b.Namespace)
		}
		return compareStrings(a.Name, b.Name)
	}) {
		out = append(out, s.objs[key].clone())
	}
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// updateStatus writes conds and status.observedGeneration observed on
// the object uid at resourceVersion rv, as process proc, and records the
// write. A stale rv is a conflict, a missing object NotFound, as the API
// server answers.
func (s *store) updateStatus(key types.NamespacedName, uid types.UID, rv string, conds []metav1.Condition, observed int64, proc int) (*ownerObj, *write, error) {
	s.mu.Lock()
	o, ok := s.objs[key]
	if !ok || o.meta.UID != uid {
		s.mu.Unlock()
		return nil, nil, apierrors.NewNotFound(owners, key.Name)
	}
	if o.meta.ResourceVersion != rv {
		s.mu.Unlock()
		return nil, nil, apierrors.NewConflict(owners, key.Name, errConflict)
	}
	s.rv++
	wr := &write{at: s.w.now(), proc: proc, gen: o.meta.Generation, observed: observed, before: o.conds, after: slices.Clone(conds), obsBefore: o.observed}
	o.conds = slices.Clone(conds)
	o.observed = &observed
	o.meta.ResourceVersion = fmt.Sprint(s.rv)
	at := stamp()
	o.meta.ManagedFields = []metav1.ManagedFieldsEntry{{
		Manager: "pipeline-controller", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &at,
	}}
	out := o.clone()
	s.mu.Unlock()

	s.w.mu.Lock()
	if l := s.w.lifeOfLocked(out.meta.UID); l != nil {
		l.writes = append(l.writes, wr)
	}
	s.w.mu.Unlock()
	return out, wr, nil
}
