# `make test` is the one command that runs every check; .ci/run calls it.
# It needs only Go (see go.mod for the version) and network access to the Go
# module proxy: modules are downloaded on first use.

GO       ?= go
# FUZZTIME, if set (20s, 5000x), is every fuzz target's budget; unset,
# each has a count of its own (see fuzz).
FUZZTIME ?=
E2E_LOG  ?= $(CURDIR)/e2e.log

SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: test check-format vet api api-snapshot release unit judge pipeline fuzz fuzz-pipeline e2e examples kubebuilder monitoring monitoring-capture bench stress

test: check-format vet api release e2e examples kubebuilder monitoring unit judge pipeline fuzz

check-format:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	cd internal/e2e && $(GO) vet ./...
	cd examples && $(GO) vet ./...
	cd examples/wgctrl && $(GO) vet ./...

# Releases (internal/e2e/release; how to cut one: the header of
# examples/wgctrl/CHANGELOG.md, which records them). No tag need exist.
# api: each released module's API compared with its snapshot as released
# (apidiff; before v1 an incompatible change must be named under
# Unreleased, from v1 on none is allowed), and wgctrl requiring the root
# module at its released version; about a second. api-snapshot (not part
# of `test`, a step of a release) writes the snapshots. release: the
# commit RELEASE_REV (HEAD) published to a local file GOPROXY as the tags
# would publish it, then each `go get` line of the README run as it is in
# a fresh module with no replace directive and a program built over it
# (one "e2e: release" line each), and each quick start's lines checked to
# be lines of that program; about 10 s warm, the module and build
# caches shared. RELEASE_FLAGS=-release.worktree publishes the work tree
# as it would be committed instead.
RELEASE_REV   ?= HEAD
RELEASE_FLAGS ?=

api:
	cd internal/e2e && $(GO) test -count=1 -v -run '^Test(APICompatible|ChangelogNamesTheModules|ParseChangelog|CheckAPI|APISnapshotRoundTrip)$$' ./release/ 2>&1 | \
		grep -E '^(api:|--- FAIL|    --- FAIL|FAIL|ok )|_test\.go:[0-9]+:'

api-snapshot:
	cd internal/e2e && $(GO) test -count=1 -v -run '^TestAPICompatible$$' ./release/ -api.write 2>&1 | grep -E '^(api:|--- |FAIL|ok )|_test\.go:[0-9]+:'

release:
	cd internal/e2e && $(GO) test -count=1 -v -timeout 20m -run '^Test(GoGet|QuickStartsAreBuilt)$$' ./release/ -release.rev=$(RELEASE_REV) $(RELEASE_FLAGS) 2>&1 | \
		grep -E '^(e2e:|--- |    --- |FAIL|ok )|_test\.go:[0-9]+:'

# The race detector is on for every unit test, examples included.
unit:
	$(GO) test -race -count=1 ./...

# The judge: JUDGE_SCHEDULES generated fault schedules against a simulated
# API server, a graded Stream and an informer over Instrument, every
# invariant of the watch package doc checked against each schedule's
# ground truth, with the race detector on (about 9 minutes on 2 cores for
# 5,000 schedules of hours of virtual time each). Then
# TestJudgeReplay plays 20 seeds twice each and compares what the consumer
# observed ("judge: replay seeds=20 identical=K"): a seed must replay
# exactly for -judge.seed to reproduce a failure.
JUDGE_SCHEDULES ?= 5000

judge:
	@$(GO) test -race -count=1 -v -run '^TestJudge(Replay)?$$' -coverpkg=./watch/,./watch/watchtest/ -coverprofile=judge.cover ./watch/ -judge.schedules=$(JUDGE_SCHEDULES) > judge.log 2>&1; rc=$$?; \
		grep -E '^judge:|broke the invariants|does not replay|^(FAIL|ok) ' judge.log; \
		awk 'NR > 1 { t += $$2; if ($$3 > 0) c += $$2; if ($$1 !~ /watchtest\/watchtest.go:/) { u += $$2; if ($$3 > 0) d += $$2 } } \
			END { printf "judge: coverage=%.1f%% of the statements of watch and watchtest'"'"'s Server; %.1f%% with watchtest'"'"'s scripted ListerWatcher, which the judge does not use\n", 100*d/u, 100*c/t }' judge.cover; \
		exit $$rc

# The pipeline judge (internal/pipeline): PIPELINE_HISTORIES random
# histories of a controller's world (streams and informers over the
# simulated API server with the judge's faults, the caller's own gates,
# StreamsCondition on and off, generation bumps, controller rollouts and
# outages, apiserver restarts, owners created, deleted and recreated, some
# while the controller is down), played in virtual time through the
# readiness accumulator and roll-up, status writes, Events through both
# recorder kinds and the time-to-first-Ready metric, every invariant
# checked against each history's ground truth. About 30 s for 2,000 on two
# busy cores; the unit run above already plays 40 with the race detector.
PIPELINE_HISTORIES ?= 2000

pipeline:
	@$(GO) test -count=1 -v -run '^TestPipeline$$' ./internal/pipeline/ -pipeline.histories=$(PIPELINE_HISTORIES) > pipeline.log 2>&1; rc=$$?; \
		grep -E '^pipeline:|broke the invariants|^(FAIL|ok) ' pipeline.log; exit $$rc

# Short fuzz runs: the grading function is total, a stream never panics
# on whatever events a server sends, and the judge's invariants hold on
# schedules drawn from the fuzz input.
# Budgets are counts of executions, about 20 s each on 2 cores: a budget
# in seconds can fail with "context deadline exceeded" when it runs out
# while a worker is busy (golang/go#75804, a race in Go 1.26's fuzz
# coordinator, fixed in Go 1.27), which is no finding.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzGrade$$' -fuzztime $(or $(FUZZTIME),20000x) ./watch/
	$(GO) test -run '^$$' -fuzz '^FuzzStreamEvents$$' -fuzztime $(or $(FUZZTIME),8000x) ./watch/
	$(GO) test -run '^$$' -fuzz '^FuzzJudge$$' -fuzztime $(or $(FUZZTIME),800x) ./watch/

# Not part of `test`: the pipeline judge's invariants on histories drawn
# from the fuzz input. Its seeds run with the unit tests; fuzzing needs an
# instrumented build of the test binary's every dependency, which no other
# fuzz target shares (about 4 CPU-minutes on a cold cache).
fuzz-pipeline:
	$(GO) test -run '^$$' -fuzz '^FuzzPipeline$$' -fuzztime $(or $(FUZZTIME),300x) ./internal/pipeline/

# End-to-end tests against a real kube-apiserver and etcd started inside the
# test binary (nested module internal/e2e). The first build on a fresh
# machine compiles Kubernetes: about 7 minutes. The servers change
# process-wide state, so tests in one process run one after another; the
# scenarios run as two processes of the same binary side by side (E2E_FIRST
# in one, every other test in the other), started 5 s apart so their
# embedded etcds do not race for a port. Full logs go to $(E2E_LOG); the
# console shows each test, its failures, and one summary line per scenario
# ("e2e: ...").
E2E_FIRST := ^(TestSteadyCutsDoNotFlap|TestInformers|TestExpiryAfterAPIServerRestart|TestAPIServerOutage|TestTeardownMidSession|TestHarnessStarts|TestReplayLoopBehindProxy|TestListWatchReplayWhoseWatchExpires)$$
E2E_FLAGS := -test.v -test.count=1 -test.timeout=30m

e2e:
	cd internal/e2e && $(GO) test -c -o $(CURDIR)/bin/e2e.test ./scenarios/
	cd internal/e2e/scenarios && { \
		$(CURDIR)/bin/e2e.test $(E2E_FLAGS) -test.run '$(E2E_FIRST)' > $(E2E_LOG).first 2>&1 & first=$$!; \
		sleep 5; \
		$(CURDIR)/bin/e2e.test $(E2E_FLAGS) -test.skip '$(E2E_FIRST)' > $(E2E_LOG).rest 2>&1; rest=$$?; \
		wait $$first; first=$$?; \
		cat $(E2E_LOG).first $(E2E_LOG).rest > $(E2E_LOG); rm -f $(E2E_LOG).first $(E2E_LOG).rest; \
		grep -E '^(e2e:|=== RUN|--- |    --- |PASS|FAIL|ok )|_test\.go:[0-9]+:' $(E2E_LOG); \
		echo "e2e: processes exited $$first and $$rest"; \
		test $$first -eq 0 && test $$rest -eq 0; }

# The examples (nested module examples/): their unit tests with the race
# detector, then both example controllers against a real kube-apiserver
# (examples/e2e, with a controller-runtime manager's graded informer
# through apiserver outages of 5, 10 and 17 s: one "e2e:
# ctrlruntime-informer-outage" line) and the demo in a short run with its
# summary checked (examples/demo), two processes side by side. They share
# the e2e build.
EXAMPLES_LOG ?= $(CURDIR)/examples.log

examples:
	cd examples && $(GO) test -race -count=1 $$($(GO) list ./... | grep -v -e /e2e$$ -e /demo$$)
	cd examples/wgctrl && $(GO) test -race -count=1 ./...
	cd examples && $(GO) test -count=1 -v -timeout 20m -skip '^TestKubebuilder$$' ./e2e/ ./demo/ > $(EXAMPLES_LOG) 2>&1; rc=$$?; \
		grep -E '^ *(e2e:|demo:)|^(=== RUN|--- |PASS|FAIL|ok )|_test\.go:[0-9]+:' $(EXAMPLES_LOG); \
		exit $$rc

# A kubebuilder project we did not write (examples/e2e, TestKubebuilder):
# kubebuilder v4.16.0 installed from the Go module proxy, a fresh scaffold
# whose Guestbook Owns a ConfigMap, the adoption steps of
# examples/README.md (examples/kubebuilder/adopt.patch) applied, built, and
# run against a real kube-apiserver: its CRD missing at startup, Ready, a
# quiet restart, the ConfigMaps denied at startup (a restart while the
# Guestbook is Stalled, which must write nothing, then held past
# controller-runtime's two-minute CacheSyncTimeout) and while running, each
# repaired. It prints one "e2e: kubebuilder ..." line per denial. About 6
# to 8 minutes warm (8 on 2 cores shared with other builds; 4 of them the
# story itself); the first run also installs kubebuilder and controller-gen
# and builds the scaffold's dependencies: about 2 to 3 minutes more. Log in
# $(KUBEBUILDER_LOG).
KUBEBUILDER_LOG ?= $(CURDIR)/kubebuilder.log

kubebuilder:
	cd examples && $(GO) test -count=1 -v -timeout 30m -run '^TestKubebuilder$$' ./e2e/ > $(KUBEBUILDER_LOG) 2>&1; rc=$$?; \
		grep -E '^ *e2e:|^(=== RUN|--- |PASS|FAIL|ok )|_test\.go:[0-9]+:' $(KUBEBUILDER_LOG); exit $$rc

# The operations kit (examples/monitoring), each file checked by the tool
# that consumes it: the Argo CD health check run with gopher-lua and held to
# kstatus, the Grafana dashboard's queries parsed with Prometheus's parser,
# the rule files loaded as Prometheus and the Prometheus Operator load them,
# the ServiceMonitor and PodMonitor decoded with the operator's types, the
# promtool tests regenerated from the committed e2e scrapes and compared.
# Then the day (examples/monitoring/day, a module of its own): a day of
# operations, the example controller's series scraped by Prometheus's scrape
# code with a ServiceMonitor's target labels and evaluated by its rule
# engine, in virtual time, under both honor_labels settings (one "day" line
# each). Then promtool test rules on the scenarios and on the tests
# generated from a run of the day, with promtool pinned in a module of its
# own. The first builds of the day and of promtool compile Prometheus's
# service discovery SDKs (about 5 minutes each on 2 cores, shared in part);
# the Go build cache keeps them.
MONITORING_TESTS := ^Test(ArgoCD|Dashboard|RulesFile|PrometheusRule|RuleTests|EveryAlert|DocQueries|Prometheus3|LeSelectors|Rejections|ServiceMonitor)
MONITORING_DAY   := ^Test(Day|SceneTable|ScrapeConfigSnippet)$$

monitoring:
	cd examples && $(GO) test -count=1 -v -run '$(MONITORING_TESTS)' ./monitoring/ | grep -E '^(monitoring:|--- |ok |FAIL)|_test\.go:[0-9]+:'
	cd examples/monitoring/day && $(GO) test -count=1 -v -run '$(MONITORING_DAY)' . | grep -E '^(monitoring:|--- |ok |FAIL)|_test\.go:[0-9]+:'
	cd examples/monitoring/promtool && $(GO) tool promtool test rules ../prometheus/rules_test.yaml ../prometheus/day_test.yaml
	@f="examples/monitoring/prometheus/rules_test.yaml examples/monitoring/prometheus/day_test.yaml"; \
		echo "monitoring: promtool rule_tests=$$(cat $$f | grep -c 'eval_time:') alerts=$$(grep -h 'alertname:' $$f | sort -u | wc -l)"

# Not part of `test`: runs both example controllers against a real
# kube-apiserver, writes what they exposed and wrote into
# examples/monitoring/testdata/e2e, and regenerates the promtool tests from
# it. Review the diff and commit it.
monitoring-capture:
	cd examples && WATCHGRADE_MONITORING_CAPTURE=$(CURDIR)/examples/monitoring/testdata/e2e \
		$(GO) test -count=1 -v -timeout 20m -run '^Test(ClientGo|ControllerRuntime)Controller$$' ./e2e/ > $(EXAMPLES_LOG) 2>&1; rc=$$?; \
		grep -E '^ *e2e:|^(--- |ok |FAIL)|observatory:' $(EXAMPLES_LOG); test $$rc -eq 0
	cd examples && $(GO) test -count=1 -run '^(TestRuleTestsUpToDate|TestArgoCDFixturesCoverTheStates)$$' ./monitoring/ -update

# Benchmarks are not part of `test`; internal/e2e/bench/README.md records
# their figures. First the watch and readiness packages' micro-benchmarks
# (in memory), then the e2e benchmarks against a real kube-apiserver and
# etcd, which run in child processes of the benchmark binary
# (internal/e2e/bench): decode; what a recovery costs the control plane
# (server-restart, server-expiry, server-replay: the "bench: server-*"
# lines); replay; many streams. BENCH_ROUNDS rounds each (every consumer
# once a round, in an order rotated every round). Their Go benchmark lines
# and the servers' logs go to $(BENCH_LOG); the console shows one "bench:"
# line per figure, median [min..max] over the rounds (the
# micro-benchmarks' -count runs too), and the machine's load. About
# 40 minutes on 2 cores; the server-replay group holds 10
# informers of 50,000 objects at once (about 1 GB) beside the servers.
BENCH_LOG    ?= $(CURDIR)/bench.log
BENCH_ROUNDS ?= 5
BENCH_FLAGS  ?=

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 3 ./watch/ ./readiness/ | tee $(BENCH_LOG).micro
	cd internal/e2e && $(GO) test -c -o $(CURDIR)/bin/bench.test ./bench/
	$(CURDIR)/bin/bench.test -test.run '^TestSummarize$$' > /dev/null
	$(CURDIR)/bin/bench.test -bench.summarize $(BENCH_LOG).micro
	cd internal/e2e/bench && $(CURDIR)/bin/bench.test -test.run '^$$' -test.bench . -test.benchtime 1x -test.benchmem \
		-test.timeout 120m -bench.rounds $(BENCH_ROUNDS) -bench.serverlog $(BENCH_LOG).servers $(BENCH_FLAGS) > $(BENCH_LOG) 2>&1; rc=$$?; \
		grep -E '^bench:|^--- FAIL|^FAIL|_test\.go:[0-9]+:' $(BENCH_LOG); exit $$rc

# The unit tests of both modules as a busy CI machine runs them: one shell
# busy loop per core for the whole run, every test 20 times. Not part of
# `test`; run it before calling a change done. STRESS_COUNT and STRESS_BURNERS
# override the defaults.
STRESS_COUNT   ?= 20
STRESS_BURNERS ?= $(shell nproc 2>/dev/null || echo 2)

stress:
	@pids=""; for i in $$(seq $(STRESS_BURNERS)); do ( while :; do :; done ) & pids="$$pids $$!"; done; \
	trap 'kill $$pids 2>/dev/null' EXIT; \
	echo "stress: $(STRESS_BURNERS) busy loops, -count=$(STRESS_COUNT)"; \
	$(GO) test -race -count=$(STRESS_COUNT) ./... && \
	( cd examples && $(GO) test -race -count=$(STRESS_COUNT) $$($(GO) list ./... | grep -v -e /e2e$$ -e /demo$$) ) && \
	( cd examples/wgctrl && $(GO) test -race -count=$(STRESS_COUNT) ./... )
