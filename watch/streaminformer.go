package watch

import (
	"context"
	"errors"
	"io"
	"sync"

	"k8s.io/client-go/tools/cache"
)

// Informer returns built, the informer whose instrumented ListerWatcher
// reports to i ([Instrument] with i among its Observers), wrapped so that
// i learns what only the informer knows:
//
//   - its HasSynced, which [Streams.Check] waits for;
//   - that it was told to stop (its Run's stop channel closed, or its
//     context done: the cache's RemoveInformer, or the manager stopping),
//     [StreamInformer.Stopping], so that the probe no longer waits for it
//     while its Run sleeps out a reflector's backoff; and that its Run
//     returned, [StreamInformer.Stopped], so that a stopped informer's
//     last state does not hold the owners once another serves the kind;
//   - a watch that opened between two of the reflector's errors: the
//     watch error handler set on it (SetWatchErrorHandlerWithContext, as
//     controller-runtime's cache sets cache.Options.DefaultWatchErrorHandler)
//     is handed a close (io.EOF) before the second, the server having
//     answered, so that a denial repaired and made again soon after is two
//     stretches of trouble, not one that began with the first (a
//     reflector hands its handler only errors). A watch refused at its
//     opening every time (RBAC that allows list and not watch) opens
//     none, and stays one stretch.
//
// wgctrl's informer hook returns what Informer returns for every informer
// of controller-runtime's cache; a client-go process with several
// informers of a kind wraps each one it builds:
//
//	member, _ := streams.Add(name, "", nil)
//	ilw, _ := watch.Instrument(lw, watch.InstrumentOptions{Resource: gr, Name: name, Observer: member})
//	inf := member.Informer(cache.NewSharedIndexInformer(ilw, &corev1.ConfigMap{}, 0, cache.Indexers{}))
//	go inf.RunWithContext(ctx)
func (i *StreamInformer) Informer(built cache.SharedIndexInformer) cache.SharedIndexInformer {
	i.SetSynced(built.HasSynced)
	return &streamInformer{SharedIndexInformer: built, member: i}
}

// streamInformer is an informer that tells its StreamInformer when it is
// told to stop and when it has stopped, and of watches opened between
// errors.
type streamInformer struct {
	cache.SharedIndexInformer
	member *StreamInformer
}

func (s *streamInformer) SetWatchErrorHandler(h cache.WatchErrorHandler) error {
	return s.SetWatchErrorHandlerWithContext(func(_ context.Context, r *cache.Reflector, err error) { h(r, err) })
}

func (s *streamInformer) SetWatchErrorHandlerWithContext(h cache.WatchErrorHandlerWithContext) error {
	return s.SharedIndexInformer.SetWatchErrorHandlerWithContext(answeredHandler(h, s.member.Opened))
}

// answeredHandler is h, handed a close (io.EOF) before an error when
// opened (the watches that opened so far) has grown since the error
// before it.
func answeredHandler(h cache.WatchErrorHandlerWithContext, opened func() int) cache.WatchErrorHandlerWithContext {
	var mu sync.Mutex
	seen := -1
	return func(ctx context.Context, r *cache.Reflector, err error) {
		n := opened()
		mu.Lock()
		answered := seen >= 0 && n != seen
		seen = n
		mu.Unlock()
		if answered && err != nil && !errors.Is(err, io.EOF) {
			h(ctx, r, io.EOF)
		}
		h(ctx, r, err)
	}
}

func (s *streamInformer) Run(stop <-chan struct{}) {
	defer s.member.Stopped()
	defer s.whenStopping(stop)()
	s.SharedIndexInformer.Run(stop)
}

func (s *streamInformer) RunWithContext(ctx context.Context) {
	defer s.member.Stopped()
	defer s.whenStopping(ctx.Done())()
	s.SharedIndexInformer.RunWithContext(ctx)
}

// whenStopping tells the member Stopping once stop is closed, if it is
// before the function it returns is called (when Run returns).
func (s *streamInformer) whenStopping(stop <-chan struct{}) func() {
	returned := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-stop:
			s.member.Stopping()
		case <-returned:
		}
	}()
	return func() {
		close(returned)
		<-done
	}
}
