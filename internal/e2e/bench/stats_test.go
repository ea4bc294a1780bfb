package bench

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A figure is one measured quantity of one benchmark (a name such as
// "decode/json/stream" and a key such as "cpu_ns/event"), with one value per
// round. Rounds are the -count repetitions: each round runs every
// sub-benchmark of a group once, one after another, so values of the same
// round were taken within seconds of each other. TestMain prints every
// figure as a "bench:" line: the median of the rounds and [min..max].
var figures = struct {
	sync.Mutex
	names []string
	keys  map[string][]string
	vals  map[string]map[string][]float64
	// ratios are printed after the figures.
	ratios []ratio
}{keys: map[string][]string{}, vals: map[string]map[string][]float64{}}

// ratio is a figure computed round by round: num's value over den's in
// the same round.
type ratio struct {
	name, label, key, num, den string
}

// record adds one round's values to the figures of name; kv alternates
// keys and float64 values.
func record(name string, kv ...any) {
	figures.Lock()
	defer figures.Unlock()
	if _, ok := figures.vals[name]; !ok {
		figures.names = append(figures.names, name)
		figures.vals[name] = map[string][]float64{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		k := kv[i].(string)
		if _, ok := figures.vals[name][k]; !ok {
			figures.keys[name] = append(figures.keys[name], k)
		}
		figures.vals[name][k] = append(figures.vals[name][k], toFloat(kv[i+1]))
	}
}

func toFloat(v any) float64 {
	switch v := v.(type) {
	case float64:
		return v
	case int:
		return float64(v)
	case int64:
		return float64(v)
	case uint64:
		return float64(v)
	case time.Duration:
		return v.Seconds()
	case bool:
		if v {
			return 1
		}
		return 0
	}
	panic(fmt.Sprintf("record: %T", v))
}

// defineRatio prints, under name, label = num's key over den's key, round
// by round (num and den are figure names).
func defineRatio(name, label, key, num, den string) {
	figures.Lock()
	defer figures.Unlock()
	r := ratio{name, label, key, num, den}
	if !slices.Contains(figures.ratios, r) {
		figures.ratios = append(figures.ratios, r)
	}
}

// printFigures writes every figure, then every ratio, one "bench:" line
// per name.
func printFigures(w io.Writer) {
	figures.Lock()
	defer figures.Unlock()
	for _, name := range figures.names {
		var b strings.Builder
		fmt.Fprintf(&b, "bench: %s", name)
		rounds := 0
		for _, k := range figures.keys[name] {
			rounds = max(rounds, len(figures.vals[name][k]))
		}
		fmt.Fprintf(&b, " rounds=%d", rounds)
		for _, k := range figures.keys[name] {
			fmt.Fprintf(&b, " %s=%s", k, spread(figures.vals[name][k], format))
		}
		fmt.Fprintln(w, b.String())
	}
	byName := map[string][]string{}
	var order []string
	for _, r := range figures.ratios {
		num, den := figures.vals[r.num][r.key], figures.vals[r.den][r.key]
		var per []float64
		for i := range min(len(num), len(den)) {
			if den[i] != 0 {
				per = append(per, num[i]/den[i])
			}
		}
		if len(per) == 0 {
			continue
		}
		if _, ok := byName[r.name]; !ok {
			order = append(order, r.name)
		}
		byName[r.name] = append(byName[r.name], fmt.Sprintf("%s=%s", r.label, spread(per, formatRatio)))
	}
	for _, name := range order {
		fmt.Fprintf(w, "bench: %s %s\n", name, strings.Join(byName[name], " "))
	}
}

// spread formats the median of vs and, with more than one, [min..max].
func spread(vs []float64, f func(float64) string) string {
	s := slices.Clone(vs)
	slices.Sort(s)
	var med float64
	if n := len(s); n%2 == 1 {
		med = s[n/2]
	} else {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	if len(s) == 1 {
		return f(med)
	}
	return fmt.Sprintf("%s[%s..%s]", f(med), f(s[0]), f(s[len(s)-1]))
}

// format keeps three significant digits, or the integer part.
func format(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 100 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func formatRatio(v float64) string { return fmt.Sprintf("%.3f", v) }

// meter measures this process between start and stop: CPU time (user and
// system, from getrusage: every goroutine of the process, the clients'
// decoding, TLS and HTTP/2 included, and the garbage collector), wall
// time, and heap allocations. The servers run in another process, so all
// of it is the clients'.
type meter struct {
	cpu     time.Duration
	wall    time.Time
	mallocs uint64
	bytes   uint64
}

// usage is what a meter measured.
type usage struct {
	CPU, Wall     time.Duration
	Allocs, Bytes uint64
}

func startMeter(b *testing.B) meter {
	b.Helper()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return meter{cpu: cpuTime(b), wall: time.Now(), mallocs: ms.Mallocs, bytes: ms.TotalAlloc}
}

func (m meter) stop(b *testing.B) usage {
	b.Helper()
	wall := time.Since(m.wall)
	cpu := cpuTime(b)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{CPU: cpu - m.cpu, Wall: wall, Allocs: ms.Mallocs - m.mallocs, Bytes: ms.TotalAlloc - m.bytes}
}

func (u *usage) add(o usage) {
	u.CPU += o.CPU
	u.Wall += o.Wall
	u.Allocs += o.Allocs
	u.Bytes += o.Bytes
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapNow returns the live heap and the goroutine stacks in use after two
// forced collections (the second frees what the first's finalizers
// released), and the number of goroutines.
func heapNow() (heap, stack uint64, goroutines int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse, runtime.NumGoroutine()
}

// timeGroup records, when the returned function is called, the wall time
// of a group of benchmarks since timeGroup was: its setup and all its
// rounds.
func timeGroup(group string) func() {
	start := time.Now()
	return func() { record(group+"/group", "wall_s", time.Since(start)) }
}
