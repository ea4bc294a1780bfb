package backoff

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNextDoublesUpToMax(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 10 * time.Second, Rand: func() float64 { return 1 }}
	var got []time.Duration
	for range 6 {
		got = append(got, b.Next(0, false))
	}
	want := []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Next() sequence mismatch (-want +got):\n%s", diff)
	}
	b.Reset()
	if got := b.Next(0, false); got != time.Second {
		t.Errorf("Next() after Reset = %v, want %v", got, time.Second)
	}
}

func TestNextIsFullJitter(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: time.Minute}
	for i := range 1000 {
		limit := min(time.Minute, time.Second<<min(i, 20))
		if got := b.Next(0, false); got < 0 || got > limit {
			t.Fatalf("Next() #%d = %v, want within [0, %v]", i, got, limit)
		}
	}
	b = Backoff{Initial: time.Second, Max: time.Minute, Rand: func() float64 { return 0 }}
	if got := b.Next(0, false); got != 0 {
		t.Errorf("Next() with a zero draw = %v, want 0 (full jitter)", got)
	}
}

func TestNextFloorAndSlow(t *testing.T) {
	tests := []struct {
		name  string
		draw  float64
		floor time.Duration
		slow  bool
		want  time.Duration
	}{
		{"Retry-After is a floor", 0, 7 * time.Second, false, 7 * time.Second},
		{"a larger wait beats the floor", 1, 100 * time.Millisecond, false, time.Second},
		{"an absurd Retry-After is bounded", 0, 1000 * time.Hour, false, MaxRetryAfter},
		{"slow draws from the upper half of Max", 0, 0, true, 30 * time.Second},
		{"slow at most Max", 1, 0, true, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Backoff{Initial: time.Second, Max: time.Minute, Rand: func() float64 { return tt.draw }}
			if got := b.Next(tt.floor, tt.slow); got != tt.want {
				t.Errorf("Next(%v, %v) = %v, want %v", tt.floor, tt.slow, got, tt.want)
			}
		})
	}
}

// A crowd told the same Retry-After (a re-initialising apiserver tells
// every watch "1") comes back spread over the step above it, not in the
// instant it names.
func TestNextSpreadsAboveTheFloor(t *testing.T) {
	const clients = 300
	rng := rand.New(rand.NewPCG(1, 2))
	late := 0
	for range clients {
		b := Backoff{Initial: time.Second, Max: time.Minute, Rand: rng.Float64}
		got := b.Next(time.Second, false)
		if got < time.Second || got >= 2*time.Second {
			t.Fatalf("Next(1s) = %v, want in [1s, 2s)", got)
		}
		if got >= 1500*time.Millisecond {
			late++
		}
	}
	if late < clients/4 || late > 3*clients/4 {
		t.Errorf("%d of %d waits in [1.5s, 2s), want about half: not spread", late, clients)
	}
}

func TestNextDoesNotOverflow(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: time.Minute, Rand: func() float64 { return 1 }}
	for i := range 200 {
		if got := b.Next(0, false); got <= 0 || got > time.Minute {
			t.Fatalf("Next() #%d = %v, want within (0, 1m]", i, got)
		}
	}
}
