package monitoring_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// docQueries are the PromQL of the metrics package doc and of
// examples/README.md, whitespace collapsed.
func docQueries(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	// metrics/doc.go: the tab-indented lines of the "# Queries" and
	// "# Alert rules" sections; a line that starts with spaces continues
	// the query above it; in YAML, the expr values.
	src, err := os.ReadFile("../../metrics/doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var code []string
	section := ""
	for _, line := range strings.Split(string(src), "\n") {
		line = strings.TrimPrefix(strings.TrimPrefix(line, "//"), " ")
		if h, ok := strings.CutPrefix(line, "# "); ok {
			section = h
			continue
		}
		if section != "Queries" && section != "Alert rules" {
			continue
		}
		if c, ok := strings.CutPrefix(line, "\t"); ok {
			code = append(code, c)
			continue
		}
		if len(code) > 0 {
			out["metrics/doc.go"] = append(out["metrics/doc.go"], queriesIn(t, code)...)
			code = nil
		}
	}
	// examples/README.md: ```promql blocks (a query a line, continued by
	// indented lines) and the expr values of ```yaml rule groups.
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	fence := regexp.MustCompile("(?s)```(promql|yaml)\n(.*?)```")
	for _, m := range fence.FindAllStringSubmatch(string(readme), -1) {
		out["examples/README.md"] = append(out["examples/README.md"], queriesIn(t, strings.Split(strings.TrimRight(m[2], " \n"), "\n"))...)
	}
	return out
}

// queriesIn returns the queries of a code block: the exprs of a rule file,
// or one query a line with indented continuation lines.
func queriesIn(t *testing.T, lines []string) []string {
	t.Helper()
	lines = dedent(lines)
	text := strings.Join(lines, "\n")
	if strings.HasPrefix(strings.TrimSpace(text), "groups:") {
		rgs, errs := rulefmt.Parse([]byte(text), false, model.UTF8Validation, parser.NewParser(parser.Options{}), nil)
		if len(errs) > 0 {
			t.Fatalf("rule block %q: %v", text, errs)
		}
		var out []string
		for _, r := range (rules{rgs}).rules() {
			out = append(out, collapse(r.Expr))
		}
		return out
	}
	if strings.Contains(text, ":") && !strings.Contains(text, "(") {
		return nil // not PromQL: some other YAML
	}
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, " ") && len(out) > 0 {
			out[len(out)-1] += " " + l
		} else if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	for i := range out {
		out[i] = collapse(out[i])
	}
	return out
}

// dedent strips the indentation all non-blank lines share (a block
// inside a Markdown list item).
func dedent(lines []string) []string {
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " ")); indent < 0 || n < indent {
			indent = n
		}
	}
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		if len(l) >= indent && indent > 0 {
			l = l[indent:]
		}
		out = append(out, l)
	}
	return out
}

var spaces = regexp.MustCompile(`\s+`)

func collapse(s string) string { return strings.TrimSpace(spaces.ReplaceAllString(s, " ")) }

// TestDocQueriesAreTested: every query in the docs is either evaluated by
// a promtool case or is the expression of a rule that promtool cases fire
// and keep quiet (TestEveryAlertIsTestedFiringAndQuiet), and parses.
func TestDocQueriesAreTested(t *testing.T) {
	tested := map[string]bool{}
	for _, sc := range scenarios(t) {
		for _, e := range sc.exprs {
			if !e.before {
				tested[collapse(e.expr)] = true
			}
		}
	}
	for _, r := range readRules(t).rules() {
		tested[collapse(r.Expr)] = true
	}
	docs := docQueries(t)
	for _, where := range []string{"metrics/doc.go", "examples/README.md"} {
		if len(docs[where]) == 0 {
			t.Errorf("no queries found in %s", where)
		}
		for _, q := range docs[where] {
			if _, err := parser.NewParser(parser.Options{}).ParseExpr(q); err != nil {
				t.Errorf("%s: %q does not parse: %v", where, q, err)
			}
			if !tested[q] {
				t.Errorf("%s: query not in the promtool tests or rules.yaml:\n\t%s", where, q)
			}
		}
	}
}

// selectors returns every vector selector of a query.
func selectors(t *testing.T, where, q string) []*parser.VectorSelector {
	t.Helper()
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(q)
	if err != nil {
		t.Fatalf("%s: %q does not parse: %v", where, q, err)
	}
	var out []*parser.VectorSelector
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

// everyQuery is every query of the docs, of rules.yaml and of the
// dashboard, by where it is.
func everyQuery(t *testing.T) map[string][]string {
	t.Helper()
	out := docQueries(t)
	for _, r := range readRules(t).rules() {
		out[rulesFile] = append(out[rulesFile], r.Expr)
	}
	for _, p := range allPanels(readDashboard(t).Panels) {
		for _, tg := range p.Targets {
			out[dashboardFile] = append(out[dashboardFile], grafanaVariables.Replace(tg.Expr))
		}
	}
	return out
}

// TestLeSelectorsMatchPrometheus2And3: a bucket selected by le must be
// found whichever Prometheus stores it: Prometheus 2 stores le as exposed
// ("1"), Prometheus 3 as a float ("1.0"), so a selector that matches one
// must match the other.
func TestLeSelectorsMatchPrometheus2And3(t *testing.T) {
	n := 0
	for where, qs := range everyQuery(t) {
		for _, q := range qs {
			for _, vs := range selectors(t, where, q) {
				for _, m := range vs.LabelMatchers {
					if m.Name != "le" {
						continue
					}
					n++
					for _, pair := range [][2]string{{"1", "1.0"}, {"0.5", "0.5"}, {"5", "5.0"}, {"+Inf", "+Inf"}} {
						if m.Matches(pair[0]) != m.Matches(pair[1]) {
							t.Errorf("%s: %s matches le=%q (Prometheus 2) %v but le=%q (Prometheus 3) %v:\n\t%s",
								where, m, pair[0], m.Matches(pair[0]), pair[1], m.Matches(pair[1]), q)
						}
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no le selector found")
	}
}

// TestRejectionsToWatchForLeaveOutNotWitnessed: the metrics doc's
// "rejections to watch for" query must not count not_witnessed, which
// the same doc calls routine.
func TestRejectionsToWatchForLeaveOutNotWitnessed(t *testing.T) {
	n := 0
	for _, q := range docQueries(t)["metrics/doc.go"] {
		for _, vs := range selectors(t, "metrics/doc.go", q) {
			if !strings.HasSuffix(vs.Name, "_time_to_first_ready_rejected_total") {
				continue
			}
			n++
			matches := func(reason string) bool {
				for _, m := range vs.LabelMatchers {
					if m.Name == "reason" && !m.Matches(reason) {
						return false
					}
				}
				return true
			}
			if matches("not_witnessed") || !matches("reversed") {
				t.Errorf("metrics/doc.go: %s counts not_witnessed %v, reversed %v; want false, true:\n\t%s", vs, matches("not_witnessed"), matches("reversed"), q)
			}
		}
	}
	if n == 0 {
		t.Fatal("no rejections query in metrics/doc.go")
	}
}
