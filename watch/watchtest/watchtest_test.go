package watchtest_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

var _ cache.ListerWatcherWithContext = (*watchtest.ListerWatcher)(nil)

func drain(w watch.Interface) []watch.EventType {
	var got []watch.EventType
	for ev := range w.ResultChan() {
		got = append(got, ev.Type)
	}
	return got
}

func TestSessionsPlayInOrderAndCallsAreRecorded(t *testing.T) {
	lw := watchtest.New(
		watchtest.Session{Events: []watch.Event{watchtest.Added(watchtest.ConfigMap("a", "1")), watchtest.Bookmark("2")}},
		watchtest.Session{OpenErr: watchtest.Forbidden()},
	)
	w, err := lw.Watch(metav1.ListOptions{ResourceVersion: "1", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatalf("Watch() #1 = %v", err)
	}
	if diff := cmp.Diff([]watch.EventType{watch.Added, watch.Bookmark}, drain(w)); diff != "" {
		t.Errorf("session #1 events mismatch (-want +got):\n%s", diff)
	}
	if _, err := lw.Watch(metav1.ListOptions{ResourceVersion: "2"}); !apierrors.IsForbidden(err) {
		t.Errorf("Watch() #2 = %v, want the scripted Forbidden", err)
	}
	want := []watchtest.Call{
		{Kind: watchtest.CallWatch, Options: metav1.ListOptions{ResourceVersion: "1", AllowWatchBookmarks: true}},
		{Kind: watchtest.CallWatch, Options: metav1.ListOptions{ResourceVersion: "2"}},
	}
	if diff := cmp.Diff(want, lw.Calls()); diff != "" {
		t.Errorf("Calls() mismatch (-want +got):\n%s", diff)
	}
	if n := lw.Remaining(); n != 0 {
		t.Errorf("Remaining() = %d, want 0", n)
	}
}

func TestHangingSessionClosesOnStop(t *testing.T) {
	lw := watchtest.New() // no scripts: every watch hangs
	w, err := lw.Watch(metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := lw.Open(); n != 1 {
		t.Errorf("Open() = %d, want 1", n)
	}
	w.Stop()
	w.Stop() // twice is safe
	if _, ok := <-w.ResultChan(); ok {
		t.Errorf("ResultChan() delivered after Stop, want it closed")
	}
	if n := lw.Open(); n != 0 {
		t.Errorf("Open() after Stop = %d, want 0", n)
	}
}

func TestRefuseWatchList(t *testing.T) {
	lw := watchtest.New(watchtest.Session{})
	lw.RefuseWatchList = true
	_, err := lw.Watch(metav1.ListOptions{SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if !apierrors.IsInvalid(err) {
		t.Errorf("watch-list Watch() = %v, want 422 Invalid", err)
	}
	if n := lw.Remaining(); n != 1 {
		t.Errorf("Remaining() = %d, want the script left for the next plain Watch", n)
	}
}

func TestListScripts(t *testing.T) {
	lw := watchtest.New()
	lw.AddLists(watchtest.List{Objects: []runtime.Object{watchtest.ConfigMap("a", "3")}, ResourceVersion: "4"}, watchtest.List{Err: watchtest.Expired()})
	obj, err := lw.List(metav1.ListOptions{Limit: 500})
	if err != nil {
		t.Fatalf("List() #1 = %v", err)
	}
	items, err := meta.ExtractList(obj)
	if err != nil || len(items) != 1 {
		t.Errorf("List() #1 items = %v, %v; want one", items, err)
	}
	if m, _ := meta.ListAccessor(obj); m.GetResourceVersion() != "4" {
		t.Errorf("List() #1 resourceVersion = %q, want 4", m.GetResourceVersion())
	}
	if _, err := lw.List(metav1.ListOptions{}); !apierrors.IsResourceExpired(err) {
		t.Errorf("List() #2 = %v, want 410 Expired", err)
	}
	if obj, err := lw.List(metav1.ListOptions{}); err != nil || obj == nil {
		t.Errorf("List() past the scripts = %v, %v; want an empty list", obj, err)
	}
}

func TestErrorHelpersHaveTheServersShape(t *testing.T) {
	tests := []struct {
		name string
		err  error
		is   func(error) bool
	}{
		{"Expired", watchtest.Expired(), apierrors.IsResourceExpired},
		{"Gone", watchtest.Gone(), apierrors.IsGone},
		{"Forbidden", watchtest.Forbidden(), apierrors.IsForbidden},
		{"NotFound", watchtest.NotFound(), apierrors.IsNotFound},
		{"TooManyRequests", watchtest.TooManyRequests(3), apierrors.IsTooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.is(tt.err) {
				t.Errorf("%s() = %v, not recognised by apierrors", tt.name, tt.err)
			}
			ev := watchtest.ErrorEvent(tt.err)
			if ev.Type != watch.Error || !tt.is(apierrors.FromObject(ev.Object)) {
				t.Errorf("ErrorEvent(%s()) = %+v, want an ERROR event carrying the same Status", tt.name, ev)
			}
		})
	}
	if s, ok := apierrors.SuggestsClientDelay(watchtest.TooManyRequests(3)); !ok || s != 3 {
		t.Errorf("TooManyRequests(3) suggests %d, %v; want 3 s", s, ok)
	}
	if ev := watchtest.ErrorEvent(errors.New("plain")); !apierrors.IsInternalError(apierrors.FromObject(ev.Object)) {
		t.Errorf("ErrorEvent(plain error) = %+v, want a 500", ev)
	}
	m, _ := meta.Accessor(watchtest.InitialEventsEnd("9").Object)
	if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" || m.GetResourceVersion() != "9" {
		t.Errorf("InitialEventsEnd(9) object = %+v, want the annotation and resourceVersion 9", m)
	}
}

// Script a 410 the way a real server sends it: an ERROR event after a
// successful open, then a close.
func ExampleListerWatcher() {
	lw := watchtest.New(
		watchtest.Session{Events: []watch.Event{
			watchtest.Added(watchtest.ConfigMap("a", "5")),
			watchtest.ErrorEvent(watchtest.Expired()),
		}},
	)
	w, _ := lw.Watch(metav1.ListOptions{ResourceVersion: "4"})
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			fmt.Println(ev.Type, apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)))
			continue
		}
		fmt.Println(ev.Type)
	}
	fmt.Println(lw.Calls()[0].Kind, lw.Calls()[0].Options.ResourceVersion)
	// Output:
	// ADDED
	// ERROR true
	// Watch 4
}

// ForbiddenFor words a denial as the real API server does, in a
// namespace and at the cluster scope.
func TestForbiddenForNamesTheResourceAndTheScope(t *testing.T) {
	for _, tc := range []struct {
		namespace, want string
	}{
		{"team-a", `secrets is forbidden: User "system:serviceaccount:default:controller" cannot watch resource "secrets" in API group "" in the namespace "team-a"`},
		{"", `widgets.example.com is forbidden: User "system:serviceaccount:default:controller" cannot watch resource "widgets" in API group "example.com" at the cluster scope`},
	} {
		gr := schema.GroupResource{Resource: "secrets"}
		if tc.namespace == "" {
			gr = schema.GroupResource{Group: "example.com", Resource: "widgets"}
		}
		err := watchtest.ForbiddenFor(gr, tc.namespace)
		if !apierrors.IsForbidden(err) || err.Error() != tc.want {
			t.Errorf("ForbiddenFor(%v, %q) = %v, want a 403 %q", gr, tc.namespace, err, tc.want)
		}
	}
}
