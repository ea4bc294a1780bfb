package scenarios

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// A parity family is one fault played against a backend, the simulated
// server (watchtest.Server, inside a synctest bubble) or the real
// kube-apiserver (through the harness), written down as what the CLIENT
// sees: status codes, event types and their order, error shapes,
// bookmarks and their annotation. resourceVersions differ between the
// two and are left out; names are kept.
type parityFamily struct {
	name string
	play func(ctx context.Context, b parityBackend) []string
}

// paritySim configures the simulated server of the families that play
// what a server option models; the others get the defaults.
var paritySim = map[string]watchtest.ServerOptions{
	"slow-consumer-small-objects": {WatchChannelSize: 1000},
}

// parityBackend is what a family needs of a server.
type parityBackend interface {
	list(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error)
	watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// write creates or updates a ConfigMap of the family's collection and
	// returns its resourceVersion.
	write(ctx context.Context, name string) string
	remove(ctx context.Context, name string)
	// elsewhere writes outside the collection: etcd's revision moves.
	elsewhere(ctx context.Context)
	// current returns etcd's current revision, from a consistent LIST.
	current(ctx context.Context) string
	restart()
	compact(ctx context.Context)
}

// parityDocumented names the families whose mismatch the watchtest
// package doc lists as a difference, with the doc's words for it.
var parityDocumented = map[string]string{}

// TestParity plays every family against the simulator and the real
// kube-apiserver and compares what the client saw.
func TestParity(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	client := kubernetes.NewForConfigOrDie(c.Config())
	start := time.Now()
	var mismatches []string
	match := 0
	for i, f := range parityFamilies() {
		ns := fmt.Sprintf("parity-%d", i)
		if _, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		real := f.play(t.Context(), &realBackend{c: c, client: client, ns: ns})
		var sim []string
		synctest.Test(t, func(t *testing.T) {
			s := watchtest.NewServer(paritySim[f.name])
			sim = f.play(t.Context(), &simBackend{s: s})
			s.CloseWatches()
		})
		if strings.Join(real, " | ") == strings.Join(sim, " | ") {
			match++
			t.Logf("parity %s: %s", f.name, strings.Join(real, " | "))
			continue
		}
		why, documented := parityDocumented[f.name]
		line := fmt.Sprintf("%s:\n      real: %s\n      sim:  %s", f.name, strings.Join(real, " | "), strings.Join(sim, " | "))
		if documented {
			line += "\n      documented: " + why
		} else {
			t.Errorf("parity mismatch not documented in watchtest's package doc: %s", line)
		}
		mismatches = append(mismatches, line)
	}
	fmt.Printf("e2e: parity families=%d match=%d took=%.0fs\n", len(parityFamilies()), match, time.Since(start).Seconds())
	for _, m := range mismatches {
		fmt.Printf("e2e: parity mismatch %s\n", m)
	}
}

func parityFamilies() []parityFamily {
	return []parityFamily{
		{"routine-timeout", func(ctx context.Context, b parityBackend) []string {
			b.write(ctx, "a")
			w, err := b.watch(ctx, metav1.ListOptions{ResourceVersion: b.current(ctx), TimeoutSeconds: ptr.To[int64](1)})
			return append(opened(err), drain(w, 5*time.Second)...)
		}},
		{"start-empty", func(ctx context.Context, b parityBackend) []string {
			b.write(ctx, "b")
			b.write(ctx, "a")
			w, err := b.watch(ctx, metav1.ListOptions{ResourceVersion: "", AllowWatchBookmarks: true, TimeoutSeconds: ptr.To[int64](1)})
			return append(opened(err), drain(w, 5*time.Second)...)
		}},
		{"start-zero", func(ctx context.Context, b parityBackend) []string {
			b.write(ctx, "b")
			settle(ctx, b, b.write(ctx, "a"))
			w, err := b.watch(ctx, metav1.ListOptions{ResourceVersion: "0", AllowWatchBookmarks: true, TimeoutSeconds: ptr.To[int64](1)})
			return append(opened(err), drain(w, 5*time.Second)...)
		}},
		{"resume", func(ctx context.Context, b parityBackend) []string {
			from := b.write(ctx, "a")
			b.write(ctx, "b")
			b.write(ctx, "a")
			b.remove(ctx, "b")
			w, err := b.watch(ctx, metav1.ListOptions{ResourceVersion: from, TimeoutSeconds: ptr.To[int64](1)})
			return append(opened(err), drain(w, 5*time.Second)...)
		}},
		{"watch-list-end-bookmark", func(ctx context.Context, b parityBackend) []string {
			b.write(ctx, "b")
			b.write(ctx, "a")
			w, err := b.watch(ctx, watchListOptions(""))
			return append(opened(err), drainUntil(w, 5*time.Second, isInitialEnd)...)
		}},
		{"watch-list-without-bookmarks", func(ctx context.Context, b parityBackend) []string {
			b.write(ctx, "a")
			o := watchListOptions("")
			o.AllowWatchBookmarks = false
			o.TimeoutSeconds = ptr.To[int64](1)
			w, err := b.watch(ctx, o)
			return append(opened(err), drain(w, 5*time.Second)...)
		}},
		{"watch-list-refused-invalid", func(ctx context.Context, b parityBackend) []string {
			o := watchListOptions("")
			o.ResourceVersionMatch = ""
			w, err := b.watch(ctx, o)
			return append(opened(err), drain(w, time.Second)...)
		}},
		{"bookmark-before-deadline", func(ctx context.Context, b parityBackend) []string {
			b.write(ctx, "a")
			from := b.current(ctx)
			w, err := b.watch(ctx, metav1.ListOptions{ResourceVersion: from, AllowWatchBookmarks: true, TimeoutSeconds: ptr.To[int64](3)})
			b.elsewhere(ctx)
			return append(opened(err), drain(w, 6*time.Second)...)
		}},
		{"cursor-ahead-silent", func(ctx context.Context, b parityBackend) []string {
			b.write(ctx, "a")
			w, err := b.watch(ctx, metav1.ListOptions{ResourceVersion: plus(b.current(ctx), 1000), AllowWatchBookmarks: true, TimeoutSeconds: ptr.To[int64](4)})
			b.write(ctx, "b")
			b.elsewhere(ctx)
			return append(opened(err), drain(w, 8*time.Second)...)
		}},
		{"watch-list-too-large", func(ctx context.Context, b parityBackend) []string {
			w, err := b.watch(ctx, watchListOptions(plus(b.current(ctx), 1000)))
			return append(opened(err), drain(w, 8*time.Second)...)
		}},
		{"list-too-large", func(ctx context.Context, b parityBackend) []string {
			_, err := b.list(ctx, metav1.ListOptions{ResourceVersion: plus(b.current(ctx), 1000)})
			_, err2 := b.list(ctx, metav1.ListOptions{ResourceVersion: plus(b.current(ctx), 1000), ResourceVersionMatch: metav1.ResourceVersionMatchExact})
			return []string{listed(nil, err), listed(nil, err2)}
		}},
		{"expiry-after-restart", func(ctx context.Context, b parityBackend) []string {
			cursor := b.write(ctx, "a")
			w, err := b.watch(ctx, metav1.ListOptions{ResourceVersion: cursor, AllowWatchBookmarks: true})
			var got []string
			got = append(got, opened(err)...)
			b.elsewhere(ctx) // a real cluster writes every few seconds (leases)
			b.restart()
			got = append(got, drain(w, 10*time.Second)...)
			time.Sleep(3 * time.Second) // the new watch cache is ready
			w, err = b.watch(ctx, metav1.ListOptions{ResourceVersion: cursor, AllowWatchBookmarks: true})
			got = append(got, opened(err)...)
			return append(got, drain(w, 5*time.Second)...)
		}},
		{"expiry-caught-up-after-restart", func(ctx context.Context, b parityBackend) []string {
			b.write(ctx, "a")
			cursor := b.current(ctx)
			b.elsewhere(ctx)
			b.restart()
			time.Sleep(3 * time.Second)
			w, err := b.watch(ctx, metav1.ListOptions{ResourceVersion: cursor, AllowWatchBookmarks: true})
			return append(opened(err), drain(w, 5*time.Second)...)
		}},
		{"compaction-during-paged-list", func(ctx context.Context, b parityBackend) []string {
			// Just after the compaction the watch cache's snapshots still
			// serve the rest of the list.
			for _, n := range []string{"a", "b", "c", "d", "e"} {
				b.write(ctx, n)
			}
			first, err := b.list(ctx, metav1.ListOptions{Limit: 2})
			got := []string{listed(first, err)}
			if err != nil {
				return got
			}
			b.write(ctx, "f")
			b.compact(ctx)
			second, err := b.list(ctx, metav1.ListOptions{Limit: 2, Continue: first.Continue})
			return append(got, listed(second, err))
		}},
		{"expiry-lists-after-compaction", func(ctx context.Context, b parityBackend) []string {
			// Once the cacher's compactor (15 s poll) has seen it: the
			// continue token's 410 and its new token, the exact lists' 410.
			for _, n := range []string{"a", "b", "c", "d", "e"} {
				b.write(ctx, n)
			}
			first, err := b.list(ctx, metav1.ListOptions{Limit: 2})
			got := []string{listed(first, err)}
			if err != nil {
				return got
			}
			from := first.ResourceVersion
			b.write(ctx, "f")
			b.write(ctx, "c")
			b.compact(ctx)
			time.Sleep(16 * time.Second)
			cont, err := b.list(ctx, metav1.ListOptions{Limit: 2, Continue: first.Continue})
			got = append(got, listed(cont, err))
			var st apierrors.APIStatus
			if errors.As(err, &st) && st.Status().Continue != "" {
				rest, err := b.list(ctx, metav1.ListOptions{Limit: 10, Continue: st.Status().Continue})
				got = append(got, listed(rest, err))
			}
			exact, err := b.list(ctx, metav1.ListOptions{ResourceVersion: from, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
			legacy, err2 := b.list(ctx, metav1.ListOptions{ResourceVersion: from, Limit: 10})
			return append(got, listed(exact, err), listed(legacy, err2))
		}},
		{"list-semantics", func(ctx context.Context, b parityBackend) []string {
			var last string
			for _, n := range []string{"a", "b", "c"} {
				last = b.write(ctx, n)
			}
			settle(ctx, b, last)
			zero, err := b.list(ctx, metav1.ListOptions{ResourceVersion: "0", Limit: 1})
			got := []string{listed(zero, err)}
			newer, err := b.list(ctx, metav1.ListOptions{ResourceVersion: "1", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: 2})
			got = append(got, listed(newer, err))
			_, err = b.list(ctx, metav1.ListOptions{ResourceVersion: "0", ResourceVersionMatch: metav1.ResourceVersionMatchExact})
			return append(got, listed(nil, err))
		}},
		{"slow-consumer", func(ctx context.Context, b parityBackend) []string {
			w, err := b.watch(ctx, metav1.ListOptions{ResourceVersion: b.current(ctx)})
			got := opened(err)
			if err != nil {
				return got
			}
			const n = 200
			for i := range n {
				b.write(ctx, fmt.Sprintf("big%03d", i))
			}
			time.Sleep(2 * time.Second)
			events := drain(w, 5*time.Second)
			errs := 0
			for _, e := range events {
				if strings.HasPrefix(e, "ERROR") {
					errs++
				}
			}
			closed := len(events) > 0 && events[len(events)-1] == "closed"
			return append(got, fmt.Sprintf("cut=%v errors=%d", closed && len(events)-1 < n, errs))
		}},
		// A burst of a thousand small objects a consumer leaves unread:
		// the connection's buffers hold it, so the server does not cut
		// the watch, as the simulator with a buffer of 1,000 events (its
		// WatchChannelSize doc; TestConsumerFarBehindIsNotStreaming).
		{"slow-consumer-small-objects", func(ctx context.Context, b parityBackend) []string {
			w, err := b.watch(ctx, metav1.ListOptions{ResourceVersion: b.current(ctx)})
			got := opened(err)
			if err != nil {
				return got
			}
			const n = 1000
			for i := range n {
				b.write(ctx, fmt.Sprintf("small%04d", i))
			}
			time.Sleep(2 * time.Second)
			events := drain(w, 5*time.Second)
			closed := len(events) > 0 && events[len(events)-1] == "closed"
			added := 0
			for _, e := range events {
				if strings.HasPrefix(e, "ADDED") {
					added++
				}
			}
			return append(got, fmt.Sprintf("cut=%v added=%d", closed && added < n, added))
		}},
	}
}

// settle waits until the watch cache has seen rv: a read at "0" is served
// from a cache that may lag etcd (by far more than milliseconds on a
// loaded machine), and the simulator's never does.
func settle(ctx context.Context, b parityBackend, rv string) {
	_, _ = b.list(ctx, metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: 1})
}

func watchListOptions(rv string) metav1.ListOptions {
	return metav1.ListOptions{ResourceVersion: rv, SendInitialEvents: ptr.To(true),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true}
}

func plus(rv string, n int64) string {
	var v int64
	fmt.Sscan(rv, &v)
	return fmt.Sprint(v + n)
}

// opened writes down a Watch call's answer.
func opened(err error) []string {
	if err == nil {
		return []string{"200"}
	}
	return []string{"open " + statusOf(err)}
}

// listed writes down a List call's answer: the names, whether a continue
// token came, or the error.
func listed(l *corev1.ConfigMapList, err error) string {
	if err != nil {
		return "list " + statusOf(err)
	}
	if l == nil {
		return "list served"
	}
	var names []string
	for _, o := range l.Items {
		names = append(names, o.Name)
	}
	return fmt.Sprintf("list [%s] continue=%v", strings.Join(names, " "), l.Continue != "")
}

// statusOf writes down an error's shape: code, reason, causes, and
// whether a continue token or a Retry-After came with it.
func statusOf(err error) string {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return "non-status error"
	}
	s := st.Status()
	out := fmt.Sprintf("%d %s", s.Code, s.Reason)
	if s.Details != nil {
		for _, c := range s.Details.Causes {
			out += " cause=" + string(c.Type)
		}
		if s.Details.RetryAfterSeconds > 0 {
			out += " retry-after"
		}
	}
	if s.Continue != "" {
		out += " continue"
	}
	if strings.Contains(s.Message, "inconsistent") {
		out += " inconsistent"
	}
	return out
}

// event writes down one event: type and name, or a bookmark and its
// annotation, or an ERROR's status.
func parityEvent(ev watch.Event) string {
	switch ev.Type {
	case watch.Error:
		return "ERROR " + statusOf(apierrors.FromObject(ev.Object))
	case watch.Bookmark:
		if cm, ok := ev.Object.(*corev1.ConfigMap); ok && cm.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
			return "BOOKMARK initial-events-end"
		}
		return "BOOKMARK"
	}
	cm, _ := ev.Object.(*corev1.ConfigMap)
	if cm == nil {
		return string(ev.Type) + " ?"
	}
	return string(ev.Type) + " " + cm.Name
}

func isInitialEnd(s string) bool { return s == "BOOKMARK initial-events-end" }

// drain reads w until it closes ("closed") or d passes ("open"), then
// stops it.
func drain(w watch.Interface, d time.Duration) []string {
	return drainUntil(w, d, func(string) bool { return false })
}

func drainUntil(w watch.Interface, d time.Duration, stop func(string) bool) []string {
	if w == nil {
		return nil
	}
	defer w.Stop()
	var got []string
	timeout := time.After(d)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return append(got, "closed")
			}
			e := parityEvent(ev)
			if e == "BOOKMARK" && len(got) > 0 && got[len(got)-1] == "BOOKMARK" {
				// Bookmarks are best-effort: their presence is compared,
				// not their number (see the watchtest package doc).
				continue
			}
			got = append(got, e)
			if stop(e) {
				return got
			}
		case <-timeout:
			return append(got, "open")
		}
	}
}

// realBackend is the real kube-apiserver, reached through the proxy with
// the clientset's REST client and no retries, so that a 429 or a 504
// with Retry-After reaches the caller as the simulator's does.
type realBackend struct {
	c      *harness.Cluster
	client kubernetes.Interface
	ns     string
}

func (r *realBackend) list(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	out := &corev1.ConfigMapList{}
	err := r.client.CoreV1().RESTClient().Get().Namespace(r.ns).Resource("configmaps").
		VersionedParams(&opts, scheme.ParameterCodec).MaxRetries(0).Do(ctx).Into(out)
	return out, err
}

func (r *realBackend) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.client.CoreV1().RESTClient().Get().Namespace(r.ns).Resource("configmaps").
		VersionedParams(&opts, scheme.ParameterCodec).MaxRetries(0).Watch(ctx)
}

func (r *realBackend) write(ctx context.Context, name string) string {
	cms := r.client.CoreV1().ConfigMaps(r.ns)
	pad := 2 << 10
	if strings.HasPrefix(name, "big") {
		// Past what Go's HTTP/2 stream window (4 MiB) and the sockets
		// hold, the cacher's own buffers fill.
		pad = 48 << 10
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"at": time.Now().String(), "pad": strings.Repeat("x", pad)}}
	got, err := cms.Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		panic(fmt.Sprintf("parity write %s: %v", name, err))
	}
	return got.ResourceVersion
}

func (r *realBackend) remove(ctx context.Context, name string) {
	if err := r.client.CoreV1().ConfigMaps(r.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		panic(fmt.Sprintf("parity delete %s: %v", name, err))
	}
}

func (r *realBackend) elsewhere(ctx context.Context) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "elsewhere-"}}
	if _, err := r.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		panic(fmt.Sprintf("parity write elsewhere: %v", err))
	}
}

func (r *realBackend) current(ctx context.Context) string {
	l, err := r.client.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		panic(fmt.Sprintf("parity current revision: %v", err))
	}
	return l.ResourceVersion
}

func (r *realBackend) restart() { r.c.RestartAPIServer() }

func (r *realBackend) compact(ctx context.Context) {
	if _, err := r.c.CompactAsAPIServer(ctx); err != nil {
		panic(fmt.Sprintf("parity compact: %v", err))
	}
}

// simBackend is the simulated server.
type simBackend struct{ s *watchtest.Server }

func (b *simBackend) list(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	l, err := b.s.ListWithContext(ctx, opts)
	if err != nil {
		return nil, err
	}
	return l.(*corev1.ConfigMapList), nil
}

func (b *simBackend) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return b.s.WatchWithContext(ctx, opts)
}

func (b *simBackend) write(_ context.Context, name string) string {
	cm := watchtest.ConfigMap(name, "")
	got, err := b.s.Create(cm)
	if apierrors.IsAlreadyExists(err) {
		got, err = b.s.Update(cm)
	}
	if err != nil {
		panic(fmt.Sprintf("parity write %s: %v", name, err))
	}
	return got.(*corev1.ConfigMap).ResourceVersion
}

func (b *simBackend) remove(_ context.Context, name string) {
	if err := b.s.Delete("default", name); err != nil {
		panic(fmt.Sprintf("parity delete %s: %v", name, err))
	}
}

func (b *simBackend) elsewhere(context.Context)      { b.s.AdvanceRevision(1) }
func (b *simBackend) current(context.Context) string { return b.s.ResourceVersion() }
func (b *simBackend) restart()                       { b.s.Restart() }
func (b *simBackend) compact(context.Context)        { b.s.Compact() }
func (b *simBackend) String() string                 { return "sim" }
func (r *realBackend) String() string                { return "real" }
