// Package monitoring is the operations kit for watchgrade controllers:
// alert and recording rules, a Grafana dashboard and an Argo CD health
// check, as files to install, each tested here by the tool that consumes
// it (see README.md in this directory), and [ConditionCollector], the
// per-object condition series that the object alerts read.
package monitoring
