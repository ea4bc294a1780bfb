// The fake clientset and its informers stay out of make fuzz's
// instrumented build (see fakeclientset_test.go).

//go:build !fuzzing

package watch_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	wgwatch "github.com/watchgrade/watchgrade/watch"
)

// WatchErrorLogger replaces client-go's default watch error handler, which
// logs every failed list or watch as an error: an informer whose watch is
// denied for a minute, retried every 4 s, logs one error at HumanGrace, not
// fifteen. With controller-runtime, set it once for every informer of the
// manager's cache: cache.Options{DefaultWatchErrorHandler: handler}.
func ExampleWatchErrorLogger() {
	logger := funcr.New(func(prefix, args string) { fmt.Println(args) }, funcr.Options{})
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	handler := wgwatch.WatchErrorLogger(logger, wgwatch.LogOptions{Clock: clk})

	// An informer, wired as a client-go controller wires it.
	secrets := informers.NewSharedInformerFactory(fake.NewClientset(), 0).Core().V1().Secrets().Informer()
	if err := secrets.SetWatchErrorHandlerWithContext(handler); err != nil {
		panic(err)
	}

	// What its reflector hands the handler while RBAC denies the watch.
	r := cache.NewReflector(&cache.ListWatch{}, &corev1.Secret{}, cache.NewStore(cache.MetaNamespaceKeyFunc), 0)
	denied := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", errors.New("RBAC denies list"))
	for range 15 {
		handler(context.Background(), r, fmt.Errorf("failed to list *v1.Secret: %w", denied))
		clk.SetTime(clk.Now().Add(4 * time.Second))
	}
	// Output:
	// "msg"="watch refused: a human must act" "error"="failed to list *v1.Secret: secrets is forbidden: RBAC denies list" "type"="*v1.Secret" "reason"="Forbidden" "for"="16s"
}
