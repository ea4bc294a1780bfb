package watchtest_test

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

// An etcd restored from a snapshot: without --bump-revision the
// resourceVersions go back, and a watch from a cursor taken after the
// snapshot hears nothing until the server passes it (the objects written
// in between are never announced); with a bump, the same cursor expires.
func ExampleServer_Restore() {
	srv := watchtest.NewServer(watchtest.ServerOptions{
		RestartNotReady: -1,                           // no not-ready phase
		Latency:         watchtest.Latency{Off: true}, // answers at once
	})
	create := func(name string) {
		if _, err := srv.Create(watchtest.ConfigMap(name, "")); err != nil {
			panic(err)
		}
	}
	create("a")
	snap := srv.Snapshot()
	create("b")
	create("c")
	cursor := srv.ResourceVersion()

	srv.Restore(snap, 0)
	fmt.Println("cursor:", cursor, "server after the restore:", srv.ResourceVersion())
	w, err := srv.Watch(metav1.ListOptions{ResourceVersion: cursor})
	if err != nil {
		panic(err)
	}
	create("d") // at the cursor: dropped
	create("e") // past it: delivered
	ev := <-w.ResultChan()
	m, _ := meta.Accessor(ev.Object)
	fmt.Println("first event:", ev.Type, m.GetName())
	w.Stop()

	srv.Restore(snap, 1000)
	w, err = srv.Watch(metav1.ListOptions{ResourceVersion: cursor})
	if err != nil {
		panic(err)
	}
	ev = <-w.ResultChan()
	fmt.Println("after a restore with bump:", ev.Type, apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)))
	// Output:
	// cursor: 4 server after the restore: 3
	// first event: ADDED e
	// after a restore with bump: ERROR true
}
