package readiness

import (
	"cmp"
	"slices"

	"github.com/watchgrade/watchgrade/watch"
)

// Level is how far one gate is from letting its owner be Ready. The set is
// closed: [LevelEstablished], [LevelProgressing], [LevelStalled]. The zero
// Level is not valid; [Rollup] reads it as progressing.
type Level string

const (
	// LevelEstablished: the gate is satisfied; it does not hold the owner
	// back.
	LevelEstablished Level = "Established"
	// LevelProgressing: the gate is not satisfied yet and is expected to be
	// without anyone acting (a stream replaying, a transient failure being
	// retried). kstatus reads it as InProgress.
	LevelProgressing Level = "Progressing"
	// LevelStalled: the gate will not be satisfied until a human acts
	// (missing RBAC, a missing CRD, an invalid spec, or no progress for
	// longer than a deadline). kstatus reads it as Failed.
	LevelStalled Level = "Stalled"
)

// Levels returns every Level, best first.
func Levels() []Level {
	return []Level{LevelEstablished, LevelProgressing, LevelStalled}
}

// rank orders levels from best to worst; unknown levels count as
// progressing, so a typo never makes an owner Ready or Stalled.
func (l Level) rank() int {
	switch l {
	case LevelEstablished:
		return 0
	case LevelStalled:
		return 2
	default:
		return 1
	}
}

// normal returns l, or LevelProgressing for a Level outside the set.
func (l Level) normal() Level {
	switch l {
	case LevelEstablished, LevelStalled:
		return l
	default:
		return LevelProgressing
	}
}

// Gate is one thing an owner object's readiness depends on: a watch stream
// ([StreamGate]) or a dependency of the caller's own, such as a source
// cluster being reachable or a path being accepted.
//
// Reason is copied into conditions: it should match the CRD reason pattern
// (see [ValidReason]); [Rollup] repairs one that does not. Message must be
// stable: no timestamps, counters or retry-by-retry error text, because a
// changed message is a status write.
type Gate struct {
	// Name identifies the gate within its owner, such as a stream's name or
	// "SourceCluster". Messages quote it; ties between gates at the same
	// level are broken by it.
	Name string
	// Level is how far the gate is from satisfied.
	Level Level
	// Reason says why, in CamelCase.
	Reason string
	// Message is a human-readable sentence.
	Message string
	// Stream is true for a gate made by [StreamGate]; it selects the gates
	// summarised by [Options.StreamsCondition].
	Stream bool
	// Starting is true for a stream gate that is not established only
	// because it is still starting: a stream that this process has not had
	// established yet, within its grace. While every gate that is not
	// established is a stream gate Starting and none is stalled, an owner
	// whose conditions say Ready=True for its generation keeps them (see
	// [Rollup]): a controller restart is not news. The [Accumulator] sets
	// it for stream gates, for [AccumulatorOptions.StartGrace]; StreamGate
	// leaves it false. It means nothing on a caller's gate (Stream false)
	// or a stalled one.
	Starting bool
	// Unconfirmed is true for a stream gate whose stream this process has
	// seen neither established nor stalled since it first heard of it: what
	// it shows is no evidence yet for or against the Stalled or Reconciling
	// conditions an earlier process persisted, which [Rollup] then keeps
	// (see its table). The [Accumulator] sets it for stream gates, for
	// [AccumulatorOptions.NotReadyHold], on owners whose conditions it has
	// not changed itself; StreamGate leaves it false. It means nothing on a
	// caller's gate (Stream false) or a stalled one.
	Unconfirmed bool
}

// Established returns a satisfied gate of the caller's own.
func Established(name, reason, message string) Gate {
	return Gate{Name: name, Level: LevelEstablished, Reason: reason, Message: message}
}

// Progressing returns a gate of the caller's own that is expected to be
// satisfied without anyone acting.
func Progressing(name, reason, message string) Gate {
	return Gate{Name: name, Level: LevelProgressing, Reason: reason, Message: message}
}

// Stalled returns a gate of the caller's own that needs a human.
func Stalled(name, reason, message string) Gate {
	return Gate{Name: name, Level: LevelStalled, Reason: reason, Message: message}
}

// StreamLevel maps a stream's state onto a gate level:
//
//	phase       NeedsHuman  level
//	----------  ----------  -----------
//	Streaming   any         established
//	Starting    any         progressing
//	Replaying   any         progressing
//	Blocked     false       progressing
//	Blocked     true        stalled
//	other       any         progressing
//
// A stream past its progress deadline is published as Blocked with
// NeedsHuman set (see [watch.Grade]), so it is stalled here too.
func StreamLevel(s watch.State) Level {
	switch s.Phase {
	case watch.PhaseStreaming:
		return LevelEstablished
	case watch.PhaseBlocked:
		if s.NeedsHuman {
			return LevelStalled
		}
		return LevelProgressing
	default:
		return LevelProgressing
	}
}

// StreamGate returns the gate for a stream in state s, named after the
// stream, with the stream's reason and message.
func StreamGate(s watch.State) Gate {
	return Gate{
		Name:    s.Stream,
		Level:   StreamLevel(s),
		Reason:  string(s.Reason),
		Message: s.Message,
		Stream:  true,
	}
}

// pendingStreamGate stands for a stream an owner depends on that has not
// reported a state yet.
func pendingStreamGate(name string) Gate {
	return Gate{
		Name:    name,
		Level:   LevelProgressing,
		Reason:  string(watch.ReasonStarting),
		Message: "the stream has not reported yet",
		Stream:  true,
	}
}

// compareGates is the documented tie order: worst level first, then a
// stream gate only Starting after every other gate, then Name, Reason and
// Message in byte order, stream gates after the caller's own.
func compareGates(a, b Gate) int {
	if c := cmp.Compare(b.Level.rank(), a.Level.rank()); c != 0 {
		return c
	}
	if c := cmp.Compare(onlyStarting(a), onlyStarting(b)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Reason, b.Reason); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Message, b.Message); c != 0 {
		return c
	}
	switch {
	case a.Stream == b.Stream:
		return 0
	case b.Stream:
		return -1
	default:
		return 1
	}
}

// onlyStarting is 1 for a stream gate progressing only because it is
// still starting (see [Gate.Starting]), 0 for any other gate.
func onlyStarting(g Gate) int {
	if g.Stream && g.Starting && g.Level.normal() == LevelProgressing {
		return 1
	}
	return 0
}

// sortGates returns a sorted copy of gates, worst first.
func sortGates(gates []Gate) []Gate {
	out := slices.Clone(gates)
	slices.SortStableFunc(out, compareGates)
	return out
}
