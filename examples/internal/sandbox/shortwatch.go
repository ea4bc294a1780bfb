package sandbox

import (
	"net/http"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
)

// ShortWatches returns a copy of cfg whose every watch request asks the
// API server to end the watch after timeout (the timeoutSeconds query
// parameter, rounded up to whole seconds), unless the request already asks
// for less. Nothing else changes: lists, writes and the server are left as
// they are.
//
// A real kube-apiserver ends a watch that names no timeout after 30 to 60
// minutes (--min-request-timeout), and checks RBAC only when a watch opens.
// With short watches a controller sees, within seconds, the routine closes
// and the denials that a cluster would otherwise show it over an hour: what
// the demo needs on a cluster whose flags it cannot choose. Keep timeout
// well above watchgrade's Policy.ShortSession (1 s by default), 2 s say:
// watches closed empty in under that, again and again, are graded as
// flapping.
func ShortWatches(cfg *rest.Config, timeout time.Duration) *rest.Config {
	seconds := int64((timeout + time.Second - 1) / time.Second)
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			q := req.URL.Query()
			if w := q.Get("watch"); w != "true" && w != "1" {
				return next.RoundTrip(req)
			}
			if asked, err := strconv.ParseInt(q.Get("timeoutSeconds"), 10, 64); err == nil && asked > 0 && asked <= seconds {
				return next.RoundTrip(req)
			}
			req = req.Clone(req.Context())
			q.Set("timeoutSeconds", strconv.FormatInt(seconds, 10))
			req.URL.RawQuery = q.Encode()
			return next.RoundTrip(req)
		})
	})
	return cfg
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
