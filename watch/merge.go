package watch

import "slices"

// Merge merges the states that several informers of one stream publish
// into the state the stream shows. A cache restricted to namespaces runs
// one informer per namespace for a kind, a cache asked for two
// representations of a kind (typed and metadata-only) runs one per
// representation, and an informer removed and made again (controller-
// runtime's RemoveInformer, then GetInformer) is replaced by a new one:
// the metrics, a readiness probe and an owner that depends on the kind see
// one state, the worst of those the informers that run publish, so that a
// namespace whose watch is denied keeps the kind Stalled while another
// namespace's recovers from a blip.
//
// A stall outlives the informer that stopped in it: an informer that
// stopped while it needed a human (its RBAC denied) and is made again is a
// stream that starts over, and its stall stands until an informer of its
// namespace that runs has been live (Streaming) or needs a human itself,
// as a stream's stall stands through anything but those. Without that,
// the new informer's start would write the stall away (a Normal Event) and
// its denial would report it again (a second Warning).
//
// Merge is not safe for concurrent use: callers serialise Add, Publish,
// Stop and Worst, and pass on what Worst returns in the order they called
// it. Its zero value is an empty Merge, ready to use.
type Merge struct {
	runs []mergedInformer
}

// mergedInformer is what a Merge keeps of one informer.
type mergedInformer struct {
	namespace string
	// state is the last state it published; zero before the first, and
	// once it stopped.
	state State
	// stall is the state needing a human it published last, kept once it
	// stopped in it (see Merge).
	stall State
	// settled is true once it has been live or needed a human.
	settled bool
}

// Add adds an informer whose lists and watches are restricted to
// namespace ("" for every namespace), which has published nothing yet,
// and returns its index, by which Publish, Stop and Worst name it.
func (m *Merge) Add(namespace string) int {
	m.runs = append(m.runs, mergedInformer{namespace: namespace})
	return len(m.runs) - 1
}

// Publish records s, the state the i-th informer published. An informer
// live or needing a human ends the stall of a stopped informer of its
// namespace. An index Add did not return is ignored.
func (m *Merge) Publish(i int, s State) {
	if i < 0 || i >= len(m.runs) {
		return
	}
	m.runs[i].state = s
	if s.Phase == PhaseStreaming || s.NeedsHuman {
		m.runs[i].settled = true
		for j := range m.runs {
			if m.runs[j].namespace == m.runs[i].namespace {
				m.runs[j].stall = State{}
			}
		}
	}
}

// Stop records that the i-th informer stopped (its Run returned), and
// reports whether an informer still runs (has published a state since it
// was added and not stopped). A stall it stopped in stands, unless an
// informer of its namespace that runs has been live or needed a human
// since: a Run returns late (a reflector sleeps out its backoff first).
func (m *Merge) Stop(i int) (running bool) {
	if i >= 0 && i < len(m.runs) {
		stopped := m.runs[i]
		settledSince := false
		for j, run := range m.runs {
			settledSince = settledSince || j != i && run.namespace == stopped.namespace && run.state.Phase != "" && run.settled
		}
		if stopped.state.NeedsHuman && !settledSince {
			m.runs[i].stall = stopped.state
		}
		m.runs[i].state = State{}
	}
	return slices.ContainsFunc(m.runs, func(run mergedInformer) bool { return run.state.Phase != "" })
}

// Worst returns the worst state among the informers that run, of every
// namespace when all is true, else of the i-th informer's namespace: a
// stall of a stopped informer counts while an informer of its namespace
// runs. Among states as bad, the i-th informer's wins (the newest, when i
// is the informer that just published). It reports false while none of
// them has published a state.
func (m *Merge) Worst(i int, all bool) (State, bool) {
	if i < 0 || i >= len(m.runs) {
		return State{}, false
	}
	keep := func(run mergedInformer) bool { return all || run.namespace == m.runs[i].namespace }
	var w State
	if keep(m.runs[i]) {
		w = m.runs[i].state
	}
	for _, run := range m.runs {
		if keep(run) && run.state.Phase != "" && (w.Phase == "" || severity(run.state) > severity(w)) {
			w = run.state
		}
	}
	for _, run := range m.runs {
		if keep(run) && run.stall.Phase != "" && w.Phase != "" && severity(run.stall) > severity(w) &&
			slices.ContainsFunc(m.runs, func(r mergedInformer) bool { return r.namespace == run.namespace && r.state.Phase != "" }) {
			w = run.stall
		}
	}
	return w, w.Phase != ""
}

// Namespace returns the namespace the i-th informer is restricted to, ""
// for every namespace (or an index Add did not return).
func (m *Merge) Namespace(i int) string {
	if i < 0 || i >= len(m.runs) {
		return ""
	}
	return m.runs[i].namespace
}

// severity orders states from a stream delivering live events to one that
// needs a human.
func severity(s State) int {
	switch {
	case s.NeedsHuman:
		return 4
	case s.Phase == PhaseBlocked:
		return 3
	case s.Phase == PhaseReplaying:
		return 2
	case s.Phase == PhaseStarting:
		return 1
	}
	return 0
}
