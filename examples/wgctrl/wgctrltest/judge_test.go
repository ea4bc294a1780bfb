//go:debug randseednop=0

package wgctrltest_test

import (
	"context"
	"flag"
	"fmt"
	mathrand "math/rand"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/watchgrade/watchgrade/examples/wgctrl"
	"github.com/watchgrade/watchgrade/examples/wgctrl/wgctrltest"
	wgreadiness "github.com/watchgrade/watchgrade/readiness"
	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// The operator judge: random histories of what an operator built on wgctrl
// lives through, played by the kit on the Guestbook operator (the
// adoption's Reconcile), each checked against what its users are
// promised. make operator runs 1,000 (-operator.histories) and the replay
// check; go test, under the race detector in make test's examples-unit,
// the first 100.
var (
	operatorHistories = flag.Int("operator.histories", 100, "operator judge: how many histories")
	operatorSeed      = flag.Uint64("operator.seed", 0, "operator judge: play only this seed, with its timeline")
	operatorReplays   = flag.Int("operator.replays", 0, "operator judge replay: how many seeds to play twice")
)

// history is one generated history and what the judge knows of it.
type history struct {
	seed       uint64
	namespaces []string // the cache's; none: every namespace
	cacheOrder []string // namespaces, in the order the cache makes their informers
	owners     []types.NamespacedName
	policy     wgwatch.Policy
	watches    string // typed, metadata-only or unwatched
	setup      bool   // wired by Operator.SetupWithManager
	// main has a setup wired as main.go wires it (Operator.Main: the
	// Owner, the controller, the readiness check), its probe the one the
	// run looks at and a Rollout waits for.
	main  bool
	steps []wgctrltest.Step
	// facts, in virtual time since the run began.
	at     []time.Duration // each step's start
	kinds  []string        // each step's kind: wait, deny, allow, outage, storm, restart, conflicts, update
	denied map[string][]span
	// invalid holds, per owner, when its spec was invalid (the operator's
	// own gate Stalled: one Warning each at most).
	invalid      map[types.NamespacedName][]span
	invalidSince map[types.NamespacedName]time.Duration
	outages      []span
	// longOutages counts the outages past ProgressDeadline with a
	// restart in them.
	longOutages int
	restarts    []time.Duration
	end         time.Duration
	// firstFault is when the first step other than a wait began; -1 for
	// none.
	firstFault time.Duration
}

type span struct{ from, to time.Duration }

// generate draws a history from seed.
func generate(seed uint64) *history {
	r := rand.New(rand.NewPCG(seed, 0x6f70657261746f72))
	h := &history{seed: seed, denied: map[string][]span{}, firstFault: -1,
		invalid: map[types.NamespacedName][]span{}, invalidSince: map[types.NamespacedName]time.Duration{}}
	if r.IntN(2) == 0 {
		h.namespaces = []string{"team-a", "team-b"}
		for i, ns := range h.namespaces {
			for j := range 1 + r.IntN(2) {
				h.owners = append(h.owners, types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("gb-%d-%d", i, j)})
			}
		}
	} else {
		for j := range 1 + r.IntN(3) {
			h.owners = append(h.owners, types.NamespacedName{Namespace: "shop", Name: fmt.Sprintf("gb-%d", j)})
		}
	}
	if r.IntN(4) == 0 {
		h.policy.ProgressDeadline = 10 * time.Minute
	}
	pd := h.policy.ProgressDeadline
	if pd == 0 {
		pd = wgwatch.DefaultProgressDeadline
	}
	scopes := []string{""}
	scopes = append(scopes, h.namespaces...)
	deniedNow := map[string]time.Duration{} // scope -> since
	var now time.Duration
	add := func(kind string, s wgctrltest.Step, d time.Duration) {
		h.at = append(h.at, now)
		h.kinds = append(h.kinds, kind)
		h.steps = append(h.steps, s)
		if kind != "wait" && h.firstFault < 0 {
			h.firstFault = now
		}
		now += d
	}
	// allow allows scope ("" every namespace), then denies again what
	// is still denied: allowing every namespace clears them all.
	allow := func(scope string) {
		add("allow", wgctrltest.Allow(&corev1.ConfigMap{}, scope), 0)
		for _, s := range sortedKeys(deniedNow) {
			if scope == "" || s == "" {
				add("still denied", wgctrltest.Deny(&corev1.ConfigMap{}, s), 0)
			}
		}
	}
	if r.IntN(3) > 0 {
		add("wait", wgctrltest.Wait(time.Minute), time.Minute) // a first sync on healthy streams
	}
	alive := slices.Clone(h.owners)            // not deleted
	gated := map[types.NamespacedName]string{} // the operator's own gate set on each owner
	setGate := func(key types.NamespacedName, gate string) {
		was := gated[key]
		if was == "invalid" {
			h.invalid[key] = append(h.invalid[key], span{h.invalidSince[key], now})
		}
		if gate == "invalid" {
			h.invalidSince[key] = now
		}
		gated[key] = gate
		// An invalid spec comes, and goes, with a spec change; the
		// database is the operator's own dependency.
		spec := gate == "invalid" || was == "invalid"
		add("gate", wgctrltest.Update(key, func(o client.Object) {
			a := o.GetAnnotations()
			if a == nil {
				a = map[string]string{}
			}
			a[gateAnnotation] = gate
			o.SetAnnotations(a)
			if spec {
				o.SetGeneration(o.GetGeneration() + 1)
			}
		}), 0)
	}
	for range 3 + r.IntN(8) {
		switch k := r.IntN(18); {
		case k < 5:
			d := time.Duration(5+r.IntN(40*60)) * time.Second
			if r.IntN(2) == 0 {
				d = time.Duration(5+r.IntN(120)) * time.Second
			}
			add("wait", wgctrltest.Wait(d), d)
		case k < 7:
			scope := scopes[r.IntN(len(scopes))]
			if _, ok := deniedNow[scope]; ok {
				continue
			}
			deniedNow[scope] = now
			add("deny", wgctrltest.Deny(&corev1.ConfigMap{}, scope), 0)
		case k < 9:
			if len(deniedNow) == 0 {
				continue
			}
			scope := sortedKeys(deniedNow)[r.IntN(len(deniedNow))]
			h.denied[scope] = append(h.denied[scope], span{deniedNow[scope], now})
			delete(deniedNow, scope)
			allow(scope)
		case k < 10 && r.IntN(4) == 0:
			// An outage past ProgressDeadline, the operator restarted
			// once it is Stalled, the outage going on past the restart
			// hold mostly (a rollout while the control plane is down).
			restartAt := pd + 30*time.Second + time.Duration(r.IntN(180))*time.Second
			after := pd + time.Duration(r.IntN(360))*time.Second
			if r.IntN(3) == 0 {
				after = time.Duration(1+r.IntN(int(pd/time.Second))) * time.Second
			}
			h.outages = append(h.outages, span{now, now + restartAt + after})
			add("outage", wgctrltest.OutageBegins(), 0)
			add("wait", wgctrltest.Wait(restartAt), restartAt)
			h.restarts = append(h.restarts, now)
			add("restart", wgctrltest.Restart(), 0)
			add("wait", wgctrltest.Wait(after), after)
			add("outage ends", wgctrltest.OutageEnds(), 0)
			h.longOutages++
		case k < 10:
			d := time.Duration(1+r.IntN(180)) * time.Second
			h.outages = append(h.outages, span{now, now + d})
			add("outage", wgctrltest.Outage(d), d)
		case k < 11:
			n, gap := 1+r.IntN(5), time.Duration(1+r.IntN(10))*time.Minute
			add("storm", wgctrltest.ExpiryStorm(&corev1.ConfigMap{}, n, gap), time.Duration(n)*gap)
		case k < 13 && r.IntN(2) == 0:
			// A leader-elected rollout: the new process ready while the
			// old one holds the lease, the lease taken over 15 s after
			// the old one stopped.
			h.restarts = append(h.restarts, now)
			add("rollout", wgctrltest.Rollout(), wgctrltest.LeaseDuration)
		case k < 13:
			h.restarts = append(h.restarts, now)
			add("restart", wgctrltest.Restart(), 0)
		case k < 14 && r.IntN(3) == 0:
			// cache.RemoveInformer then GetInformer, as an operator that
			// watches kinds dynamically does.
			add("replace", wgctrltest.ReplaceInformers(&corev1.ConfigMap{}), 0)
		case k < 14 && r.IntN(2) == 0:
			add("conflicts", wgctrltest.StatusConflicts(1+r.IntN(4)), 0)
		case k < 14:
			// The operator's writes refused (429) while its watches are
			// served: an API server shedding writes.
			d := time.Duration(1+r.IntN(180)) * time.Second
			add("write faults", wgctrltest.RefuseWrites(d), d)
		case k == 17:
			// The operator's own gate: its database not ready
			// (Reconciling), the owner's spec invalid (Stalled, a human
			// must act), or neither.
			if len(alive) == 0 {
				continue
			}
			key := alive[r.IntN(len(alive))]
			setGate(key, []string{"", "waiting", "invalid"}[r.IntN(3)])
			if r.IntN(2) == 0 {
				// A rollout of the operator once the owner has settled
				// on it: the restart must write nothing.
				quiet := 2*pd + time.Duration(r.IntN(300))*time.Second
				add("wait", wgctrltest.Wait(quiet), quiet)
				h.restarts = append(h.restarts, now)
				add("restart", wgctrltest.Restart(), 0)
				add("wait", wgctrltest.Wait(5*time.Minute), 5*time.Minute)
			}
		case k == 16:
			// An owner deleted, at once or during its next reconcile.
			if len(alive) == 0 {
				continue
			}
			i := r.IntN(len(alive))
			key := alive[i]
			alive = slices.Delete(alive, i, i+1)
			if gated[key] == "invalid" {
				h.invalid[key] = append(h.invalid[key], span{h.invalidSince[key], now})
			}
			delete(gated, key)
			if r.IntN(2) == 0 {
				add("delete", wgctrltest.Delete(key), 0)
			} else {
				add("delete during reconcile", wgctrltest.DeleteDuringReconcile(key), 0)
			}
		default:
			if len(alive) == 0 {
				continue
			}
			key := alive[r.IntN(len(alive))]
			add("update", wgctrltest.Update(key, func(o client.Object) { o.SetGeneration(o.GetGeneration() + 1) }), 0)
		}
	}
	// The human fixes everything; the streams have time to recover.
	for _, key := range alive {
		if gated[key] != "" {
			setGate(key, "")
		}
	}
	for _, scope := range sortedKeys(deniedNow) {
		h.denied[scope] = append(h.denied[scope], span{deniedNow[scope], now})
		delete(deniedNow, scope)
		allow(scope)
	}
	settle := 2*pd + 5*time.Minute
	add("wait", wgctrltest.Wait(settle), settle)
	h.end = now
	// The order in which the cache makes a kind's informers of each
	// namespace (controller-runtime's: a map's), drawn last so that the
	// histories drawn before it stay as they were.
	h.cacheOrder = slices.Clone(h.namespaces)
	if r.IntN(2) == 0 {
		slices.Reverse(h.cacheOrder)
	}
	// How the controller watches the ConfigMaps, drawn after the rest
	// too: typed, metadata-only (builder.OnlyMetadata) with the Owner
	// given them typed as the adoption steps do, or not at all (its
	// Reconcile reads them with the client, and the Owner asks the cache
	// for their informer: the workers do not wait for it).
	h.watches = []string{"typed", "typed", "metadata-only", "unwatched"}[r.IntN(4)]
	// Wired by its own setup (Operator.SetupWithManager, building the
	// controller with Owner.ControllerManagedBy: the kit learns the
	// watched kinds from it), or by a Reconciler and the kinds given to
	// the kit: drawn last.
	h.setup = r.IntN(2) == 0
	h.main = h.setup && r.IntN(2) == 0
	return h
}

// gateAnnotation is what the judge's Guestbook Reconcile reads its own
// gate from: "waiting" (its database is not ready), "invalid" (the spec
// is invalid), or nothing.
const gateAnnotation = "example.com/gate"

// gatedReconciler is the Guestbook's Reconcile with a gate of the
// operator's own, as the adoption's steps set one: an owner Reconciling
// or Stalled on it persists over restarts as one on a stream does.
type gatedReconciler struct {
	client.Client
	Readiness *wgctrl.Owner
}

func (r *gatedReconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	gb := &Guestbook{}
	if err := r.Get(ctx, req.NamespacedName, gb); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	defer func() { res, err = r.Readiness.Status(ctx, gb, res, err) }()
	// Each gate set or removed as it is, never both: a gate removed and
	// set again moves the verdict twice, and the Owner requeues the owner.
	acc, key := r.Readiness.Accumulator(), req.NamespacedName
	switch gb.Annotations[gateAnnotation] {
	case "waiting":
		acc.RemoveGate(key, "Spec")
		acc.SetGate(key, wgreadiness.Progressing("Database", "WaitingForDatabase", "the guestbook's database is not ready"))
	case "invalid":
		acc.RemoveGate(key, "Database")
		acc.SetGate(key, wgreadiness.Stalled("Spec", "InvalidSpec", "spec.replicas must be positive"))
	default:
		acc.RemoveGate(key, "Database")
		acc.RemoveGate(key, "Spec")
	}
	return reconcile.Result{}, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// operator is the Guestbook operator of history h.
func (h *history) operator() wgctrltest.Operator {
	var objs []client.Object
	for _, k := range h.owners {
		objs = append(objs, guestbook(k.Namespace, k.Name))
	}
	op := guestbookOperator(objs...)
	op.SetupWithManager, op.Watches = nil, []client.Object{&corev1.ConfigMap{}} // the judge's reconciler, with gates and faults of its own
	op.Reconciler = func(c client.Client, readiness *wgctrl.Owner) reconcile.Reconciler {
		return &gatedReconciler{Client: c, Readiness: readiness}
	}
	switch h.watches {
	case "metadata-only":
		cm := &metav1.PartialObjectMetadata{}
		cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		op.Watches, op.OwnerWatches = []client.Object{cm}, []client.Object{&corev1.ConfigMap{}}
	case "unwatched":
		op.Watches, op.OwnerWatches = nil, []client.Object{&corev1.ConfigMap{}}
	}
	if h.setup {
		op.Reconciler, op.Watches, op.OwnerWatches = nil, nil, nil
		op.SetupWithManager = func(mgr manager.Manager, readiness *wgctrl.Owner) error {
			b := readiness.ControllerManagedBy(mgr).For(&Guestbook{})
			switch h.watches {
			case "typed":
				b.Owns(&corev1.ConfigMap{})
			case "metadata-only":
				b.Owns(&corev1.ConfigMap{}, builder.OnlyMetadata)
			}
			return b.Complete(&gatedReconciler{Client: mgr.GetClient(), Readiness: readiness})
		}
		if h.watches == "unwatched" {
			op.OwnerWatches = []client.Object{&corev1.ConfigMap{}} // what main passes to grade.Owner
		}
		if h.main {
			setup, deps := op.SetupWithManager, op.OwnerWatches
			op.SetupWithManager, op.OwnerWatches = nil, nil
			op.Main = func(mgr manager.Manager, grade *wgctrl.Grader) error {
				readiness, err := grade.Owner(mgr, &Guestbook{}, deps...)
				if err != nil {
					return err
				}
				if err := setup(mgr, readiness); err != nil {
					return err
				}
				if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
					return err
				}
				return mgr.AddReadyzCheck("watches", grade.ReadyzCheck)
			}
		}
	}
	op.Namespaces = h.cacheOrder
	op.Options.Policy = h.policy
	op.Seed = h.seed
	return op
}

// affects reports whether a denial of scope affects owner k: its
// namespace, or every namespace.
func (h *history) affects(scope string, k types.NamespacedName) bool {
	return scope == "" || scope == k.Namespace || len(h.namespaces) == 0
}

// verdicts are the judge's counts.
type verdicts struct {
	histories, failed                                                  int
	falseWarnings, extraWarnings, missedWarnings, notConverged         int
	unreconciledGeneration, firstSyncWrites, restartWrites, kstatusBad int
	eventsWithoutWrite, errorLines, missedErrorLines, probeWrong       int
	afterDeletion, deletions, secondInformers                          int
	// quietRestarts counts, by persistedState, the owners a restart that
	// changed nothing was checked over.
	quietRestarts                       map[string]int
	writes, warnings, restarts, denials int
}

// judge checks one history's run, returning what it broke.
func (h *history) judge(res *wgctrltest.Result, v *verdicts) []string {
	var broke []string
	fail := func(counter *int, format string, args ...any) {
		*counter++
		broke = append(broke, fmt.Sprintf(format, args...))
	}
	pd := h.policy.ProgressDeadline
	if pd == 0 {
		pd = wgwatch.DefaultProgressDeadline
	}
	human := wgwatch.DefaultHumanGrace
	lines := res.Timeline()
	for _, k := range h.owners {
		conds, observed, generation := res.Status(k)
		v.writes += res.StatusWrites(k)
		v.warnings += res.Warnings(k)
		// A deleted owner: nothing written or recorded for it after its
		// deletion, and reconciled at most twice more (the deletion's own
		// request, and one queued before it), not requeued for the life
		// of the process.
		deletedAt := time.Duration(-1)
		reconciledAfter := 0
		for _, l := range lines {
			switch {
			case l.Owner != k:
			case l.What == wgctrltest.RecordDelete:
				deletedAt = l.At
				v.deletions++
			case deletedAt < 0:
			case l.What == wgctrltest.RecordReconcile:
				reconciledAfter++
			case l.What == wgctrltest.RecordWrite || l.What == wgctrltest.RecordEvent:
				fail(&v.afterDeletion, "%s: %s %s at %s, after its deletion at %s", k, l.What, l.Detail, l.At, deletedAt)
			}
		}
		if reconciledAfter > 2 {
			fail(&v.afterDeletion, "%s: reconciled %d times after its deletion at %s", k, reconciledAfter, deletedAt)
		}
		if deletedAt >= 0 {
			continue
		}
		if s := status(conds); s != "Ready=True/Established" || observed != generation {
			fail(&v.notConverged, "%s did not converge: %s observedGeneration=%d generation=%d", k, s, observed, generation)
		}
		// Warnings: one per denial of its namespace that lasted past the
		// human grace (and the informer's retry), none without one.
		episodes, long := 0, 0
		for scope, spans := range h.denied {
			if !h.affects(scope, k) {
				continue
			}
			for _, s := range spans {
				episodes++
				// Seen for 3 minutes while the API server answers (an
				// outage hides a denial).
				seen := time.Duration(0)
				for _, p := range h.served([]span{s}) {
					seen += p.to - p.from
				}
				if seen >= 3*time.Minute {
					long++
				}
			}
		}
		// Refused connections for ProgressDeadline, counting the time
		// to go live again once the server serves (at most two
		// MaxBackoffs and a ShortSession: 2 min 1 s), need a human:
		// outages that follow one another sooner than that are one.
		longOutages := 0 // each may page once
		const recovery = 2*time.Minute + time.Second
		for i := 0; i < len(h.outages); {
			from, to := h.outages[i].from, h.outages[i].to
			j := i + 1
			for ; j < len(h.outages) && h.outages[j].from-to < recovery; j++ {
				to = h.outages[j].to
			}
			if to-from+recovery >= pd {
				longOutages++
			}
			i = j
		}
		// An invalid spec is a Stalled gate of the operator's own: a
		// Warning at most for each time it was.
		episodes += len(h.invalid[k])
		switch w := res.Warnings(k); {
		case w > 0 && episodes == 0 && longOutages == 0:
			fail(&v.falseWarnings, "%s: %d Warnings with no denial of its namespace", k, w)
		case w > episodes+longOutages:
			fail(&v.extraWarnings, "%s: %d Warnings for %d denials of its namespace", k, w, episodes)
		case w == 0 && long > 0:
			fail(&v.missedWarnings, "%s: no Warning for %d denials of its namespace of 3 minutes or more", k, long)
		}
		// Each Warning comes with a write of Stalled=True; no Event
		// without a write.
		writes := map[time.Duration]string{}
		maxReconciled := int64(0)
		restartIdx := 0
		var firstSync []string
		for _, l := range lines {
			if l.Owner != k {
				continue
			}
			switch l.What {
			case wgctrltest.RecordReconcile:
				maxReconciled = max(maxReconciled, l.Generation)
			case wgctrltest.RecordWrite:
				writes[l.At] = l.Detail
				if strings.Contains(l.Detail, "Ready=True") && l.Generation > maxReconciled {
					fail(&v.unreconciledGeneration, "%s: Ready=True written for generation %d at %s, no Reconcile had begun past %d", k, l.Generation, l.At, maxReconciled)
				}
				ready := strings.Contains(l.Detail, "Ready=True")
				stalled := strings.Contains(l.Detail, "Stalled=True")
				reconciling := strings.Contains(l.Detail, "Reconciling=True")
				if ready && (stalled || reconciling) || stalled && !strings.Contains(l.Detail, "Ready=False") {
					fail(&v.kstatusBad, "%s: written %s at %s", k, l.Detail, l.At)
				}
				if h.firstFault < 0 || l.At < h.firstFault {
					firstSync = append(firstSync, l.Detail)
				}
			case wgctrltest.RecordEvent:
				d, ok := writes[l.At]
				switch {
				case !ok:
					fail(&v.eventsWithoutWrite, "%s: Event %q at %s with no write", k, l.Detail, l.At)
				case strings.HasPrefix(l.Detail, "Warning ") && !strings.Contains(d, "Stalled=True"):
					fail(&v.kstatusBad, "%s: a Warning at %s with %s written", k, l.At, d)
				}
			}
			_ = restartIdx
		}
		// A new owner whose streams are healthy from the start: its first
		// sync is one write, Ready=True.
		if (h.firstFault < 0 || h.firstFault >= time.Minute) && (len(firstSync) != 1 || !strings.HasPrefix(firstSync[0], "Ready=True")) {
			fail(&v.firstSyncWrites, "%s: first sync wrote %q, want one Ready=True", k, firstSync)
		}
	}
	// A restart that changes nothing writes nothing: a restart at least
	// 2×ProgressDeadline after the last change of the world, with nothing
	// but waits until the next restart or change.
	for i, kind := range h.kinds {
		if kind != "restart" {
			continue
		}
		v.restarts++
		quietSince := time.Duration(0)
		for j := i - 1; j >= 0; j-- {
			if h.kinds[j] != "wait" && h.kinds[j] != "restart" {
				quietSince = h.at[j+1]
				break
			}
		}
		if h.at[i]-quietSince < 2*pd {
			continue
		}
		until := h.end
		for j := i + 1; j < len(h.kinds); j++ {
			if h.kinds[j] != "wait" {
				until = h.at[j]
				break
			}
		}
		for _, l := range lines {
			if l.What == wgctrltest.RecordWrite && l.At >= h.at[i] && l.At < until {
				fail(&v.restartWrites, "%s: written %s at %s, after a restart at %s that changed nothing", l.Owner, l.Detail, l.At, h.at[i])
			}
		}
		// What each owner had persisted when it was restarted over.
		last := map[types.NamespacedName]string{}
		for _, l := range lines {
			switch {
			case l.At >= h.at[i]:
			case l.What == wgctrltest.RecordWrite:
				last[l.Owner] = l.Detail
			case l.What == wgctrltest.RecordDelete:
				delete(last, l.Owner)
			}
		}
		for _, d := range last {
			v.quietRestarts[persistedState(d)]++
		}
	}
	// Error-level lines come only with trouble that needs a human: a
	// denial (the watch error handler logs one at error level once it has
	// gone on for HumanGrace), a line logged while it lasts.
	for _, l := range lines {
		if l.What != wgctrltest.RecordLog {
			continue
		}
		during := false
		for _, s := range h.denials() {
			during = during || l.At >= s.from+human && l.At <= s.to+time.Second
		}
		if !during {
			fail(&v.errorLines, "an error-level line at %s with no denial going on for %s: %s", l.At, human, l.Detail)
		}
	}
	// No informer the controller does not use.
	for _, l := range lines {
		if l.What == wgctrltest.RecordInformer {
			fail(&v.secondInformers, "at %s, %s", l.At, l.Detail)
		}
	}
	// The probe is ready exactly when every informer the controller needs
	// exists and has synced, and on a process waiting for the lease
	// (Rollout), which has none: or the rollout would hang.
	for _, l := range lines {
		if l.What != wgctrltest.RecordProbe {
			continue
		}
		var n, m int
		if i := strings.LastIndex(l.Detail, "informers synced "); i < 0 {
			fail(&v.probeWrong, "a probe record %q", l.Detail)
		} else if _, err := fmt.Sscanf(l.Detail[i:], "informers synced %d/%d", &n, &m); err != nil {
			fail(&v.probeWrong, "a probe record %q: %v", l.Detail, err)
		} else if ready := strings.HasPrefix(l.Detail, "ready"); strings.Contains(l.Detail, "waiting for the lease") && !ready ||
			!strings.Contains(l.Detail, "waiting for the lease") && ready != (n == m) {
			fail(&v.probeWrong, "the probe at %s: %s", l.At, l.Detail)
		}
	}
	// A denial seen for 3 minutes or more (while the API server answers)
	// is logged at error level, once its informers have retried past
	// HumanGrace; an outage within it does not end it.
	for _, s := range h.denials() {
		seen := time.Duration(0)
		for _, p := range h.served([]span{s}) {
			seen += p.to - p.from
		}
		if seen < 3*time.Minute {
			continue
		}
		if !slices.ContainsFunc(lines, func(l wgctrltest.Record) bool {
			return l.What == wgctrltest.RecordLog && l.At >= s.from && l.At <= s.to+time.Second
		}) {
			fail(&v.missedErrorLines, "no error-level line for a denial from %s to %s", s.from, s.to)
		}
	}
	for _, spans := range h.denied {
		v.denials += len(spans)
	}
	return broke
}

// denials returns the spans during which some scope was denied, those
// that touch merged: a scope allowed and denied again at one instant (or
// another denied as one is allowed) stays denied for the informers.
func (h *history) denials() []span {
	var all []span
	for _, spans := range h.denied {
		all = append(all, spans...)
	}
	slices.SortFunc(all, func(a, b span) int { return int(a.from - b.from) })
	var merged []span
	for _, s := range all {
		if n := len(merged); n > 0 && s.from <= merged[n-1].to+time.Millisecond {
			merged[n-1].to = max(merged[n-1].to, s.to)
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// served returns the parts of spans outside the outages: a denial is
// seen only while the API server answers.
func (h *history) served(spans []span) []span {
	var out []span
	for _, s := range spans {
		parts := []span{s}
		for _, o := range h.outages {
			var next []span
			for _, p := range parts {
				if o.to <= p.from || o.from >= p.to {
					next = append(next, p)
					continue
				}
				if o.from > p.from {
					next = append(next, span{p.from, o.from})
				}
				if o.to < p.to {
					next = append(next, span{o.to, p.to})
				}
			}
			parts = next
		}
		out = append(out, parts...)
	}
	return out
}

// persistedState says what conditions written as detail are, for the
// count of quiet restarts: ready, reconciling or stalled, on a stream or
// on the operator's own gate.
func persistedState(detail string) string {
	switch {
	case strings.Contains(detail, "Ready=True"):
		return "ready"
	case strings.Contains(detail, "Stalled=True/InvalidSpec"):
		return "stalled_gate"
	case strings.Contains(detail, "Stalled=True"):
		return "stalled_stream"
	case strings.Contains(detail, "Reconciling=True/WaitingForDatabase"):
		return "reconciling_gate"
	default:
		return "reconciling_stream"
	}
}

// play runs history seed, with client-go's jitter drawn from a source
// seeded by it (the reflectors' backoff uses math/rand's global source).
func play(t *testing.T, seed uint64) (*history, *wgctrltest.Result) {
	h := generate(seed)
	mathrand.Seed(int64(seed)) //nolint:staticcheck // randseednop=0: client-go's jitter replays
	return h, wgctrltest.Run(t, h.operator(), h.steps...)
}

func TestOperatorJudge(t *testing.T) {
	began := time.Now()
	v := verdicts{quietRestarts: map[string]int{}}
	seeds := make([]uint64, 0, *operatorHistories)
	if *operatorSeed != 0 {
		seeds = append(seeds, *operatorSeed)
	} else {
		for s := range uint64(*operatorHistories) {
			seeds = append(seeds, s+1)
		}
	}
	worlds := map[string]int{}
	for _, seed := range seeds {
		h, res := play(t, seed)
		v.histories++
		if len(h.namespaces) > 0 {
			worlds["namespaces"]++
		}
		if h.policy.ProgressDeadline != 0 {
			worlds["progress_deadline_10m"]++
		}
		worlds["long_outage"] += h.longOutages
		worlds[h.watches]++
		if h.setup {
			worlds["setup"]++
		}
		if h.main {
			worlds["main"]++
		}
		for _, k := range h.kinds {
			worlds[k]++
		}
		broke := h.judge(res, &v)
		if len(broke) > 0 || *operatorSeed != 0 {
			if len(broke) > 0 {
				v.failed++
				t.Errorf("seed %d broke the invariants:\n  %s", seed, strings.Join(broke, "\n  "))
			}
			if v.failed <= 3 || *operatorSeed != 0 {
				var b strings.Builder
				for i, s := range h.steps {
					fmt.Fprintf(&b, "\n  step %s %s", h.at[i], s)
				}
				for _, r := range res.Timeline() {
					fmt.Fprintf(&b, "\n  %s", r)
				}
				t.Logf("seed %d (-operator.seed=%d): namespaces=%v owners=%v watches=%s setup=%t main=%t policy=%+v%s", seed, seed, h.namespaces, h.owners, h.watches, h.setup, h.main, h.policy, b.String())
			}
		}
	}
	fmt.Printf("operator: histories=%d failed=%d false_warnings=%d extra_warnings=%d missed_warnings=%d not_converged=%d unreconciled_generation=%d first_sync_writes=%d restart_writes=%d kstatus_disagree=%d events_without_write=%d error_lines=%d missed_error_lines=%d probe_wrong=%d after_deletion=%d second_informers=%d (writes=%d warnings=%d restarts=%d denials=%d deleted=%d, %s)\n",
		v.histories, v.failed, v.falseWarnings, v.extraWarnings, v.missedWarnings, v.notConverged, v.unreconciledGeneration, v.firstSyncWrites, v.restartWrites, v.kstatusBad, v.eventsWithoutWrite, v.errorLines, v.missedErrorLines, v.probeWrong, v.afterDeletion, v.secondInformers,
		v.writes, v.warnings, v.restarts, v.denials, v.deletions, time.Since(began).Round(time.Second))
	fmt.Printf("operator: worlds namespaces=%d progress_deadline_10m=%d denials=%d outages=%d restarts_in_long_outages=%d storms=%d restarts=%d informers_replaced=%d conflicts=%d spec_changes=%d deletions=%d deletions_during_reconcile=%d metadata_only=%d unwatched=%d own_gates=%d setup_with_manager=%d main_wiring=%d client_faults=%d rollouts=%d\n",
		worlds["namespaces"], worlds["progress_deadline_10m"], worlds["deny"], worlds["outage"], worlds["long_outage"], worlds["storm"], worlds["restart"], worlds["replace"], worlds["conflicts"], worlds["update"],
		worlds["delete"], worlds["delete during reconcile"], worlds["metadata-only"], worlds["unwatched"], worlds["gate"], worlds["setup"], worlds["main"], worlds["write faults"]+worlds["outage"], worlds["rollout"])
	q := v.quietRestarts
	fmt.Printf("operator: quiet_restarts_checked ready=%d reconciling_stream=%d reconciling_gate=%d stalled_stream=%d stalled_gate=%d\n",
		q["ready"], q["reconciling_stream"], q["reconciling_gate"], q["stalled_stream"], q["stalled_gate"])
}

// canonical orders a timeline's records of one instant by owner, then as
// they came: the order in which owners whose verdicts changed at one
// instant are reconciled is the scheduler's.
func canonical(lines []wgctrltest.Record) []wgctrltest.Record {
	slices.SortStableFunc(lines, func(a, b wgctrltest.Record) int {
		if a.At != b.At {
			return int(a.At - b.At)
		}
		return strings.Compare(a.Owner.String(), b.Owner.String())
	})
	return lines
}

// TestOperatorJudgeReplay plays each of the first -operator.replays seeds
// twice and compares the timelines, each instant's records by owner, and
// reports how many were identical ("operator: replay seeds=20
// identical=K"). It does not fail on a difference: the reflectors'
// backoff jitter comes from math/rand's global source (seeded per
// history), and where the informers of two namespaces draw from it, the
// scheduler decides which draws first; so it does which of two owners
// queued at one instant from two namespaces' informers the controller's
// priority queue hands out first. A history of one namespace replays.
func TestOperatorJudgeReplay(t *testing.T) {
	if *operatorReplays == 0 {
		t.Skip("-operator.replays is 0")
	}
	identical := 0
	for seed := range uint64(*operatorReplays) {
		_, a := play(t, seed+1)
		_, b := play(t, seed+1)
		la, lb := canonical(a.Timeline()), canonical(b.Timeline())
		if slices.Equal(la, lb) {
			identical++
			continue
		}
		i := 0
		for i < min(len(la), len(lb)) && la[i] == lb[i] {
			i++
		}
		var first, second string
		if i < len(la) {
			first = la[i].String()
		}
		if i < len(lb) {
			second = lb[i].String()
		}
		t.Logf("seed %d does not replay: record %d is\n  %s\nthen\n  %s", seed+1, i, first, second)
	}
	fmt.Printf("operator: replay seeds=%d identical=%d\n", *operatorReplays, identical)
}
