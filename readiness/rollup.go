package readiness

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/watchgrade/watchgrade/watch"
)

// Condition types of the kstatus trio.
const (
	ConditionReady       = "Ready"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
)

// Reasons that [Rollup] writes itself. Gates' own reasons are copied
// otherwise.
const (
	// ReasonEstablished: Ready=True because every gate is established; also
	// the reason of a True [Options.StreamsCondition].
	ReasonEstablished = "Established"
	// ReasonNoGates: the owner has no gates; see [Options.Empty].
	ReasonNoGates = "NoGates"
	// ReasonNoStreams: a True [Options.StreamsCondition] on an owner with no
	// stream gates.
	ReasonNoStreams = "NoStreams"
	// ReasonProgressing stands in for a progressing gate's reason when it
	// cannot be repaired into a valid one.
	ReasonProgressing = "Progressing"
	// ReasonStalled stands in for a stalled gate's reason when it cannot be
	// repaired into a valid one.
	ReasonStalled = "Stalled"
)

// EmptyMeaning is what an owner with no gates at all is. The set is closed:
// [EmptyProgressing], [EmptyEstablished].
type EmptyMeaning string

const (
	// EmptyProgressing: no gates means not Ready yet (Reconciling=True,
	// reason NoGates). An owner whose gates were never declared, or were
	// forgotten, stays visible instead of looking healthy.
	EmptyProgressing EmptyMeaning = "Progressing"
	// EmptyEstablished: no gates means nothing to wait for (Ready=True,
	// reason NoGates). For owners that may legitimately depend on nothing.
	EmptyEstablished EmptyMeaning = "Established"
)

// Options configures [Rollup] and [Apply]. The zero value works.
type Options struct {
	// Empty is what an owner with no gates is. Defaults to
	// EmptyProgressing (so does any value outside the set).
	Empty EmptyMeaning
	// StreamsCondition is the type of an optional positive condition that
	// summarises the stream gates alone, such as "StreamsRunning": True when
	// every stream gate is established (reason Established, or NoStreams
	// when there are none), otherwise False with the worst stream gate's
	// reason and message. Defaults to "": no such condition is written or
	// removed.
	StreamsCondition string
	// MaxListed is how many gates a message names before it ends with
	// "… and N more". Defaults to 3.
	MaxListed int
	// MessageLimit bounds every message, in bytes. Defaults to 1024, the
	// limit of an events.k8s.io note, so that an Event can quote Ready's
	// message whole; values are held between MinMessageLimit and
	// MaxMessageBytes.
	MessageLimit int
}

// Defaults and bounds of Options.
const (
	DefaultMaxListed    = 3
	DefaultMessageLimit = 1024
	// MinMessageLimit is the smallest MessageLimit: room for a gate's name
	// and "… and N more".
	MinMessageLimit = 64
)

// Validate reports, as an error wrapping [ErrInvalidOptions], an option
// that the roll-up cannot honour: a StreamsCondition that is one of the
// trio (Ready=True would sit beside Stalled=True) or not a valid condition
// type, an Empty outside its set, a MessageLimit under MinMessageLimit or
// over MaxMessageBytes, a negative MaxListed. [NewAccumulator] calls it;
// [Rollup] and [Apply], which cannot fail, ignore such a StreamsCondition
// and hold the numbers within their bounds.
func (o Options) Validate() error {
	var errs []error
	if o.StreamsCondition != "" && (isTrio(o.StreamsCondition) || !validConditionType(o.StreamsCondition)) {
		errs = append(errs, fmt.Errorf("%w: StreamsCondition %q must be a condition type other than Ready, Reconciling and Stalled", ErrInvalidOptions, o.StreamsCondition))
	}
	if o.Empty != "" && o.Empty != EmptyProgressing && o.Empty != EmptyEstablished {
		errs = append(errs, fmt.Errorf("%w: Empty %q is neither %q nor %q", ErrInvalidOptions, o.Empty, EmptyProgressing, EmptyEstablished))
	}
	if o.MessageLimit != 0 && (o.MessageLimit < MinMessageLimit || o.MessageLimit > MaxMessageBytes) {
		errs = append(errs, fmt.Errorf("%w: MessageLimit %d is outside [%d, %d]", ErrInvalidOptions, o.MessageLimit, MinMessageLimit, MaxMessageBytes))
	}
	if o.MaxListed < 0 {
		errs = append(errs, fmt.Errorf("%w: MaxListed %d is negative", ErrInvalidOptions, o.MaxListed))
	}
	return errors.Join(errs...)
}

func isTrio(typ string) bool {
	return typ == ConditionReady || typ == ConditionReconciling || typ == ConditionStalled
}

// validConditionType reports whether typ is a valid condition type: a
// qualified name (an optional DNS prefix and "/", then up to 63 bytes of
// letters, digits, '-', '_' and '.', starting and ending with one of the
// first two).
func validConditionType(typ string) bool {
	return len(validation.IsQualifiedName(typ)) == 0
}

func (o Options) withDefaults() Options {
	if o.Empty != EmptyEstablished {
		o.Empty = EmptyProgressing
	}
	if o.MaxListed <= 0 {
		o.MaxListed = DefaultMaxListed
	}
	if o.MessageLimit <= 0 {
		o.MessageLimit = DefaultMessageLimit
	}
	o.MessageLimit = min(max(o.MessageLimit, MinMessageLimit), MaxMessageBytes)
	if isTrio(o.StreamsCondition) || (o.StreamsCondition != "" && !validConditionType(o.StreamsCondition)) {
		o.StreamsCondition = ""
	}
	return o
}

// Rollup decides the kstatus trio of an owner object from its gates. It is
// pure: the same gates, existing Ready status, generation and options give
// byte-identical conditions, whatever order the gates come in.
//
//	worst gate   existing Ready     Ready                 Reconciling   Stalled       kstatus
//	-----------  -----------------  --------------------  ------------  ------------  ----------
//	stalled      any                False (gate reason)   removed       True (same)   Failed
//	progressing  absent or Unknown  Unknown (gate reason) True (same)   removed       InProgress
//	progressing  True or False      False (gate reason)   True (same)   removed       InProgress
//	established  any                True (Established)    removed       removed       Current
//	no gates     any                as progressing or as established, by Options.Empty,
//	                                with reason NoGates
//
// A restart is not news. Before the table, the conditions an earlier
// process persisted for this generation (Ready with the trio's other
// condition, both with this observedGeneration) are returned as they
// are, reason, message and [Options.StreamsCondition] included (the last
// left out when existing has none), so that Apply changes nothing, while
// the gates hold no evidence against them; a Stalled=True persisted for
// an earlier generation too, for that generation, when its message
// names a stream gate still Unconfirmed and none of the caller's gates
// (see [Observes]). The row of the persisted trio decides:
//
//	persisted            kept while
//	-------------------  ---------------------------------------------------------
//	Ready=True           every gate that is not established is a stream gate
//	                     Starting, and there is one
//	Stalled=True         a gate that Stalled's message names is a stream gate
//	                     Unconfirmed (or, when it names none of the gates, a
//	                     stream gate is Unconfirmed and still starting), and
//	                     every stalled gate is one it names
//	Reconciling=True     a stream gate is Unconfirmed with a reason of a stream
//	                     starting or replaying (Starting, InitialSync,
//	                     ExpiredResourceVersion, ResourceVersionTooLarge: on a
//	                     stream not yet established, its first replay); no
//	                     gate is stalled; every other gate that is
//	                     not established is one Reconciling's message names; and
//	                     a gate the message names is not established (or it
//	                     names none of the gates)
//
// A message that names none of the gates is from a process that named its
// streams otherwise: wgctrl names a stream of a cache restricted to
// namespaces by its namespace ("team-a/ConfigMap.v1") once the cache has
// made that namespace's informer, and before that by its kind alone. A
// stream still starting is no evidence against it.
//
// [Gate.Starting] and [Gate.Unconfirmed] are what the [Accumulator] knows
// of a stream this process has not yet seen established (nor, for
// Unconfirmed, stalled), within its grace; both are ignored on a caller's
// gate (Stream false). A message that does not list every gate ("… and N
// more", or cut) names them all. So a stall stands until the streams it
// names show health (then the table: Ready=True) or a stall it does not
// name shows (then the new cause), and transient trouble meanwhile is not
// news: a stall needs a human, and the human has been told.
//
// The worst gate decides: stalled over progressing over established. Among
// gates at the worst level the first in this order gives the reason: a
// stream gate [Gate.Starting] after every other (a stream still within its
// start grace is not the cause while another gate is: after a restart
// during a flap, Ready=False says Flapping, not InitialSync), then Name,
// then Reason, then Message, in byte order, a caller's gate before a stream
// gate of the same name. The message names the gates at the worst level in
// that order ("name: message; …"), at most [Options.MaxListed] of them, and
// ends with "… and N more" for the rest, within [Options.MessageLimit]
// bytes. Reasons that do not match the CRD pattern are repaired (see
// [ValidReason]).
//
// existing is the owner's current conditions: Ready's status tells
// whether the owner was ever established (see the package documentation),
// and the trio is kept over a restart as above. Every condition returned
// carries generation as its observedGeneration and a zero
// lastTransitionTime, which [Apply] fills in.
// The conditions come in a fixed order: Ready, then Reconciling or Stalled
// when present, then [Options.StreamsCondition] when set. A condition of
// the trio missing from the result must be removed from the object, not
// written False: [Apply] does that.
func Rollup(gates []Gate, existing []metav1.Condition, generation int64, opts Options) []metav1.Condition {
	opts = opts.withDefaults()
	if held, ok := heldConditions(gates, existing, generation, opts); ok {
		// A restart is not news: the conditions stand as they are.
		return held
	}
	v := decide(gates, opts)
	cond := func(typ string, status metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{
			Type: typ, Status: status, ObservedGeneration: generation,
			Reason: v.reason, Message: v.message,
		}
	}
	var out []metav1.Condition
	switch v.level {
	case LevelStalled:
		out = append(out, cond(ConditionReady, metav1.ConditionFalse), cond(ConditionStalled, metav1.ConditionTrue))
	case LevelProgressing:
		ready := metav1.ConditionUnknown
		if EverEstablished(existing) {
			ready = metav1.ConditionFalse
		}
		out = append(out, cond(ConditionReady, ready), cond(ConditionReconciling, metav1.ConditionTrue))
	default:
		out = append(out, cond(ConditionReady, metav1.ConditionTrue))
	}
	if opts.StreamsCondition != "" {
		out = append(out, streamsCondition(gates, existing, generation, opts))
	}
	return out
}

// heldConditions returns the conditions an owner keeps, unchanged, over a
// restart (the restart rows of Rollup's table): existing's Ready and, when
// it is held, its Stalled or Reconciling, and its
// [Options.StreamsCondition] as it was, when there is one. Each carries
// generation and a zero lastTransitionTime, as Rollup's results do.
func heldConditions(gates []Gate, existing []metav1.Condition, generation int64, opts Options) ([]metav1.Condition, bool) {
	ready := meta.FindStatusCondition(existing, ConditionReady)
	if ready == nil {
		return nil, false
	}
	stalled := meta.FindStatusCondition(existing, ConditionStalled)
	reconciling := meta.FindStatusCondition(existing, ConditionReconciling)
	isTrue := func(c *metav1.Condition) bool { return c != nil && c.Status == metav1.ConditionTrue }
	current := func(c *metav1.Condition) bool { return isTrue(c) && c.ObservedGeneration == ready.ObservedGeneration }
	var prior *metav1.Condition // the trio's other condition, when held
	observed := generation      // the generation the conditions kept carry
	if ready.ObservedGeneration != generation {
		// A new generation has work for the controller, and is never
		// held, but for a stall on streams alone, until they show
		// evidence: a spec change does not give back a watch that RBAC
		// denies, and writing the stall away until the new process sees
		// the stream again would page the human a second time. The
		// conditions stay as they are, for the generation they observed:
		// kstatus reads the owner as in progress (observedGeneration
		// behind), and a writer writes nothing ([Observes]).
		if ready.Status != metav1.ConditionFalse || !current(stalled) || isTrue(reconciling) ||
			!holdsStalled(gates, stalled.Message, opts.MessageLimit, true) || namesOwnGate(gates, stalled.Message, opts.MessageLimit) {
			return nil, false
		}
		prior, observed = stalled, ready.ObservedGeneration
	}
	switch {
	case prior != nil:
	case ready.Status == metav1.ConditionTrue && !isTrue(stalled) && !isTrue(reconciling):
		if !holdsReady(gates) {
			return nil, false
		}
	case ready.Status == metav1.ConditionFalse && current(stalled) && !isTrue(reconciling):
		if prior = stalled; !holdsStalled(gates, stalled.Message, opts.MessageLimit, false) {
			return nil, false
		}
	case ready.Status != metav1.ConditionTrue && current(reconciling) && !isTrue(stalled):
		if prior = reconciling; !holdsReconciling(gates, reconciling.Message, opts.MessageLimit) {
			return nil, false
		}
	default:
		return nil, false
	}
	keep := func(c metav1.Condition) metav1.Condition {
		c.ObservedGeneration = observed
		c.LastTransitionTime = metav1.Time{}
		return c
	}
	out := []metav1.Condition{keep(*ready)}
	if prior != nil {
		out = append(out, keep(*prior))
	}
	if opts.StreamsCondition != "" {
		if s := meta.FindStatusCondition(existing, opts.StreamsCondition); s != nil {
			out = append(out, keep(*s))
		}
	}
	return out, true
}

// namesOwnGate reports whether message names one of the caller's own
// gates (not a stream's).
func namesOwnGate(gates []Gate, message string, limit int) bool {
	return slices.ContainsFunc(gates, func(g Gate) bool { return !g.Stream && namedIn(message, g.Name, limit) })
}

// holdsReady: a persisted Ready=True stands while every gate that is not
// established is a stream gate still starting, and there is one.
func holdsReady(gates []Gate) bool {
	held := false
	for _, g := range gates {
		switch g.Level.normal() {
		case LevelEstablished:
			continue
		case LevelStalled:
			return false
		}
		if !g.Stream || !g.Starting {
			return false
		}
		held = true
	}
	return held
}

// holdsStalled: a persisted Stalled=True stands while a gate its message
// names is an unconfirmed stream gate (neither healthy nor stalled yet in
// this process), and every gate that is stalled is one it names: a stall
// needs a human, and nothing short of health or a new cause is news.
//
// strict asks for a gate the message names: a stall carried to a new
// generation must name a stream this process tracks.
func holdsStalled(gates []Gate, message string, limit int, strict bool) bool {
	waiting, starting, namesAny := false, false, false
	for _, g := range gates {
		named := namedIn(message, g.Name, limit)
		namesAny = namesAny || named
		switch {
		case g.Level.normal() == LevelStalled:
			if !named {
				return false // a new cause
			}
		case g.Level.normal() == LevelEstablished:
		case g.Stream && g.Unconfirmed && named:
			waiting = true
		case g.Stream && g.Unconfirmed && startingReason(g.Reason):
			starting = true
		}
	}
	// A message that names none of the gates, while a stream is still
	// starting: this process does not know the names yet (a caller that
	// names a stream by its namespace once it has seen the stream's
	// informer, say), and a stream still starting is no evidence.
	return waiting || !strict && starting && !namesAny
}

// holdsReconciling: a persisted Reconciling=True stands while a stream
// gate is unconfirmed and still starting, no gate is stalled, every other
// gate that is not established is one the message names, and a gate the
// message names is not established yet: the cause it shows is still
// reported, or not yet confirmed either way. A stall, a gate progressing
// that the conditions do not name, and every gate they name established
// are news.
func holdsReconciling(gates []Gate, message string, limit int) bool {
	starting, named, namesAny := false, false, false
	for _, g := range gates {
		namesAny = namesAny || namedIn(message, g.Name, limit)
		switch lv := g.Level.normal(); {
		case lv == LevelStalled:
			return false
		case lv == LevelEstablished:
		case g.Stream && g.Unconfirmed && startingReason(g.Reason):
			starting = true
			named = named || namedIn(message, g.Name, limit)
		case namedIn(message, g.Name, limit):
			named = true
		default:
			return false
		}
	}
	// As for Stalled: a message that names none of the gates while every
	// gate that is not established is a stream still starting is no news.
	return starting && (named || !namesAny)
}

// holdsStreams: a persisted streams condition stands over a restart, see
// streamsCondition.
func holdsStreams(streams []Gate, c metav1.Condition, limit int) bool {
	switch c.Status {
	case metav1.ConditionTrue:
		return holdsReady(streams)
	case metav1.ConditionFalse:
	default:
		return false
	}
	waiting := false
	for _, g := range streams {
		named := namedIn(c.Message, g.Name, limit)
		switch {
		case g.Level.normal() == LevelEstablished:
		case g.Unconfirmed && g.Level.normal() != LevelStalled:
			waiting = waiting || named
		case !named:
			return false
		}
	}
	return waiting
}

// startingReason reports whether a stream gate's reason is that of a stream
// on its way in: Starting, or a replay's (InitialSync, or the reasons of a
// cursor that expired or is ahead of the server). On an Unconfirmed gate,
// one not established since the accumulator heard of it, a replay is its
// first, whatever its reason: a stream resumed from a persisted cursor
// that expired while the controller was down is still starting.
func startingReason(reason string) bool {
	switch watch.Reason(reason) {
	case watch.ReasonStarting, watch.ReasonInitialSync, watch.ReasonExpiredResourceVersion, watch.ReasonResourceVersionTooLarge:
		return true
	}
	return false
}

// namedIn reports whether a message that [Rollup] wrote, within limit
// bytes, names the gate called name: one of its parts ("name: message;
// …") is that gate's. A message that does not list every gate (it ends
// with "… and N more", or was cut to its limit) may name any.
func namedIn(message, name string, limit int) bool {
	name = oneLine(name)
	if name == "" || incomplete(message, limit) {
		return true
	}
	return message == name || strings.HasPrefix(message, name+": ") || strings.HasPrefix(message, name+"; ") ||
		strings.Contains(message, "; "+name+": ") || strings.Contains(message, "; "+name+"; ") ||
		strings.HasSuffix(message, "; "+name)
}

// incomplete reports whether a message leaves gates out: it ends with
// "… and N more", or it was cut to its limit (a gate's own message that
// ends with "…", an error text cut short, leaves none out).
func incomplete(message string, limit int) bool {
	if strings.Contains(message, " … and ") && strings.HasSuffix(message, " more") {
		return true
	}
	return strings.HasSuffix(message, "…") && len(message) >= limit
}

// EverEstablished reports whether an owner with these persisted conditions
// has been established before: its Ready condition is True or False. A
// Ready that is Unknown or absent means never. See the package
// documentation for why this is the contract.
func EverEstablished(existing []metav1.Condition) bool {
	c := meta.FindStatusCondition(existing, ConditionReady)
	return c != nil && (c.Status == metav1.ConditionTrue || c.Status == metav1.ConditionFalse)
}

// Apply writes the trio that [Rollup] decides onto conditions, with
// apimachinery's [meta.SetStatusCondition] semantics: lastTransitionTime
// becomes now (to the second) only for a condition that is new or whose
// status changed; reason, message and observedGeneration are overwritten.
// Reconciling and Stalled are removed when Rollup leaves them out (and so
// is [Options.StreamsCondition] if it is set). Other conditions are left
// alone. It reports whether anything changed, so a reconcile that changes
// nothing can skip the status write.
//
// Set status.observedGeneration to generation in the same write: kstatus
// and kubectl wait read it.
func Apply(conditions *[]metav1.Condition, gates []Gate, generation int64, now time.Time, opts Options) (changed bool) {
	if conditions == nil {
		return false
	}
	want := Rollup(gates, *conditions, generation, opts)
	stamp := metav1.NewTime(now).Rfc3339Copy()
	for _, c := range want {
		c.LastTransitionTime = stamp
		if meta.SetStatusCondition(conditions, c) {
			changed = true
		}
	}
	for _, typ := range []string{ConditionReconciling, ConditionStalled, opts.StreamsCondition} {
		if typ == "" || meta.FindStatusCondition(want, typ) != nil {
			continue
		}
		if meta.RemoveStatusCondition(conditions, typ) {
			changed = true
		}
	}
	return changed
}

// verdict is the part of the roll-up that depends on the gates alone.
type verdict struct {
	level   Level
	reason  string
	message string
}

// decide finds the worst level among gates and the reason and message that
// go with it.
func decide(gates []Gate, opts Options) verdict {
	if len(gates) == 0 {
		if opts.Empty == EmptyEstablished {
			return verdict{LevelEstablished, ReasonNoGates, truncate("the object depends on no gates", opts.MessageLimit)}
		}
		return verdict{LevelProgressing, ReasonNoGates, truncate("no gates have been declared for the object yet", opts.MessageLimit)}
	}
	sorted := sortGates(gates)
	worst := sorted[0].Level.normal()
	if worst == LevelEstablished {
		return verdict{LevelEstablished, ReasonEstablished, truncate("all gates are established", opts.MessageLimit)}
	}
	fallback := ReasonProgressing
	if worst == LevelStalled {
		fallback = ReasonStalled
	}
	var parts []string
	for _, g := range sorted {
		if g.Level.normal() != worst {
			break
		}
		parts = append(parts, describe(g))
	}
	return verdict{
		level:   worst,
		reason:  repairReason(sorted[0].Reason, fallback),
		message: joinBounded(parts, opts.MaxListed, opts.MessageLimit),
	}
}

// describe is one gate's part of a message: "name: message".
func describe(g Gate) string {
	msg := oneLine(g.Message)
	if msg == "" {
		msg = oneLine(g.Reason)
	}
	name := oneLine(g.Name)
	switch {
	case name == "":
		return msg
	case msg == "":
		return name
	}
	return name + ": " + msg
}

// streamsCondition summarises the stream gates alone, positive polarity.
// Over a restart a persisted one for generation is kept as it is while
// the stream gates hold no evidence against it, as the trio is: a True
// while every stream gate that is not established is Starting, a False
// while a stream its message names is Unconfirmed and every other stream
// gate that is not established is Unconfirmed or named there.
func streamsCondition(gates []Gate, existing []metav1.Condition, generation int64, opts Options) metav1.Condition {
	var streams []Gate
	for _, g := range gates {
		if g.Stream {
			streams = append(streams, g)
		}
	}
	if prev := meta.FindStatusCondition(existing, opts.StreamsCondition); prev != nil && prev.ObservedGeneration == generation && holdsStreams(streams, *prev, opts.MessageLimit) {
		prev := *prev
		prev.LastTransitionTime = metav1.Time{}
		return prev
	}
	c := metav1.Condition{Type: opts.StreamsCondition, ObservedGeneration: generation, Status: metav1.ConditionTrue}
	if len(streams) == 0 {
		c.Reason, c.Message = ReasonNoStreams, truncate("the object depends on no watch streams", opts.MessageLimit)
		return c
	}
	v := decide(streams, opts)
	if v.level == LevelEstablished {
		c.Reason, c.Message = ReasonEstablished, truncate("all watch streams are established", opts.MessageLimit)
		return c
	}
	c.Status, c.Reason, c.Message = metav1.ConditionFalse, v.reason, v.message
	return c
}
