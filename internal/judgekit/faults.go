package judgekit

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// Slot is a kind of fault; faults of one slot (on one server) never
// overlap.
type Slot string

const (
	SlotErr       Slot = "err"
	SlotRefuse    Slot = "refuse"
	SlotFlap      Slot = "flap"
	SlotStale     Slot = "stale"
	SlotWatchList Slot = "refuse-watch-list"      // not trouble: a server without watch-list
	SlotInStream  Slot = "watch-list-unsupported" // not trouble: refused by an ERROR event
	SlotStall     Slot = "stall-cache"
	SlotHandler   Slot = "handler"
	SlotSlow      Slot = "slow-handler" // not trouble of the server's: slow, each call returns
	SlotStuck     Slot = "stuck-handler"
)

// Trouble reports whether a fault of slot s keeps a stream from being
// live, or its consumer from being current.
func (s Slot) Trouble() bool {
	return s != SlotWatchList && s != SlotInStream && s != SlotSlow
}

// HandlerSlot reports whether s is a fault of the consumer's handler
// rather than of the server.
func (s Slot) HandlerSlot() bool { return s == SlotHandler || s == SlotSlow || s == SlotStuck }

// HumanErrs are the errors a server fails requests with that need a
// human, as client-go returns them.
var HumanErrs = []func() error{
	watchtest.Forbidden,
	func() error { return apierrors.NewUnauthorized("token expired") },
	watchtest.NotFound,
	// A CA rotated under the controller, as client-go reports it.
	func() error {
		return TransportErr(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}})
	},
}

// configmaps is the judges' collection, which a server timeout names.
var configmaps = schema.GroupResource{Resource: "configmaps"}

// TransientErrs are the errors a server fails requests with that heal by
// themselves, as client-go returns them; some draw from c.
var TransientErrs = []func(c *Chooser) error{
	func(c *Chooser) error { return watchtest.TooManyRequests(1 + c.Intn(5)) },
	func(*Chooser) error { return watchtest.ServiceUnavailable() },
	func(*Chooser) error { return apierrors.NewInternalError(errors.New("etcdserver: request timed out")) },
	// A dial or a read that timed out, and client-go's own request
	// timeout, as client-go reports them.
	func(*Chooser) error {
		return TransportErr(&net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded})
	},
	func(*Chooser) error { return TransportErr(context.DeadlineExceeded) },
	// The server's own timeout on a LIST it could not serve in time, and
	// a name that does not resolve (a control plane moving).
	func(*Chooser) error { return apierrors.NewServerTimeout(configmaps, "list", 2) },
	func(*Chooser) error {
		return TransportErr(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "kubernetes.default.svc", IsNotFound: true}})
	},
	// A connection reset: an apiserver restarting behind a proxy or a
	// load balancer.
	func(*Chooser) error {
		return TransportErr(&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET})
	},
}

// TransportErr is err as client-go returns a transport failure: inside a
// *url.Error naming the request.
func TransportErr(err error) error {
	return &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/api/v1/configmaps?resourceVersion=12&watch=true", Err: err}
}

// MaxSlowCall is the longest call of a handler that is slow but keeps
// up: a burst of a dozen events still drains well within TransientGrace.
// A quarter of the slow handlers drawn are slower, up to MaxHungCall a
// call: they fall behind a burst, or hang on every call.
const (
	MaxSlowCall = 500 * time.Millisecond
	MaxHungCall = 6 * time.Minute
)

// Fault is one fault as a generator drew it.
type Fault struct {
	Slot Slot
	// Human is true for a cause that needs a human.
	Human bool
	// Err is the error requests fail with (SlotErr), or the handler's
	// (SlotHandler).
	Err error
	// Delay is how long a slow handler's call takes (SlotSlow).
	Delay time.Duration
	// Faults is what the server does meanwhile (none for a handler's
	// fault).
	Faults watchtest.Faults
	// Desc describes the fault: its slot, and what was drawn.
	Desc string
}

// DrawFault draws a fault of slot s with c: whether an error needs a
// human and which, a flapping watch's lifetime, a slow handler's delay.
// How long it lasts is the generator's.
func DrawFault(c *Chooser, s Slot) Fault {
	fl := Fault{Slot: s, Desc: string(s)}
	switch s {
	case SlotErr:
		fl.Human = c.Intn(2) == 0
		if fl.Human {
			fl.Err = HumanErrs[c.Intn(len(HumanErrs))]()
		} else {
			fl.Err = TransientErrs[c.Intn(len(TransientErrs))](c)
		}
		fl.Faults.Err = fl.Err
		fl.Desc += " " + fl.Err.Error()
	case SlotRefuse:
		fl.Faults.Refuse = true
	case SlotFlap:
		fl.Faults.WatchLifetime = c.LogDuration(time.Millisecond, 3*time.Second)
		fl.Desc += " " + fl.Faults.WatchLifetime.String()
	case SlotStale:
		fl.Faults.StaleProxy = true
	case SlotWatchList:
		fl.Faults.RefuseWatchList = true
	case SlotInStream:
		fl.Faults.WatchListUnsupported = true
	case SlotStall:
		fl.Faults.StallCache = true
	case SlotHandler:
		fl.Human = c.Intn(3) == 0
		if fl.Human {
			fl.Err = fmt.Errorf("update status: %w", watchtest.Forbidden())
		} else {
			fl.Err = errors.New("database unavailable")
		}
		fl.Desc += " " + fl.Err.Error()
	case SlotSlow:
		fl.Delay = c.LogDuration(time.Millisecond, MaxSlowCall)
		switch c.Intn(8) {
		case 0:
			fl.Delay = c.LogDuration(MaxSlowCall, MaxHungCall)
		case 1:
			// Hangs on every call, each shorter than ProgressDeadline.
			fl.Delay = c.LogDuration(time.Minute, 5*time.Minute)
		}
		fl.Desc += " " + fl.Delay.String()
	}
	return fl
}

// Combine returns the faults in force, by slot, as the one set a server
// takes, combining them in slot order.
func Combine(faults map[Slot]watchtest.Faults) watchtest.Faults {
	var f watchtest.Faults
	for _, s := range slices.Sorted(maps.Keys(faults)) {
		g := faults[s]
		f.Refuse = f.Refuse || g.Refuse
		f.RefuseWatchList = f.RefuseWatchList || g.RefuseWatchList
		f.WatchListUnsupported = f.WatchListUnsupported || g.WatchListUnsupported
		f.StaleProxy = f.StaleProxy || g.StaleProxy
		f.StallCache = f.StallCache || g.StallCache
		if g.Err != nil {
			f.Err = g.Err
		}
		if g.WatchLifetime > 0 {
			f.WatchLifetime = g.WatchLifetime
		}
	}
	return f
}
