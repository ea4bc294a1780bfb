package pipeline_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	wgevents "github.com/watchgrade/watchgrade/events"
	"github.com/watchgrade/watchgrade/internal/judgekit"
	wgmetrics "github.com/watchgrade/watchgrade/metrics"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgstatus "github.com/watchgrade/watchgrade/readiness/status"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// owners is the owners' resource, for the first-Ready metric.
var owners = schema.GroupResource{Group: "pipeline.watchgrade.dev", Resource: "owners"}

// process is one run of the controller, wired as the README says: its
// streams report to an Accumulator (and to watch metrics); a worker
// reconciles owners from a queue fed by OnChange and by owner events,
// writes status only when Apply says it changed, records Events through
// both recorder kinds after each write, and feeds FirstReady with every
// sighting. A restart is a new process: a new accumulator, recorders,
// metrics and streams, reading the persisted status.
type process struct {
	w     *world
	id    int
	start time.Duration
	end   time.Duration // -1 while it runs

	ctx    context.Context
	cancel context.CancelFunc

	acc *wgreadiness.Accumulator
	// following is held from an owner's tracking to its Apply, so that
	// what a reconcile tracked is what it applies: a reconcile that
	// tracked as the standby writer (before the workers started) applies
	// as the standby writer, and no owner event in between narrows it.
	following sync.Mutex
	wm        *wgmetrics.WatchMetrics
	fr        *wgmetrics.FirstReady
	reg       *prometheus.Registry
	core, evs *wgevents.Recorder
	status    *wgstatus.Writer
	// lastWrite and lastWritten are the status step's last write, as the
	// store recorded it and answered (guarded by w.mu).
	lastWrite *write
	// errorLines are what the controller logged at error level: the
	// status step's Failed outcomes.
	errorLines  []string
	lastWritten *ownerObj
	q           *queue
	workerDone  chan struct{}
	// runners are the streams' runners, nil for a kind not served yet;
	// runnersMu guards the slice (a kind's AwaitInformer starts its
	// runner), awaiting counts those AwaitInformers.
	runnersMu sync.Mutex
	runners   []*runner
	awaiting  sync.WaitGroup

	// Guarded by w.mu.
	states    [][]stampedState   // by stream
	ends      [][]judgekit.Ended // the session endings, by stream
	views     [][]viewMark       // by stream
	mirrors   []map[string]string
	infs      []cache.SharedIndexInformer
	sightings []sighting
	events    []recorded

	// workersAt is when the worker began to reconcile (history.standby):
	// before it, only the standby writer wrote; -1 until then. streamed
	// marks the streams that have been Streaming in this process.
	workersAt time.Duration
	streamed  []bool

	streams []*wgwatch.Stream // the Streams, kept when run again
	// merged are the informers of each informer stream, as wgctrl's
	// Grader keeps a cache's: every informer run (two at once where the
	// stream's spec says so, one replacing another on a rerun) reports to
	// it, and what it passes on is the stream's state.
	merged []*wgwatch.Streams
	// resumed marks the Streams started from a persisted cursor.
	resumed []bool
}

type stampedState struct {
	at time.Duration
	s  wgwatch.State
}

// viewMark: from at on, the consumer's view of a stream was (or was not)
// what its server holds.
type viewMark struct {
	at       time.Duration
	complete bool
}

// sighting is one call of FirstReady.ObserveConditions.
type sighting struct {
	at      time.Duration
	uid     types.UID
	ns      string
	created time.Time
	ready   *metav1.Condition
	stalled bool // Stalled=True
	// stamped is when ready was stamped (lastTransitionTime, or the last
	// status write); zero without ready.
	stamped time.Time
	result  wgmetrics.FirstReadyResult
}

// recorded is one Event a recorder recorded.
type recorded struct {
	at     time.Duration
	uid    types.UID
	kind   int // 0: core/v1, 1: events.k8s.io/v1
	typ    string
	reason string
}

func newProcess(w *world, id int) *process {
	p := &process{w: w, id: id, start: w.now(), end: -1, q: newQueue(), workerDone: make(chan struct{}), workersAt: -1}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	n := len(w.servers)
	p.states, p.views, p.ends = make([][]stampedState, n), make([][]viewMark, n), make([][]judgekit.Ended, n)
	p.mirrors, p.infs = make([]map[string]string, n), make([]cache.SharedIndexInformer, n)
	p.streams, p.runners, p.resumed = make([]*wgwatch.Stream, n), make([]*runner, n), make([]bool, n)
	p.merged = make([]*wgwatch.Streams, n)
	p.streamed = make([]bool, n)
	if !w.h.standby {
		p.workersAt = p.start
	}
	var err error
	if p.acc, err = wgreadiness.NewAccumulator(wgreadiness.AccumulatorOptions{Rollup: w.h.rollup, StartGrace: w.h.startGrace, Policy: w.h.policy, OnChange: p.q.add}); err != nil {
		w.t.Fatal(err)
	}
	p.reg = prometheus.NewPedanticRegistry()
	if p.wm, err = wgmetrics.NewWatchMetrics(p.reg, wgmetrics.WatchOptions{}); err != nil {
		w.t.Fatal(err)
	}
	if p.fr, err = wgmetrics.NewFirstReady(p.reg, wgmetrics.FirstReadyOptions{}); err != nil {
		w.t.Fatal(err)
	}
	p.fr.AddResource(owners)
	if p.core, err = wgevents.NewRecorder(coreRecorder{p}); err != nil {
		w.t.Fatal(err)
	}
	if p.evs, err = wgevents.NewEventsRecorder(eventsRecorder{p}, wgevents.EventsOptions{}); err != nil {
		w.t.Fatal(err)
	}
	if p.status, err = wgstatus.New(wgstatus.Options{
		Accumulator: p.acc, Update: p.updateStatus, Get: p.getOwner, Resource: owners,
		Events: p.core, FirstReady: sightings{p}, Clock: nowClock{p},
	}); err != nil {
		w.t.Fatal(err)
	}
	return p
}

// run lists the owners (the owner informer's initial list: every
// persisted Ready is sighted before the worker starts), starts the streams
// and the worker.
func (p *process) run() {
	for _, o := range p.w.store.list() {
		p.ownerEvent(o, false)
	}
	for i, s := range p.w.servers {
		if p.w.isServed(i) {
			p.runners[i] = p.startRunner(i)
			continue
		}
		// A kind the API server does not serve: the status step's
		// AwaitInformer reports it and starts its stream once it is
		// served, as wgctrl's Owner does for each watched kind.
		p.awaiting.Go(func() {
			_ = p.status.AwaitInformer(p.ctx, wgstatus.Kind{
				Name: s.name, Resource: s.gr, Settle: settle,
				Served: func(context.Context) (bool, error) { return p.w.isServed(i), nil },
				Start: func(context.Context) error {
					p.runnersMu.Lock()
					defer p.runnersMu.Unlock()
					p.runners[i] = p.startRunner(i)
					return nil
				},
			})
		})
	}
	if p.w.h.standby {
		t := time.AfterFunc(p.w.h.standbyFor, p.workersStart)
		context.AfterFunc(p.ctx, func() { t.Stop() })
	}
	go p.work()
}

// workers reports whether the worker reconciles: always, but in a
// standby history until the process's caches have synced.
func (p *process) workers() bool {
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	return p.workersAt >= 0
}

// workersStart has the worker reconcile from now on, and queues every
// owner, as controller-runtime's informer hands its initial list to a
// controller whose caches have synced.
func (p *process) workersStart() {
	p.w.mu.Lock()
	if p.workersAt >= 0 || p.end >= 0 {
		p.w.mu.Unlock()
		return
	}
	p.workersAt = p.w.now()
	p.w.mu.Unlock()
	for _, o := range p.w.store.list() {
		p.q.add(types.NamespacedName{Namespace: o.meta.Namespace, Name: o.meta.Name})
	}
}

// synced is an observer of stream i in a standby history: once every
// stream of the kinds the standby writer knows (the controller's watches)
// has been Streaming, its caches have synced and the workers start.
func (p *process) synced(i int) wgwatch.Observer {
	return wgwatch.ObserverFuncs{StateChangedFunc: func(s wgwatch.State) {
		if s.Phase != wgwatch.PhaseStreaming || p.w.h.kinds&(1<<i) == 0 {
			return
		}
		p.w.mu.Lock()
		p.streamed[i] = true
		all := true
		for k, done := range p.streamed {
			all = all && (done || p.w.h.kinds&(1<<k) == 0)
		}
		p.w.mu.Unlock()
		if all {
			p.workersStart()
		}
	}}
}

func (p *process) stop() {
	p.cancel()
	p.awaiting.Wait()
	for _, r := range p.runners {
		if r != nil {
			r.stop()
		}
	}
	<-p.workerDone
	p.w.mu.Lock()
	p.end = p.w.now()
	p.w.mu.Unlock()
}

// checkpoints returns each Stream's cursor and its consumer's view, for
// the next process to resume from; a stopped process's only.
func (p *process) checkpoints() []checkpoint {
	out := make([]checkpoint, len(p.streams))
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	for i, st := range p.streams {
		if st != nil {
			out[i] = checkpoint{cursor: st.Cursor(), view: maps.Clone(p.mirrors[i])}
		}
	}
	return out
}

func (p *process) rerun(i int) {
	p.runnersMu.Lock()
	defer p.runnersMu.Unlock()
	if p.runners[i] == nil {
		return // its kind not served yet: nothing runs
	}
	p.runners[i].stop()
	p.runners[i] = p.startRunner(i)
}

// nowClock is the status step's clock: p.now.
type nowClock struct{ p *process }

func (c nowClock) Now() time.Time                  { return c.p.now() }
func (c nowClock) Since(t time.Time) time.Duration { return c.p.now().Sub(t) }

// now is the now passed to Apply: the controller's clock, or a now that
// lags it (see history.lagNow).
func (p *process) now() time.Time { return p.w.h.applyNow(time.Now()) }

func (h history) applyNow(t time.Time) time.Time {
	switch h.lagNow {
	case 1:
		return t.Truncate(time.Minute)
	case 2:
		return t.Add(-time.Minute)
	}
	return t
}

// ownerEvent is the owner informer's handler: every sighting feeds
// FirstReady; the owner's streams and gates are tracked, and the owner
// queued.
func (p *process) ownerEvent(o *ownerObj, deleted bool) {
	key := types.NamespacedName{Namespace: o.meta.Namespace, Name: o.meta.Name}
	if deleted {
		p.status.Forget(key, o.meta.UID)
		return
	}
	p.sight(o)
	p.following.Lock()
	p.follow(o, p.workers())
	p.following.Unlock()
	p.q.add(key)
}

// follow tracks o's streams and sets its gates from the caller's own
// dependency check (the reconcile's: the standby writer knows none).
// workers is what the caller read of p.workers(), under p.following.
func (p *process) follow(o *ownerObj, workers bool) {
	key := types.NamespacedName{Namespace: o.meta.Namespace, Name: o.meta.Name}
	if !workers {
		p.status.Track(key, wgstatus.Dependencies{Kinds: streamNames(o.streams&p.w.h.kinds, len(p.w.servers))})
		return
	}
	p.status.Track(key, wgstatus.Dependencies{Kinds: streamNames(o.streams, len(p.w.servers))})
	var idx int
	for i := range p.w.h.owners {
		if ownerKey(i) == key {
			idx = i
		}
	}
	present, absent := p.w.gatesOf(idx)
	for _, g := range present {
		p.acc.SetGate(key, g)
	}
	for _, name := range absent {
		p.acc.RemoveGate(key, name)
	}
}

func (p *process) sight(o *ownerObj) {
	sightings{p}.ObserveConditions(owners, &o.meta, o.conds)
}

// sightings is the FirstReady the status step feeds: p.fr, each call
// recorded for the judge.
type sightings struct{ p *process }

func (f sightings) ObserveConditions(gr schema.GroupResource, obj metav1.Object, conds []metav1.Condition) wgmetrics.FirstReadyResult {
	p := f.p
	res := p.fr.ObserveConditions(gr, obj, conds)
	ready := meta.FindStatusCondition(conds, wgreadiness.ConditionReady)
	s := sighting{at: p.w.now(), uid: obj.GetUID(), ns: obj.GetNamespace(), created: obj.GetCreationTimestamp().Time, result: res,
		stalled: meta.IsStatusConditionTrue(conds, wgreadiness.ConditionStalled)}
	if ready != nil {
		r := *ready
		s.ready = &r
		s.stamped = r.LastTransitionTime.Time
		if mf := obj.GetManagedFields(); s.stamped.IsZero() && len(mf) > 0 {
			s.stamped = mf[0].Time.Time
		}
	}
	p.w.mu.Lock()
	p.sightings = append(p.sightings, s)
	p.w.mu.Unlock()
	return res
}

func (f sightings) Delete(uid types.UID) { f.p.fr.Delete(uid) }

func (p *process) work() {
	defer close(p.workerDone)
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.q.notify:
		}
		for p.ctx.Err() == nil {
			key, ok := p.q.pop()
			if !ok {
				break
			}
			p.reconcile(key)
		}
	}
}

// reconcile is the controller's reconcile, as the README wires it: the
// status step is watchgrade's (wgstatus.Writer), the standby writer's
// until the workers run.
func (p *process) reconcile(key types.NamespacedName) {
	o, ok := p.w.store.get(key)
	if !ok {
		return // deleted: the owner event forgets it
	}
	p.sight(o)
	// Read once: a reconcile that tracked as the standby writer applies
	// as it, even when the workers start in between.
	p.following.Lock()
	workers := p.workers()
	p.follow(o, workers)
	obj := ownerObject(o)
	p.w.mu.Lock()
	n := len(p.events)
	p.w.mu.Unlock()
	// The Reconcile's own work, as the world has it go: nil, or an error
	// its status step makes a gate of.
	var idx int
	for i := range p.w.h.owners {
		if ownerKey(i) == key {
			idx = i
		}
	}
	reconcileErr := p.w.reconcileErr(idx)
	calls := 1
	if workers && p.w.h.twice {
		calls = 2 // a Reconcile that writes its status early and at its end
	}
	var steps []stepped
	for range calls {
		var res wgstatus.Result
		if workers {
			res = p.status.Write(p.ctx, obj, reconcileErr)
		} else {
			res = p.status.Standby(p.ctx, obj)
		}
		// What this step wrote and recorded, before the next step.
		st := stepped{res: res, from: n}
		p.w.mu.Lock()
		st.wr, st.updated, st.to = p.lastWrite, p.lastWritten, len(p.events)
		p.w.mu.Unlock()
		n = st.to
		steps = append(steps, st)
		if res.Outcome != wgstatus.Written {
			break
		}
	}
	p.following.Unlock()
	for _, st := range steps {
		p.outcome(key, obj, st)
	}
	// A failed Reconcile is retried, as controller-runtime's workqueue
	// does with its backoff; a terminal one is not.
	if workers && reconcileErr != nil && !wgstatus.IsTerminal(reconcileErr) {
		time.AfterFunc(reconcileRetry, func() {
			if p.ctx.Err() == nil {
				p.q.add(key)
			}
		})
	}
}

// settle is how long a kind served again is left to the controller's
// own sources before its AwaitInformer starts its stream, as wgctrl's.
const settle = 15 * time.Second

// reconcileRetry is how long a failed Reconcile waits to run again: about
// where client-go's default controller rate limiter's backoff is after a
// dozen failures.
const reconcileRetry = 10 * time.Second

// stepped is one status step of a Reconcile: its result, the write it
// made (the store's record and the object written) and the Events
// recorded during it (p.events[from:to]).
type stepped struct {
	res      wgstatus.Result
	wr       *write
	updated  *ownerObj
	from, to int
}

// outcome is what the controller does with a status step's result: read
// afresh after a conflict, log an error (counted) for what the step says
// is one, and after a write, the events.k8s.io recorder's Event and the
// write's watch event.
func (p *process) outcome(key types.NamespacedName, obj runtime.Object, st stepped) {
	switch st.res.Outcome {
	case wgstatus.Conflict:
		p.q.add(key) // read afresh
		return
	case wgstatus.Unavailable:
		// Not taken: again after the step's backoff, quietly.
		time.AfterFunc(st.res.RequeueAfter, func() {
			if p.ctx.Err() == nil {
				p.q.add(key)
			}
		})
		return
	case wgstatus.Failed:
		p.w.mu.Lock()
		p.errorLines = append(p.errorLines, fmt.Sprintf("%v %s: %v", p.w.now(), key, st.res.Err))
		p.w.mu.Unlock()
		return
	case wgstatus.Written:
	default:
		return
	}
	p.w.mu.Lock()
	m := len(p.events)
	p.w.mu.Unlock()
	p.evs.Record(obj, st.res.Before, st.res.After)
	p.w.mu.Lock()
	for _, e := range slices.Concat(p.events[st.from:st.to], p.events[m:]) {
		st.wr.events[e.kind] = append(st.wr.events[e.kind], e)
	}
	p.w.mu.Unlock()
	// The write's watch event.
	p.ownerEvent(st.updated, false)
}

// updateStatus is the status step's Update: the store's status write.
func (p *process) updateStatus(_ context.Context, obj runtime.Object) (runtime.Object, error) {
	u := obj.(*unstructured.Unstructured)
	var st struct {
		Conditions         []metav1.Condition `json:"conditions"`
		ObservedGeneration int64              `json:"observedGeneration"`
	}
	m, _, _ := unstructured.NestedMap(u.Object, "status")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &st); err != nil {
		return nil, err
	}
	key := types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}
	p.w.mu.Lock()
	down := p.w.writesDown
	p.w.mu.Unlock()
	if down {
		return nil, apierrors.NewServiceUnavailable("etcd is slow to write")
	}
	updated, wr, err := p.w.store.updateStatus(key, u.GetUID(), u.GetResourceVersion(), st.Conditions, st.ObservedGeneration, p.id)
	if err != nil {
		return nil, err
	}
	p.w.mu.Lock()
	p.lastWrite, p.lastWritten = wr, updated
	p.w.mu.Unlock()
	return ownerObject(updated), nil
}

// getOwner is the status step's Get: a live read.
func (p *process) getOwner(_ context.Context, key types.NamespacedName) (runtime.Object, error) {
	o, ok := p.w.store.get(key)
	if !ok {
		return nil, apierrors.NewNotFound(owners, key.Name)
	}
	return ownerObject(o), nil
}

// ownerObject is o as the API server serves it, for recorders and kstatus.
func ownerObject(o *ownerObj) *unstructured.Unstructured {
	var conds []any
	for _, c := range o.conds {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&c)
		if err != nil {
			panic(err)
		}
		conds = append(conds, m)
	}
	metadata, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&o.meta)
	if err != nil {
		panic(err)
	}
	status := map[string]any{"conditions": conds}
	if o.observed != nil {
		status["observedGeneration"] = *o.observed
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "pipeline.watchgrade.dev/v1",
		"kind":       "Owner",
		"metadata":   metadata,
		"status":     status,
	}}
}

// coreRecorder and eventsRecorder stand for client-go's two recorders.
type coreRecorder struct{ p *process }

func (r coreRecorder) Event(obj runtime.Object, typ, reason, _ string) {
	r.p.recordEvent(obj, 0, typ, reason)
}

type eventsRecorder struct{ p *process }

func (r eventsRecorder) Eventf(obj runtime.Object, _ runtime.Object, typ, reason, _, _ string, _ ...any) {
	r.p.recordEvent(obj, 1, typ, reason)
}

func (p *process) recordEvent(obj runtime.Object, kind int, typ, reason string) {
	m, _ := meta.Accessor(obj)
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	p.events = append(p.events, recorded{at: p.w.now(), uid: m.GetUID(), kind: kind, typ: typ, reason: reason})
}

// --- streams ---------------------------------------------------------------

// runner runs one stream of a process: a graded Stream feeding a mirror
// (the process's mirrors[i]), or a client-go informer over Instrument.
type runner struct {
	p      *process
	i      int
	stream *wgwatch.Stream
	inf    cache.SharedIndexInformer
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *process) observer(i int) wgwatch.Observer {
	rec := wgwatch.ObserverFuncs{StateChangedFunc: func(s wgwatch.State) {
		p.w.mu.Lock()
		defer p.w.mu.Unlock()
		p.states[i] = append(p.states[i], stampedState{p.w.now(), s})
	}, SessionEndedFunc: func(e wgwatch.SessionEnd) {
		p.w.mu.Lock()
		defer p.w.mu.Unlock()
		p.ends[i] = append(p.ends[i], judgekit.Ended{At: p.w.now(), End: e})
	}}
	if p.w.h.standby {
		return wgwatch.Observers(p.acc, p.wm, rec, p.synced(i))
	}
	return wgwatch.Observers(p.acc, p.wm, rec)
}

// startRunner starts stream i: afresh, or, for a Stream that ran before in
// this process, the same Stream run again (resuming from its cursor, its
// consumer's view kept). An informer run again is a new informer.
func (p *process) startRunner(i int) *runner {
	s := p.w.servers[i]
	r := &runner{p: p, i: i, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(p.ctx)
	r.cancel = cancel
	if s.spec.informer {
		if p.merged[i] == nil {
			p.merged[i] = &wgwatch.Streams{Observer: p.observer(i)}
		}
		observer := p.observer(i)
		var running sync.WaitGroup
		for k := range max(1, s.spec.informers) {
			member, _ := p.merged[i].Add(s.name, "", nil)
			ilw, err := wgwatch.Instrument(s.srv, wgwatch.InstrumentOptions{Resource: s.gr, Name: s.name,
				Observer: wgwatch.Observers(member, wgwatch.ObserverFuncs{SessionEndedFunc: observer.SessionEnded}), Policy: p.w.h.policy})
			if err != nil {
				p.w.t.Fatal(err)
			}
			// A second informer of the kind, as a cache makes one per
			// representation it is asked for (typed, metadata-only).
			inf := member.Informer(cache.NewSharedIndexInformer(ilw, &corev1.ConfigMap{}, 0, cache.Indexers{}))
			running.Go(func() { inf.RunWithContext(ctx) })
			if k > 0 {
				continue
			}
			r.inf = inf
			mark := func(any) {
				p.w.mu.Lock()
				defer p.w.mu.Unlock()
				p.markViewLocked(i)
			}
			if _, err := r.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc: mark, UpdateFunc: func(_, o any) { mark(o) }, DeleteFunc: mark,
			}); err != nil {
				p.w.t.Fatal(err)
			}
			p.w.mu.Lock()
			p.infs[i] = r.inf
			p.markViewLocked(i)
			p.w.mu.Unlock()
		}
		go func() { running.Wait(); close(r.done) }()
		return r
	}
	if p.streams[i] == nil {
		opts := s.spec.opts
		opts.Resource, opts.Name, opts.Observer = s.gr, s.name, p.observer(i)
		view := map[string]string{}
		if i < len(p.w.saved) && p.w.saved[i].cursor != "" {
			// Resumed from what the last process persisted.
			opts.Cursor, view = p.w.saved[i].cursor, maps.Clone(p.w.saved[i].view)
			p.resumed[i] = true
		}
		st, err := wgwatch.NewStream(s.srv, wgwatch.HandlerFuncs{
			SnapshotFunc: func(ctx context.Context, snap wgwatch.Snapshot) error {
				if d := s.spec.snapshotDelay; d > 0 {
					t := time.NewTimer(d)
					defer t.Stop()
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-t.C:
					}
				}
				return p.snapshot(i, snap)
			},
			EventFunc: func(_ context.Context, ev apiwatch.Event) error { return p.event(i, ev) },
		}, opts)
		if err != nil {
			p.w.t.Fatal(err)
		}
		p.streams[i] = st
		p.w.mu.Lock()
		p.mirrors[i] = view
		p.markViewLocked(i)
		p.w.mu.Unlock()
	}
	r.stream = p.streams[i]
	go func() { _ = r.stream.Run(ctx); close(r.done) }()
	return r
}

// stop stops the runner. A Stream's Run returns at once and is waited
// for (it may be run again). An informer is not: client-go's reflector
// sleeps out a watch-list backoff without looking at its context (up to
// its 30 s cap), and a controller being stopped does not wait for it
// either; the history goes on, and play waits for it at the end.
func (r *runner) stop() {
	r.cancel()
	if r.inf != nil {
		w := r.p.w
		w.mu.Lock()
		w.draining = append(w.draining, r.done)
		w.mu.Unlock()
		return
	}
	<-r.done
	r.p.wm.StreamStopped(r.p.w.servers[r.i].name)
}

func (p *process) snapshot(i int, snap wgwatch.Snapshot) error {
	w := p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.handlerErrLocked(i); err != nil {
		return err
	}
	view := map[string]string{}
	for _, o := range snap.Objects {
		m, _ := meta.Accessor(o)
		view[m.GetName()] = m.GetResourceVersion()
	}
	p.mirrors[i] = view
	p.markViewLocked(i)
	return nil
}

func (p *process) event(i int, ev apiwatch.Event) error {
	w := p.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.handlerErrLocked(i); err != nil {
		return err
	}
	m, _ := meta.Accessor(ev.Object)
	if ev.Type == apiwatch.Deleted {
		delete(p.mirrors[i], m.GetName())
	} else {
		p.mirrors[i][m.GetName()] = m.GetResourceVersion()
	}
	p.markViewLocked(i)
	return nil
}

// markViewLocked notes whether the consumer of stream i now holds what its
// server holds.
func (p *process) markViewLocked(i int) {
	if p.end >= 0 {
		return
	}
	view := p.mirrors[i]
	if inf := p.infs[i]; inf != nil {
		view = map[string]string{}
		for _, o := range inf.GetStore().List() {
			m, _ := meta.Accessor(o)
			view[m.GetName()] = m.GetResourceVersion()
		}
	}
	complete := maps.Equal(view, p.w.servers[i].truth)
	marks := p.views[i]
	if n := len(marks); n > 0 && marks[n-1].complete == complete {
		return
	}
	p.views[i] = append(marks, viewMark{p.w.now(), complete})
}

// --- the work queue ----------------------------------------------------------

// queue is a work queue of owner keys without duplicates, whose worker
// waits on a channel (durably blocked inside a synctest bubble, which
// client-go's workqueue, waiting on a sync.Cond, is not).
type queue struct {
	mu     chan struct{} // a lock that is a channel
	keys   []types.NamespacedName
	set    map[types.NamespacedName]struct{}
	notify chan struct{}
}

func newQueue() *queue {
	return &queue{mu: make(chan struct{}, 1), set: map[types.NamespacedName]struct{}{}, notify: make(chan struct{}, 1)}
}

func (q *queue) add(k types.NamespacedName) {
	q.mu <- struct{}{}
	if _, ok := q.set[k]; !ok {
		q.set[k] = struct{}{}
		q.keys = append(q.keys, k)
	}
	<-q.mu
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *queue) pop() (types.NamespacedName, bool) {
	q.mu <- struct{}{}
	defer func() { <-q.mu }()
	if len(q.keys) == 0 {
		return types.NamespacedName{}, false
	}
	k := q.keys[0]
	q.keys = q.keys[1:]
	delete(q.set, k)
	return k, true
}
