package watch

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// ErrNotSynced is what [SyncCheck.Check] returns, wrapped, while a stream
// has not been live once. Match it with errors.Is.
var ErrNotSynced = errors.New("watchgrade/watch: not synced")

// SyncCheck is an [Observer] that answers a readiness probe: it fails
// while a stream or informer that has reported has never been Streaming,
// and passes once each has been, for good: a stream Blocked later does not
// fail it, since taking the pod out of its Services (webhooks included)
// would fix nothing. Pass it among a process's observers and serve
// [SyncCheck.Check] as the probe (controller-runtime's mgr.AddReadyzCheck
// takes it). Do not use it for liveness: a restart never fixes RBAC, a
// missing CRD or an apiserver outage. The zero value is ready to use; it
// is safe for concurrent use.
type SyncCheck struct {
	mu sync.Mutex
	// waiting holds the streams that have reported but never streamed;
	// synced those that have.
	waiting, synced map[string]bool
}

var _ Observer = (*SyncCheck)(nil)

// StateChanged records that s.Stream exists, and whether it has streamed.
func (c *SyncCheck) StateChanged(s State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.synced == nil {
		c.waiting, c.synced = map[string]bool{}, map[string]bool{}
	}
	switch {
	case c.synced[s.Stream]:
	case s.Phase == PhaseStreaming:
		c.synced[s.Stream] = true
		delete(c.waiting, s.Stream)
	default:
		c.waiting[s.Stream] = true
	}
}

// markSynced records that stream has synced, for good, as a Streaming
// state does: [Streams.Check] tells it of a name whose informers have all
// synced (their HasSynced), which is no state of the stream's.
func (c *SyncCheck) markSynced(stream string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.synced == nil {
		c.waiting, c.synced = map[string]bool{}, map[string]bool{}
	}
	c.synced[stream] = true
	delete(c.waiting, stream)
}

// Expect names streams the probe waits for before they have reported: a
// process that knows which streams it will run (the informers its
// controllers watch) is not ready before they exist, and each counts as
// waiting until it has been Streaming, as if it had reported. A stream
// that will not run after all (its kind is not served) is dropped with
// Forget. Expecting a stream that has synced changes nothing.
func (c *SyncCheck) Expect(streams ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.synced == nil {
		c.waiting, c.synced = map[string]bool{}, map[string]bool{}
	}
	for _, s := range streams {
		if !c.synced[s] {
			c.waiting[s] = true
		}
	}
}

// Forget drops a stream that has stopped for good, or that Expect named
// and will not run; a stream of that name that reports later counts
// afresh.
func (c *SyncCheck) Forget(stream string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiting, stream)
	delete(c.synced, stream)
}

// SessionEnded does nothing: a session ending changes no stream's sync.
func (c *SyncCheck) SessionEnded(SessionEnd) {}

// Check returns nil once every stream that has reported, or that Expect
// named, has been Streaming, else an error wrapping [ErrNotSynced] naming
// at most five.
func (c *SyncCheck) Check(*http.Request) error {
	c.mu.Lock()
	waiting := make([]string, 0, len(c.waiting))
	for name := range c.waiting {
		waiting = append(waiting, name)
	}
	c.mu.Unlock()
	if len(waiting) == 0 {
		return nil
	}
	slices.Sort(waiting)
	named := waiting[:min(len(waiting), 5)]
	more := ""
	if n := len(waiting) - len(named); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return fmt.Errorf("%w: %s%s never streamed", ErrNotSynced, strings.Join(named, ", "), more)
}
