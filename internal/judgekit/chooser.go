package judgekit

import (
	"math"
	"math/rand/v2"
	"time"
)

// Chooser makes a generator's decisions: from Data, a fuzz input, two
// bytes a decision, then from Rng once the input runs out (or at once
// without one).
type Chooser struct {
	Data []byte
	Rng  *rand.Rand
}

// Intn returns a number in [0, n); 0 for n <= 1, without a decision.
func (c *Chooser) Intn(n int) int {
	if n <= 1 {
		return 0
	}
	if len(c.Data) >= 2 {
		v := int(c.Data[0])<<8 | int(c.Data[1])
		c.Data = c.Data[2:]
		return v % n
	}
	return c.Rng.IntN(n)
}

// LogDuration picks a duration between lo and hi, uniform in its log (in
// 1,000 steps); lo when hi is not above it.
func (c *Chooser) LogDuration(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	steps := 1000
	f := float64(c.Intn(steps+1)) / float64(steps)
	return time.Duration(float64(lo) * math.Pow(float64(hi)/float64(lo), f))
}
