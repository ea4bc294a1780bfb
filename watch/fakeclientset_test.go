// The fake clientset and its informers are about 460 packages that the
// fuzz targets do not use: make fuzz builds with -tags fuzzing, which
// leaves this file out of the instrumented build of every dependency that
// fuzzing makes.

//go:build !fuzzing

package watch_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// client-go's fake clientset stores objects without resourceVersions, so
// the events of objects created after the start carry none. A stream used
// to end every session at that event, resume from the same cursor, and end
// up Blocked past the progress deadline; the fake clientset is how most
// users write unit tests.
func TestFakeClientsetDeliversObjectsCreatedAfterTheStart(t *testing.T) {
	for _, wrapped := range []bool{true, false} {
		t.Run(fmt.Sprintf("ToListWatcherWithWatchListSemantics=%v", wrapped), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "before"}})
				plain := &cache.ListWatch{
					ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
						return client.CoreV1().ConfigMaps("default").List(ctx, o)
					},
					WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (apiwatch.Interface, error) {
						return client.CoreV1().ConfigMaps("default").Watch(ctx, o)
					},
				}
				var lw cache.ListerWatcher = plain
				if wrapped {
					lw = cache.ToListWatcherWithWatchListSemantics(plain, client)
				}
				p := newProbe()
				stop := runStream(t, newStream(t, lw, p, wgwatch.StreamOptions{}))
				time.Sleep(time.Second)
				for i := range 3 {
					cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("after", i)}}
					if _, err := client.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
						t.Fatal(err)
					}
					time.Sleep(time.Second)
				}
				time.Sleep(10 * time.Minute)
				stop()
				if diff := cmp.Diff([]string{"after0", "after1", "after2", "before"}, sortedNames(p.viewOf())); diff != "" {
					t.Errorf("handler's view (-want +got):\n%s", diff)
				}
				if n := p.published(wgwatch.PhaseBlocked); n != 0 {
					t.Errorf("Blocked published %d times:%s", n, p.stateLog())
				}
				if st := p.stateAt(time.Hour); st.Phase != wgwatch.PhaseStreaming {
					t.Errorf("final state %s/%s, want Streaming:%s", st.Phase, st.Reason, p.stateLog())
				}
			})
		})
	}
}
