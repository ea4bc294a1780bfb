package harness

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The highest concurrency an apiserver reaches during a burst of requests
// lasts milliseconds: its /metrics cannot show it (the one gauge that
// holds a maximum, apiserver_current_inflight_requests, keeps it for a
// second, and two apiservers in one process reset it at two phases), and
// reading /metrics often costs the apiserver more than the burst (1.7 MB
// of text, about 70 ms of CPU a read). So the child process samples, in
// process and every peakSamplePeriod, the gauges of API priority and
// fairness that count what executes and waits at this instant, and keeps
// the highest value of each.

// PeakGauges are the gauges the child samples: requests and seats
// executing (a WATCH until its initial events are sent, every other
// request until it ends) and requests queued, by priority level.
var PeakGauges = []string{
	"apiserver_flowcontrol_current_executing_requests",
	"apiserver_flowcontrol_current_executing_seats",
	"apiserver_flowcontrol_current_inqueue_requests",
}

// peakSamplePeriod is how often the child reads PeakGauges: reading them
// costs a few microseconds.
const peakSamplePeriod = 2 * time.Millisecond

// peakSampler samples PeakGauges until stopped.
type peakSampler struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	// peaks holds the highest value of each gauge summed by priority
	// level (`name{priority_level="x"}`) and over every series (`name`).
	peaks map[string]float64
}

// gaugeCollectors returns the registered collectors of the gauges named:
// registering a collector with the same descriptor (name, help and label
// names, read from one gather) makes the registry say which collector
// has it.
func gaugeCollectors(names []string) ([]prometheus.Collector, error) {
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return nil, err
	}
	var out []prometheus.Collector
	for _, name := range names {
		var mf *dto.MetricFamily
		for _, f := range mfs {
			if f.GetName() == name {
				mf = f
			}
		}
		if mf == nil || len(mf.GetMetric()) == 0 {
			return nil, fmt.Errorf("no gauge %s", name)
		}
		var labels []string
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, lp.GetName())
		}
		probe := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: mf.GetHelp()}, labels)
		err := legacyregistry.Registerer().Register(probe)
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			if err == nil {
				legacyregistry.Registerer().Unregister(probe)
			}
			return nil, fmt.Errorf("gauge %s: not found in the registry (%v)", name, err)
		}
		out = append(out, are.ExistingCollector)
	}
	return out, nil
}

func startPeakSampler() (*peakSampler, error) {
	collectors, err := gaugeCollectors(PeakGauges)
	if err != nil {
		return nil, err
	}
	p := &peakSampler{stop: make(chan struct{}), done: make(chan struct{}), peaks: map[string]float64{}}
	go func() {
		defer close(p.done)
		t := time.NewTicker(peakSamplePeriod)
		defer t.Stop()
		for {
			p.sample(collectors)
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p, nil
}

func (p *peakSampler) sample(collectors []prometheus.Collector) {
	sums := map[string]float64{}
	for i, c := range collectors {
		ch := make(chan prometheus.Metric, 64)
		go func() { c.Collect(ch); close(ch) }()
		for m := range ch {
			var d dto.Metric
			if m.Write(&d) != nil || d.GetGauge() == nil {
				continue
			}
			v := d.GetGauge().GetValue()
			sums[PeakGauges[i]] += v
			for _, lp := range d.GetLabel() {
				if lp.GetName() == "priority_level" {
					sums[PeakGauges[i]+`{priority_level="`+lp.GetValue()+`"}`] += v
				}
			}
		}
	}
	// What the server holds at this instant, executing or queued.
	for k, v := range sums {
		if rest, ok := strings.CutPrefix(k, PeakGauges[0]); ok {
			sums[PeakDemand+rest] = v + sums[PeakGauges[2]+rest]
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, v := range sums {
		p.peaks[k] = max(p.peaks[k], v)
	}
}

// PeakDemand names, in StopPeaks' answer, the sum of the requests
// executing and queued at the same instant
// (apiserver_flowcontrol_current_executing_requests plus
// apiserver_flowcontrol_current_inqueue_requests): every request the
// server holds, whether priority and fairness lets it run yet or not.
const PeakDemand = "demand_requests"

// finish stops the sampler and returns its peaks as "key=value ..." in
// key order.
func (p *peakSampler) finish() string {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]string, 0, len(p.peaks))
	for k := range p.peaks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%g", k, p.peaks[k])
	}
	return b.String()
}

// StartPeaks makes the child sample [PeakGauges] every 2 ms, in process,
// until StopPeaks; a sampler already running starts over.
func (r *Remote) StartPeaks() error {
	_, err := r.command("peaks-start")
	return err
}

// StopPeaks stops the child's sampler and returns the highest value each
// gauge reached since StartPeaks: by name summed over every series, and
// by `name{priority_level="x"}` summed over that priority level's; and
// the same of [PeakDemand].
func (r *Remote) StopPeaks() (map[string]float64, error) {
	line, err := r.command("peaks-stop")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, f := range strings.Fields(line) {
		i := strings.LastIndexByte(f, '=')
		if i < 0 {
			return nil, fmt.Errorf("remote: peaks: %q", line)
		}
		v, err := strconv.ParseFloat(f[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("remote: peaks: %q", line)
		}
		out[f[:i]] = v
	}
	return out, nil
}

// peakCommand runs the child's side of StartPeaks and StopPeaks.
func peakCommand(cmd string, sampler **peakSampler) string {
	switch cmd {
	case "peaks-start":
		if *sampler != nil {
			// Left running by a caller that failed before StopPeaks.
			(*sampler).finish()
		}
		p, err := startPeakSampler()
		if err != nil {
			return "error " + err.Error()
		}
		*sampler = p
		return "ok"
	default: // peaks-stop
		if *sampler == nil {
			return "error the sampler is not running"
		}
		out := (*sampler).finish()
		*sampler = nil
		return "ok" + out
	}
}
