// Package monitoring is the operations kit for watchgrade controllers:
// a ServiceMonitor, a PodMonitor and a scrape config, alert and recording
// rules, a Grafana dashboard and an Argo CD health check, as files to
// install, each tested here by the tool that consumes it and all of them
// on a day of operations (see README.md in this directory), and
// [ConditionCollector], the per-object condition series that the object
// alerts read.
package monitoring
