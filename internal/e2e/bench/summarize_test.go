package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// summarizeFile reads Go benchmark output (the watch package's
// micro-benchmarks, run with -count) and records every benchmark's
// metrics, one value per run, under "micro/<name>", so they print as
// bench: lines like the e2e figures. It returns the exit code.
func summarizeFile(path string, w io.Writer) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	defer f.Close()
	if err := summarizeBench(f); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s: %v\n", path, err)
		return 1
	}
	printFigures(w)
	return 0
}

// benchLine matches "BenchmarkX/y-2   	  1000	  105.0 ns/op	 0 B/op ...".
var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+\d+\s+(.*)$`)

func summarizeBench(r io.Reader) error {
	lines := bufio.NewScanner(r)
	for lines.Scan() {
		m := benchLine.FindStringSubmatch(lines.Text())
		if m == nil {
			continue
		}
		fields := strings.Fields(m[3])
		var kv []any
		for i := 0; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return fmt.Errorf("%q: %v", lines.Text(), err)
			}
			kv = append(kv, fields[i+1], v)
		}
		record("micro/"+m[1], kv...)
	}
	return lines.Err()
}

func TestSummarize(t *testing.T) {
	// The figures are empty when no benchmark runs: go test -run Summarize.
	if len(figures.names) > 0 {
		t.Skip("benchmarks recorded figures already")
	}
	in := `goos: linux
BenchmarkEvents/stream-2         	 9865412	       105.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkEvents/stream-2         	 9865412	       110.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkEvents/stream-2         	 9865412	       101.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkIdleStreams-2   	       3	 1.2 goroutines/stream	      1229 B/stream
PASS
`
	if err := summarizeBench(strings.NewReader(in)); err != nil {
		t.Fatalf("summarizeBench() = %v", err)
	}
	var out strings.Builder
	printFigures(&out)
	want := "bench: micro/Events/stream rounds=3 ns/op=105[101..110] B/op=0[0..0] allocs/op=0[0..0]\n" +
		"bench: micro/IdleStreams rounds=1 goroutines/stream=1.20 B/stream=1229\n"
	if got := out.String(); got != want {
		t.Errorf("printFigures() =\n%s\nwant\n%s", got, want)
	}
}
