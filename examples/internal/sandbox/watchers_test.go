package sandbox

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestQuietWaitsOutEachChange: Quiet returns d after the last change, not
// d after it was called, and at once when its context ends.
func TestQuietWaitsOutEachChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c changes
		start := time.Now()
		go func() {
			for range 3 {
				time.Sleep(time.Second)
				c.notify()
			}
		}()
		c.Quiet(t.Context(), 2*time.Second)
		if got, want := time.Since(start), 5*time.Second; got != want {
			t.Errorf("Quiet returned after %v, want %v (2 s after the third change)", got, want)
		}

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start = time.Now()
		c.Quiet(ctx, time.Hour)
		if got := time.Since(start); got != time.Second {
			t.Errorf("Quiet returned after %v with a context ending after 1 s", got)
		}
	})
}
