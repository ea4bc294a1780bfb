package monitoring_test

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

// scrape is one /metrics text as Prometheus 3 ingests it: every series
// with the labels Prometheus stores (le normalised to a float, "1" as
// "1.0"), in the order of the text.
type scrape struct {
	file   string
	series []scraped
}

type scraped struct {
	labels labels.Labels
	value  float64
}

// readScrape parses a file captured by the examples e2e (the text format
// promhttp serves by default) with Prometheus's own parser, the one its
// scrape loop uses for that content type.
func readScrape(t *testing.T, path string) scrape {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := textparse.New(b, "text/plain; version=0.0.4; charset=utf-8", nil, textparse.ParserOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := scrape{file: path}
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if e != textparse.EntrySeries {
			continue
		}
		_, _, v := p.Series()
		var l labels.Labels
		p.Labels(&l)
		s.series = append(s.series, scraped{labels: l, value: v})
	}
	if len(s.series) == 0 {
		t.Fatalf("%s: no series", path)
	}
	return s
}

// notation writes labels the way promtool's input_series and exp_samples
// take them: name{a="x", b="y"}, labels sorted.
func notation(l labels.Labels) string {
	var b strings.Builder
	b.WriteString(l.Get(labels.MetricName))
	b.WriteString("{")
	first := true
	l.Range(func(lb labels.Label) {
		if lb.Name == labels.MetricName {
			return
		}
		if !first {
			b.WriteString(", ")
		}
		first = false
		fmt.Fprintf(&b, "%s=%s", lb.Name, strconv.Quote(lb.Value))
	})
	b.WriteString("}")
	return b.String()
}

// values returns the distinct values of label name among the series of
// metric, sorted.
func (s scrape) values(metric, name string) []string {
	seen := map[string]bool{}
	for _, x := range s.series {
		if x.labels.Get(labels.MetricName) == metric && x.labels.Has(name) {
			seen[x.labels.Get(name)] = true
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// number formats a float for promtool's series notation and exp_samples.
func number(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// TestPrometheus3StoresLeAsFloat shows, with Prometheus's own exposition
// parser, why a selector le="1" matches nothing on Prometheus 3: the
// library exposes le="1", and Prometheus stores le="1.0".
func TestPrometheus3StoresLeAsFloat(t *testing.T) {
	const path = "testdata/e2e/clientgo/metrics-routine.txt"
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const exposed = `watchgrade_watch_session_duration_seconds_bucket{outcome="closed",resource="configmaps",le="1"} `
	if !strings.Contains(string(text), exposed) {
		t.Fatalf("%s does not expose %s", path, exposed)
	}
	var les []string
	for _, x := range readScrape(t, path).series {
		l := x.labels
		if l.Get(labels.MetricName) == "watchgrade_watch_session_duration_seconds_bucket" && l.Get("outcome") == "closed" && l.Get("resource") == "configmaps" {
			les = append(les, l.Get("le"))
		}
	}
	want := []string{"0.1", "0.5", "1.0", "5.0", "30.0", "60.0", "300.0", "600.0", "1800.0", "3600.0", "7200.0", "14400.0", "+Inf"}
	if fmt.Sprint(les) != fmt.Sprint(want) {
		t.Errorf("le values as Prometheus stores them = %v, want %v", les, want)
	}
}
