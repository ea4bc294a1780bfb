package wgctrltest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
)

// errorLines is the logr sink a run's Grader and Owners log to: it records
// each error-level line in the run's timeline ([RecordLog]) and passes
// every line on to the logger the Operator's Options named, if any.
type errorLines struct {
	res    *Result
	name   string
	values []any
	next   logr.LogSink // nil: none
}

func (s *errorLines) Init(info logr.RuntimeInfo) {
	if s.next != nil {
		s.next.Init(info)
	}
}

// Enabled is the level the next logger logs, or only errors.
func (s *errorLines) Enabled(level int) bool { return s.next != nil && s.next.Enabled(level) }

func (s *errorLines) Info(level int, msg string, kv ...any) {
	if s.next != nil {
		s.next.Info(level, msg, kv...)
	}
}

func (s *errorLines) Error(err error, msg string, kv ...any) {
	var b strings.Builder
	if s.name != "" {
		b.WriteString(s.name + ": ")
	}
	b.WriteString(msg)
	if err != nil {
		b.WriteString(": " + err.Error())
	}
	all := append(slices.Clone(s.values), kv...)
	for i := 0; i+1 < len(all); i += 2 {
		fmt.Fprintf(&b, " %v=%v", all[i], all[i+1])
	}
	s.res.logError(types.NamespacedName{}, b.String())
	if s.next != nil {
		s.next.Error(err, msg, kv...)
	}
}

func (s *errorLines) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.values = append(slices.Clone(s.values), kv...)
	if s.next != nil {
		c.next = s.next.WithValues(kv...)
	}
	return &c
}

func (s *errorLines) WithName(name string) logr.LogSink {
	c := *s
	c.name = name
	if s.name != "" {
		c.name = s.name + "." + name
	}
	if s.next != nil {
		c.next = s.next.WithName(name)
	}
	return &c
}

// controllerLog is the logr sink of the controller's logger: it records
// each error-level line for the owner the Reconcile was of, as
// "MESSAGE: ERROR" (the controller's values, a reconcile ID among them,
// would make no two runs alike), and drops the rest. A line logged once
// the process was told to stop is not recorded: controller-runtime logs
// one there for sources that never synced ("Could not wait for Cache to
// sync"), which a stop causes, not a fault.
type controllerLog struct {
	res     *Result
	owner   types.NamespacedName
	stopped <-chan struct{}
}

func (s *controllerLog) Init(logr.RuntimeInfo)          {}
func (s *controllerLog) Enabled(int) bool               { return false }
func (s *controllerLog) Info(int, string, ...any)       {}
func (s *controllerLog) WithValues(...any) logr.LogSink { return s }
func (s *controllerLog) WithName(string) logr.LogSink   { return s }

func (s *controllerLog) Error(err error, msg string, _ ...any) {
	select {
	case <-s.stopped:
		return
	default:
	}
	if err != nil {
		msg += ": " + err.Error()
	}
	s.res.logError(s.owner, msg)
}
