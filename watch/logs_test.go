package watch_test

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// TestWatchErrorLogger plays what reflectors hand their watch error
// handler and checks what is logged at the default verbosity, row by row
// of WatchErrorLogger's table.
func TestWatchErrorLogger(t *testing.T) {
	refused := fmt.Errorf("failed to list *v1.ConfigMap: %w", syscall.ECONNREFUSED)
	expired := apierrors.NewResourceExpired("too old resource version: 1 (5)")
	forbidden := fmt.Errorf("failed to list *v1.Secret: %w", apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", errors.New("RBAC")))
	type hand struct {
		at        time.Duration // since the start
		reflector int
		err       error
	}
	every := func(reflector int, err error, from, to, step time.Duration) []hand {
		var out []hand
		for at := from; at <= to; at += step {
			out = append(out, hand{at, reflector, err})
		}
		return out
	}
	// slowest hands err at each attempt of a reflector whose backoff waits
	// as long as its jitter allows (twice 800 ms, doubling, capped at
	// twice 30 s), reset every two minutes, as client-go's does, until to.
	slowest := func(err error, to time.Duration) []hand {
		var out []hand
		wait, reset := 800*time.Millisecond, time.Duration(0)
		for at := time.Duration(0); at <= to; {
			out = append(out, hand{at, 0, err})
			if at-reset > 2*time.Minute {
				wait, reset = 800*time.Millisecond, at
			}
			at += 2 * wait
			wait = min(2*wait, 30*time.Second)
		}
		return out
	}
	tests := []struct {
		name  string
		hands []hand
		want  []string // "level message type reason", in order
	}{
		{"an apiserver restart: seconds of refused connections, then an expiry", append(every(0, refused, 0, 8*time.Second, time.Second),
			hand{9 * time.Second, 0, expired}, hand{9 * time.Second, 0, io.EOF}), nil},
		{"a close and a nil error", []hand{{0, 0, io.EOF}, {time.Second, 0, nil}}, nil},
		{"refused for a minute: once at Info, when it has gone on for TransientGrace", every(0, refused, 0, time.Minute, 5*time.Second),
			[]string{"info watch failing, retrying *v1.ConfigMap ConnectionFailed"}},
		{"denied for a minute: once at Error, at HumanGrace", every(0, forbidden, 0, time.Minute, 4*time.Second),
			[]string{"error watch refused: a human must act *v1.ConfigMap Forbidden"}},
		{"denied, repaired, denied again after a quiet stretch: once per stretch", append(every(0, forbidden, 0, 20*time.Second, 4*time.Second),
			every(0, forbidden, 5*time.Minute, 5*time.Minute+20*time.Second, 4*time.Second)...),
			[]string{"error watch refused: a human must act *v1.ConfigMap Forbidden", "error watch refused: a human must act *v1.ConfigMap Forbidden"}},
		{"denied, repaired (a watch opened and closed), denied again a minute later: once per stretch", append(append(every(0, forbidden, 0, 20*time.Second, 4*time.Second),
			hand{50 * time.Second, 0, io.EOF}), every(0, forbidden, 80*time.Second, 100*time.Second, 4*time.Second)...),
			[]string{"error watch refused: a human must act *v1.ConfigMap Forbidden", "error watch refused: a human must act *v1.ConfigMap Forbidden"}},
		{"denied for less than HumanGrace: nothing", every(0, forbidden, 0, 12*time.Second, 4*time.Second), nil},
		{"denied for 9 s, healthy for 113 s (no close handed over), denied for an instant: nothing", append(every(0, forbidden, 0, 9*time.Second, 3*time.Second),
			hand{122 * time.Second, 0, forbidden}), nil},
		{"denied for 9 s, healthy for 113 s, denied for 20 s: once, for the second denial", append(every(0, forbidden, 0, 9*time.Second, 3*time.Second),
			every(0, forbidden, 122*time.Second, 142*time.Second, 4*time.Second)...),
			[]string{"error watch refused: a human must act *v1.ConfigMap Forbidden"}},
		{"denied for 20 s, healthy for 113 s, denied for 20 s: once per denial", append(every(0, forbidden, 0, 20*time.Second, 4*time.Second),
			every(0, forbidden, 133*time.Second, 153*time.Second, 4*time.Second)...),
			[]string{"error watch refused: a human must act *v1.ConfigMap Forbidden", "error watch refused: a human must act *v1.ConfigMap Forbidden"}},
		{"denied for ten minutes, each wait of the reflector's backoff jittered to its longest: once", slowest(forbidden, 10*time.Minute),
			[]string{"error watch refused: a human must act *v1.ConfigMap Forbidden"}},
		{"a watch closed, then denied for ten minutes at the slowest backoff: once", append([]hand{{0, 0, io.EOF}}, slowest(forbidden, 10*time.Minute)[1:]...),
			[]string{"error watch refused: a human must act *v1.ConfigMap Forbidden"}},
		{"refused, then denied: the denial's own grace counts from its first error", append(every(0, refused, 0, 20*time.Second, 4*time.Second),
			every(0, forbidden, 24*time.Second, 36*time.Second, 4*time.Second)...),
			[]string{"info watch failing, retrying *v1.ConfigMap Forbidden"}},
		{"two reflectors, each its own stretch", append(every(0, forbidden, 0, 20*time.Second, 4*time.Second), every(1, forbidden, 0, 20*time.Second, 4*time.Second)...),
			[]string{"error watch refused: a human must act *v1.ConfigMap Forbidden", "error watch refused: a human must act *v1.Secret Forbidden"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			log := funcr.NewJSON(func(obj string) {
				got = append(got, obj)
			}, funcr.Options{})
			start := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
			clk := clocktesting.NewFakePassiveClock(start)
			handle := wgwatch.WatchErrorLogger(log, wgwatch.LogOptions{Clock: clk})
			reflectors := []*cache.Reflector{
				cache.NewReflector(&cache.ListWatch{}, &corev1.ConfigMap{}, cache.NewStore(cache.MetaNamespaceKeyFunc), 0),
				cache.NewReflector(&cache.ListWatch{}, &corev1.Secret{}, cache.NewStore(cache.MetaNamespaceKeyFunc), 0),
			}
			hands := slices.Clone(tt.hands)
			slices.SortStableFunc(hands, func(a, b hand) int { return int(a.at - b.at) })
			for _, h := range hands {
				clk.SetTime(start.Add(h.at))
				handle(t.Context(), reflectors[h.reflector], h.err)
			}
			var lines []string
			for _, obj := range got {
				lines = append(lines, summarise(obj))
			}
			if diff := cmp.Diff(tt.want, lines); diff != "" {
				t.Errorf("logged (-want +got):\n%s\nfull lines: %v", diff, got)
			}
		})
	}
}

// summarise reduces a funcr JSON line to "level message type reason".
func summarise(obj string) string {
	field := func(key string) string {
		i := strings.Index(obj, `"`+key+`":`)
		if i < 0 {
			return ""
		}
		rest := obj[i+len(key)+3:]
		if strings.HasPrefix(rest, `"`) {
			rest = rest[1:]
			return rest[:strings.Index(rest, `"`)]
		}
		return rest[:strings.IndexAny(rest, ",}")]
	}
	level := "info"
	if strings.Contains(obj, `"error":`) {
		level = "error"
	}
	return strings.Join([]string{level, field("msg"), field("type"), field("reason")}, " ")
}
