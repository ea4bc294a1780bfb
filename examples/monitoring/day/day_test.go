// Package day replays a day of operations through the watchgrade rules as
// they are deployed: the WatchTarget controller's series as it serves
// them, scraped by Prometheus's own scrape code with the target labels a
// ServiceMonitor adds, stored in Prometheus's TSDB and evaluated by its
// rule engine, minute by minute, in virtual time (testing/synctest).
// It lives in the promtool module because Prometheus's scrape and config
// packages bring its service discovery SDKs with them.
package day

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/prometheus/util/osutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

var update = flag.Bool("update", false, "rewrite the scene table in ../README.md and the generated promtool tests (../prometheus/day_test.yaml)")

// clock formats a time of the day as hh:mm:ss.
func clock(t time.Time) string { return t.UTC().Format("15:04:05") }

// hm is a time of the day.
func hm(h, m int) time.Duration { return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute }

// A scene is a stretch of the day with something happening in it, the
// alerts it must raise, and, implicitly, every other alert of rules.yaml,
// which must stay silent through it.
type scene struct {
	name     string
	from, to time.Duration
	what     string
	fires    []firing
	silentOK string // why the others stay silent, for the table
}

// A firing is an alert the scene must raise.
type firing struct {
	alert  string
	labels map[string]string // a subset of the alert's labels
	// first firing between these times of the day
	after, before time.Duration
	// stays firing until then at least (0: no claim)
	until time.Duration
	// resolved by then (0: no claim)
	resolvedBy time.Duration
	why        string
}

func (f firing) matches(s span) bool {
	if s.alert != f.alert {
		return false
	}
	for k, v := range f.labels {
		if s.labels.Get(k) != v {
			return false
		}
	}
	return true
}

var (
	shopApp    = map[string]string{"namespace": "shop", "name": "app"}
	prodApp    = map[string]string{"namespace": "prod", "name": "app"}
	ledger     = map[string]string{"namespace": "billing", "name": "ledger"}
	secretsRes = map[string]string{"resource": "secrets"}
)

// scenes is the day. Times are of the day; the controller's pods are
// 10.0.3.17 (ctl-a), 10.0.3.18 (ctl-b), 10.0.3.19 (ctl-c).
func scenes() []scene {
	return []scene{
		{name: "routine closes", from: 0, to: hm(3, 0),
			what:     "shop/app (configmaps, secrets) is created and goes Ready; every watch ends at the API server's 30–60 minute timeout and resumes from its cursor",
			silentOK: "a routine close publishes nothing"},
		{name: "controller rollout", from: hm(3, 0), to: hm(5, 0),
			what:     "a new pod (ctl-b) starts, the old one (ctl-a) stops a minute later: a new target, counters from zero",
			silentOK: "the new pod serves every series before the old one goes; the start grace keeps Ready=True as written"},
		{name: "apiserver restart", from: hm(5, 0), to: hm(7, 0),
			what:     "the API server refuses connections for 20 s and comes back with a new watch cache: every cursor expires (410) and every stream replays",
			silentOK: "refused for less than the transient grace (30 s): nothing is published; replays of well under a second"},
		{name: "cursor expiry", from: hm(7, 0), to: hm(9, 0),
			what:     "etcd is compacted and shop's configmaps watch ends: the resume gets 410 and the stream replays",
			silentOK: "a quick replay publishes nothing"},
		{name: "two objects named app", from: hm(9, 0), to: hm(12, 0),
			what: "prod/app is created; RBAC denies the controller prod's secrets until 10:00; shop/app stays Ready throughout",
			fires: []firing{
				{alert: "WatchTargetStalled", labels: prodApp, after: hm(9, 5), before: hm(9, 9), resolvedBy: hm(10, 8),
					why: "prod/app Stalled (Forbidden) for 5 minutes; named in its own namespace, not the controller's (exported_namespace under honor_labels: false)"},
				{alert: "WatchTargetNotReady", labels: prodApp, after: hm(9, 30), before: hm(9, 33), resolvedBy: hm(10, 8),
					why: "prod/app not Ready for 30 minutes; the Ready shop/app of the same name does not mask it"},
				{alert: "WatchStreamBlocked", labels: secretsRes, after: hm(9, 10), before: hm(9, 13), resolvedBy: hm(10, 8),
					why: "prod's secrets stream Blocked for 10 minutes"},
			},
			silentOK: "shop/app is Ready; the replay after the repair is short (the hour Blocked is not replay cost)"},
		{name: "crash loop with a Stalled object", from: hm(12, 0), to: hm(15, 0),
			what: "RBAC denies prod's secrets again from 12:00; from 12:15 to 13:11 the controller crash-loops (up 4 minutes, down 2); repaired at 13:30",
			fires: []firing{
				{alert: "WatchTargetStalled", labels: prodApp, after: hm(12, 5), before: hm(12, 9), until: hm(13, 30), resolvedBy: hm(13, 40),
					why: "keeps firing through every gap: the object's last report is held while its target is down"},
				{alert: "WatchTargetNotReady", labels: prodApp, after: hm(12, 30), before: hm(12, 33), until: hm(13, 30), resolvedBy: hm(13, 40),
					why: "likewise, after 30 minutes"},
				{alert: "WatchControllerDown", labels: map[string]string{"pod": "ctl-b"}, after: hm(12, 30), before: hm(12, 34), resolvedBy: hm(13, 25),
					why: "the target failed a scrape in every 10 minutes for 15"},
				{alert: "WatchStreamBlocked", labels: secretsRes, after: hm(12, 10), before: hm(12, 13),
					why: "Blocked for 10 minutes before the loop; it resolves at the first crash (the streams gauge restarts with the process) and WatchControllerDown takes over"},
			},
			silentOK: "each gap lasts 2 minutes, less than WatchControllerAbsent's 10"},
		{name: "RBAC denial repaired after two hours", from: hm(15, 0), to: hm(20, 0),
			what: "billing/ledger (secrets) is created while RBAC denies the controller billing's secrets; repaired at 17:00",
			fires: []firing{
				{alert: "WatchTargetStalled", labels: ledger, after: hm(15, 5), before: hm(15, 9), resolvedBy: hm(17, 8),
					why: "Stalled (Forbidden) for 5 minutes"},
				{alert: "WatchTargetNotReady", labels: ledger, after: hm(15, 30), before: hm(15, 33), resolvedBy: hm(17, 8),
					why: "not Ready for 30 minutes"},
				{alert: "WatchStreamBlocked", labels: secretsRes, after: hm(15, 10), before: hm(15, 13), resolvedBy: hm(17, 8),
					why: "billing's secrets stream Blocked for 10 minutes"},
			},
			silentOK: "WatchReplayCost stays silent after the repair: the initial sync's two hours Blocked are not replay time"},
		{name: "controller gone", from: hm(20, 0), to: hm(21, 30),
			what: "the controller is scaled to zero at 20:00 (its target goes away) and back at 20:30 (ctl-c)",
			fires: []firing{
				{alert: "WatchControllerAbsent", after: hm(20, 9), before: hm(20, 13), resolvedBy: hm(20, 33),
					why: "nothing served the watchgrade metrics for 10 minutes"},
			},
			silentOK: "no failed scrape (the target is gone, not down); the objects were Ready"},
		{name: "quiet evening", from: hm(21, 30), to: hm(24, 0),
			what: "routine closes only", silentOK: "a routine close publishes nothing"},
	}
}

// alertNames are the alerts of rules.yaml, in file order.
func alertNames(p *prom) []string {
	var out []string
	for _, g := range p.groups {
		for _, r := range g.AlertingRules() {
			out = append(out, r.Name())
		}
	}
	return out
}

// action is something that happens at a time of the day.
type action struct {
	at time.Duration
	do func()
}

// day is the state of the scripted day.
type day struct {
	t   *testing.T
	n   *network
	c   *cluster
	p   *prom
	ctl *controller
	ip  string
}

func forbidden(resource string) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", errors.New("the controller's Role does not allow list and watch"))
}

// startController starts a controller process on ip and serves its
// /metrics there.
func (d *day) startController(ip string) {
	d.ctl = d.c.start(d.t)
	d.ip = ip
	d.n.serve(ip+":8080", d.ctl.handler)
}

// crash stops the controller process: its port refuses connections.
func (d *day) crash() {
	d.n.serve(d.ip+":8080", nil)
	d.ctl.stop()
}

func (d *day) script() []action {
	var out []action
	at := func(t time.Duration, f func()) { out = append(out, action{t, f}) }
	prodSecrets := func() *watchtest.Server { return d.c.server("prod", secrets) }
	at(0, func() {
		d.c.create("shop", "app", configmaps, secrets)
		d.startController("10.0.3.17")
		d.p.targets(pod("ctl-a", "10.0.3.17"))
	})
	// Rollout.
	var old *controller
	at(hm(3, 0), func() {
		old = d.ctl
		d.startController("10.0.3.18")
		d.p.targets(pod("ctl-a", "10.0.3.17"), pod("ctl-b", "10.0.3.18"))
	})
	at(hm(3, 1), func() {
		d.p.targets(pod("ctl-b", "10.0.3.18"))
		d.n.serve("10.0.3.17:8080", nil)
		old.stop()
	})
	// API server restart.
	at(hm(5, 0), func() {
		d.c.each(func(s *watchtest.Server) { s.SetFaults(watchtest.Faults{Refuse: true}); s.CloseWatches() })
	})
	at(hm(5, 0)+20*time.Second, func() {
		d.c.each(func(s *watchtest.Server) { s.Restart(); s.SetFaults(watchtest.Faults{}) })
	})
	// Cursor expiry.
	at(hm(7, 0), func() {
		s := d.c.server("shop", configmaps)
		s.Compact()
		s.CloseWatches()
	})
	// Two objects named app.
	at(hm(9, 0), func() {
		prodSecrets().SetFaults(watchtest.Faults{Err: forbidden("secrets")})
		d.c.create("prod", "app", configmaps, secrets)
	})
	at(hm(10, 0), func() { prodSecrets().SetFaults(watchtest.Faults{}) })
	// Crash loop with a Stalled object.
	at(hm(12, 0), func() {
		prodSecrets().SetFaults(watchtest.Faults{Err: forbidden("secrets")})
		prodSecrets().CloseWatches()
	})
	for k := range 10 {
		crash := hm(12, 15) + time.Duration(k)*6*time.Minute
		at(crash, d.crash)
		at(crash+2*time.Minute, func() { d.startController("10.0.3.18") })
	}
	at(hm(13, 30), func() { prodSecrets().SetFaults(watchtest.Faults{}) })
	// RBAC denial repaired after two hours.
	at(hm(15, 0), func() {
		d.c.server("billing", secrets).SetFaults(watchtest.Faults{Err: forbidden("secrets")})
		d.c.create("billing", "ledger", secrets)
	})
	at(hm(17, 0), func() { d.c.server("billing", secrets).SetFaults(watchtest.Faults{}) })
	// Controller gone.
	at(hm(20, 0), func() {
		d.p.targets()
		d.crash()
	})
	at(hm(20, 30), func() {
		d.startController("10.0.3.19")
		d.p.targets(pod("ctl-c", "10.0.3.19"))
	})
	slices.SortStableFunc(out, func(a, b action) int { return int(a.at - b.at) })
	return out
}

// result is what a day showed.
type result struct {
	scenes, expected, fired, silentOK int
	spans                             []span
	// tests are the promtool tests generated from the day.
	tests []byte
}

// runDay plays the day with the scrape's honor_labels set as given.
func runDay(t *testing.T, honor bool) result {
	var res result
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		start := time.Now()
		d := &day{t: t, n: newNetwork(), c: newCluster(t)}
		d.p = startPrometheus(t, d.n, honor)
		actions := d.script()
		for minute := time.Duration(0); minute <= 24*time.Hour; minute += time.Minute {
			for len(actions) > 0 && actions[0].at < minute {
				time.Sleep(time.Until(start.Add(actions[0].at)))
				actions[0].do()
				actions = actions[1:]
			}
			time.Sleep(time.Until(start.Add(minute)))
			synctest.Wait()
			d.p.eval(ctx, time.Now())
		}
		d.p.stop()
		d.ctl.stop()
		d.n.close()
		res = d.check(start)
		res.tests = d.promtoolTests(start)
	})
	return res
}

// check holds the day's alerts to the scenes.
func (d *day) check(start time.Time) result {
	t := d.t
	res := result{spans: d.p.spans}
	names := alertNames(d.p)
	for _, sc := range scenes() {
		res.scenes++
		from, to := start.Add(sc.from), start.Add(sc.to)
		expected := map[string]bool{}
		for _, f := range sc.fires {
			res.expected++
			expected[f.alert] = true
			var got []span
			for _, s := range d.p.firingBetween(f.alert, from, to) {
				if f.matches(s) {
					got = append(got, s)
				}
			}
			switch {
			case len(got) == 0:
				t.Errorf("%s: %s %v did not fire; want it first between %s and %s: %s", sc.name, f.alert, f.labels, clockD(f.after), clockD(f.before), f.why)
				continue
			case got[0].from.Before(start.Add(f.after)) || got[0].from.After(start.Add(f.before)):
				t.Errorf("%s: %s first fired at %s, want between %s and %s: %s\n\t%v", sc.name, f.alert, clock(got[0].from), clockD(f.after), clockD(f.before), f.why, got)
				continue
			case f.until != 0 && !got[0].to.IsZero() && got[0].to.Before(start.Add(f.until)):
				t.Errorf("%s: %s stopped firing at %s, want it firing until %s at least: %s\n\t%v", sc.name, f.alert, clock(got[0].to), clockD(f.until), f.why, got)
				continue
			case f.resolvedBy != 0 && (got[len(got)-1].to.IsZero() || got[len(got)-1].to.After(start.Add(f.resolvedBy))):
				t.Errorf("%s: %s not resolved by %s: %v", sc.name, f.alert, clockD(f.resolvedBy), got)
				continue
			}
			res.fired++
		}
		// Everything else stays silent: no alert of another name, and no
		// other labels for the expected ones.
		for _, name := range names {
			for _, s := range d.p.firingBetween(name, from, to) {
				if slices.ContainsFunc(sc.fires, func(f firing) bool { return f.matches(s) }) {
					continue
				}
				if s.from.Before(from) && !s.to.IsZero() && s.to.Before(from.Add(10*time.Minute)) {
					continue // the previous scene's alert resolving
				}
				t.Errorf("%s: %s fired, want silence: %s", sc.name, s, sc.silentOK)
			}
			if !expected[name] && len(d.p.firingBetween(name, from, to)) == 0 {
				res.silentOK++
			}
		}
	}
	return res
}

func clockD(d time.Duration) string { return clock(time.Time{}.Add(d)) }

func TestDay(t *testing.T) {
	klog.SetOutput(ioDiscard{})
	klog.LogToStderr(false)
	// The scrape manager seeds its scrape offsets with the host's name,
	// which it resolves: the resolver's process-wide state must be made
	// outside the bubbles, or the second day finds it in the first's.
	if _, err := osutil.GetFQDN(); err != nil {
		t.Logf("GetFQDN: %v", err)
	}
	for _, honor := range []bool{false, true} {
		t.Run(fmt.Sprintf("honor_labels=%v", honor), func(t *testing.T) {
			res := runDay(t, honor)
			fmt.Printf("monitoring: day honor_labels=%v scenes=%d alerts_expected=%d fired=%d silent_ok=%d\n",
				honor, res.scenes, res.expected, res.fired, res.silentOK)
			if !honor {
				writePromtoolTests(t, res.tests)
			}
			if t.Failed() {
				for _, s := range res.spans {
					t.Logf("fired: %s", s)
				}
			}
		})
	}
}

type ioDiscard struct{}

func (ioDiscard) Write(p []byte) (int, error) { return len(p), nil }
