# `make test` is the one command that runs every check; .ci/run calls it.
# It needs only Go (see go.mod for the version) and network access to the Go
# module proxy: modules are downloaded on first use. `make check` is the
# inner loop, about a minute warm: run it before every commit.

GO       ?= go
# FUZZTIME, if set (20s, 5000x), is every fuzz target's budget; unset,
# each has a count of its own (see fuzz).
FUZZTIME ?=
E2E_LOG  ?= $(CURDIR)/e2e.log

SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: test suite check check-format vet api api-snapshot release unit examples-unit operator judge judge-race pipeline fuzz fuzz-pipeline \
	build bin-e2e bin-examples-e2e bin-demo e2e examples examples-e2e kubebuilder scenarios monitoring monitoring-capture bench stress

# make test runs every check, side by side where the work is waiting
# rather than computing, each target's output printed whole when it ends
# (make's --output-sync), then one line of how long each took
# ("timing: lint=... total=..."); it fails if any target failed, after
# all have run, and one line of the CPU time each took ("cpu: ..."),
# which the machine's other load does not change as it does the time.
# Two lanes:
#
# - scenarios (after build, which compiles what they run, and first: on a
#   fresh machine that is most of the compiling there is): the
#   end-to-end tests of every module against real kube-apiservers, the
#   demo and the kubebuilder test, SCENARIO_JOBS processes at a time (see
#   scenarios). They mostly wait on the servers' and the library's timers.
# - the computing targets, under `nice` so that the build and the servers
#   of the scenarios get the CPU when they want it and the computing
#   targets what is left, in four chains: lint (after build, whose
#   compiled packages vet reads), the race detector's (unit, then
#   judge-race, which share their instrumented build), the judges' without
#   it (judge, pipeline, fuzz), and the release checks, the examples' and
#   wgctrl's unit tests and the operations kit (api, release,
#   examples-unit, monitoring). A chain's next target starts when the one
#   before it ended, whether or not it passed; judge-race also waits for
#   judge, to compare what each reached.
SUITE_DIR := $(CURDIR)/bin/suite
# TEST_TIMEOUT bounds each test binary of the computing targets. It only
# catches a hang: under nice on a fresh machine a target waits for the
# build's CPU, and the judge's 5,000 once ran past go test's default of 10
# minutes there (2 minutes on a quiet machine).
TEST_TIMEOUT ?= 45m
SUITE     := lint build scenarios unit judge-race judge pipeline fuzz api release examples-unit operator monitoring
NICED     := lint unit judge-race judge pipeline fuzz monitoring api release examples-unit operator
NICENESS  ?= 15

test:
	@rm -rf $(SUITE_DIR); mkdir -p $(SUITE_DIR); start=$$(date +%s); \
	$(MAKE) --no-print-directory -j $(words $(SUITE)) --output-sync=target suite; \
	line="timing:"; cpuline="cpu:"; failed=""; cputotal=0; for t in $(SUITE); do \
		read -r rc secs cpu < $(SUITE_DIR)/$$t 2>/dev/null || { rc=missing; secs=0; cpu=0; }; \
		line="$$line $$t=$$((secs / 60))m$$((secs % 60))s"; [ "$$rc" = 0 ] || failed="$$failed $$t"; \
		cpuline="$$cpuline $$t=$$((cpu / 60))m$$((cpu % 60))s"; cputotal=$$((cputotal + cpu)); \
	done; \
	total=$$(( $$(date +%s) - start )); echo "$$line total=$$((total / 60))m$$((total % 60))s"; \
	echo "$$cpuline total=$$((cputotal / 60))m$$((cputotal % 60))s"; \
	if [ -n "$$failed" ]; then echo "FAIL:$$failed"; exit 1; fi

# suite-X runs target X for make test: it records X's exit code, its
# duration and the CPU time (user and system) of its processes, and always
# succeeds, so that a failed target neither stops the others nor a chain.
# (bash's times: no file descriptor is redirected, so make's jobserver
# pipe reaches the target's own make).
suite-%:
	@start=$$(date +%s); $(if $(filter $*,$(NICED)),nice -n $(NICENESS)) $(MAKE) --no-print-directory $*; rc=$$?; \
		times > $(SUITE_DIR)/$*.cpu; cpu=$$(tail -1 $(SUITE_DIR)/$*.cpu | awk '{ n = 0; for (i = 1; i <= 2; i++) { split($$i, a, /[ms]/); n += a[1] * 60 + a[2] } printf "%d", n }'); \
		echo "$$rc $$(( $$(date +%s) - start )) $$cpu" > $(SUITE_DIR)/$*

suite: $(addprefix suite-,$(SUITE))

# The lanes' order.
suite-lint: suite-build
suite-scenarios: suite-build
suite-judge-race: suite-unit suite-judge
suite-pipeline: suite-judge
suite-fuzz: suite-pipeline
suite-operator: suite-examples-unit
suite-monitoring: suite-operator
suite-release: suite-api
suite-examples-unit: suite-release

lint: check-format vet

# The inner loop (about a minute warm): formatting, vet, the unit tests of
# the packages changed since CHECK_BASE (HEAD: what a commit would add; in
# every module, with the race detector; the end-to-end packages are left
# to make test), the grading and roll-up tables, and CHECK_SCHEDULES
# judge schedules without the race detector.
CHECK_BASE      ?= HEAD
CHECK_SCHEDULES ?= 300

check: check-format
	$(GO) vet ./...
	@changed=$$( { git diff --name-only $(CHECK_BASE) -- '*.go'; git ls-files --others --exclude-standard -- '*.go'; } | sort -u); \
	for mod in . internal/e2e examples examples/wgctrl examples/monitoring/day; do \
		pkgs=""; for f in $$changed; do \
			[ -f "$$f" ] || continue; d=$$(dirname "$$f"); m=$$d; \
			while [ ! -f "$$m/go.mod" ]; do m=$$(dirname "$$m"); done; \
			[ "$$m" = "$$mod" ] || continue; \
			if [ "$$d" = "$$mod" ]; then pkgs="$$pkgs ."; else pkgs="$$pkgs ./$${d#$$mod/}"; fi; \
		done; \
		pkgs=$$(printf '%s\n' $$pkgs | sed 's|^\./\.$$|.|' | sort -u | grep -v -e '/testdata' -e '/e2e$$' -e '/scenarios$$' -e '/demo$$' -e '/bench$$' -e '/release$$'); \
		[ -n "$$pkgs" ] || continue; \
		echo "check: $$mod:" $$pkgs; \
		( cd $$mod && $(GO) vet $$pkgs && tested=$$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' $$pkgs) && \
			{ [ -z "$$tested" ] || $(GO) test -race -count=1 $$tested; } ) || exit 1; \
	done
	$(GO) test -count=1 -run '^(TestGrade|TestClassify|TestRollup|TestApply|TestKstatusConformance|TestRollupRestartRows|TestPublishedWhen|TestPublishedStateIsKept|TestWhenASessionIsLive)$$' ./watch/ ./readiness/
	$(GO) test -count=1 -v -run '^TestJudge$$' ./watch/ -judge.schedules=$(CHECK_SCHEDULES) | grep -E '^judge:|broke the invariants|^(FAIL|ok) '

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
	cd internal/e2e && $(GO) test -count=1 -v -timeout $(TEST_TIMEOUT) -run '^Test(APICompatible|ChangelogNamesTheModules|ParseChangelog|CheckAPI|APISnapshotRoundTrip)$$' ./release/ 2>&1 | \
		grep -E '^(api:|--- FAIL|    --- FAIL|FAIL|ok )|_test\.go:[0-9]+:'

api-snapshot:
	cd internal/e2e && $(GO) test -count=1 -v -run '^TestAPICompatible$$' ./release/ -api.write 2>&1 | grep -E '^(api:|--- |FAIL|ok )|_test\.go:[0-9]+:'

release:
	cd internal/e2e && $(GO) test -count=1 -v -timeout 20m -run '^Test(GoGet|QuickStartsAreBuilt)$$' ./release/ -release.rev=$(RELEASE_REV) $(RELEASE_FLAGS) 2>&1 | \
		grep -E '^(e2e:|--- |    --- |FAIL|ok )|_test\.go:[0-9]+:'

# The race detector is on for every unit test (the examples' and wgctrl's:
# examples-unit).
unit:
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

# The judge: JUDGE_SCHEDULES generated fault schedules against a simulated
# API server, a graded Stream and an informer over Instrument, every
# invariant of the watch package doc checked against each schedule's
# ground truth (about 2 minutes on 2 cores for 5,000 schedules of hours of
# virtual time each), and a line counting the worlds beyond faults the
# schedules drew ("judge: worlds slow_consumers=... hung_handlers=...
# large_buffers=... large_bursts=..."). Then TestJudgeReplay plays 20 seeds twice each and
# compares what the consumer observed ("judge: replay seeds=20
# identical=K"): a seed must replay exactly for -judge.seed to reproduce a
# failure.
JUDGE_SCHEDULES ?= 5000
COVER_SUMMARY    = awk 'NR > 1 { t += $$2; if ($$3 > 0) c += $$2; if ($$1 !~ /watchtest\/watchtest.go:/) { u += $$2; if ($$3 > 0) d += $$2 } } \
	END { printf "%.1f%% of the statements of watch and watchtest'"'"'s Server; %.1f%% with watchtest'"'"'s scripted ListerWatcher, which the judge does not use\n", 100*d/u, 100*c/t }'

judge:
	@$(GO) test -count=1 -v -timeout $(TEST_TIMEOUT) -run '^TestJudge(Replay)?$$' -coverpkg=./watch/,./watch/watchtest/ -coverprofile=judge.cover ./watch/ -judge.schedules=$(JUDGE_SCHEDULES) > judge.log 2>&1; rc=$$?; \
		grep -E '^judge:|broke the invariants|does not replay|^(FAIL|ok) ' judge.log; \
		echo "judge: coverage=$$($(COVER_SUMMARY) judge.cover)"; \
		exit $$rc

# The judge with the race detector: the first JUDGE_RACE_SCHEDULES of the
# judge's schedules (the same seeds). The race detector finds a race only
# on a path that runs, and these reach every statement of watch and
# watchtest's Server that all JUDGE_SCHEDULES reach but one (measured on
# 2026-12-03; the line counts them anew from judge.cover, which make test
# has judge write first), at a fifth of the cost: the detector slows the
# judge about fivefold (5,000 took 9 minutes under it, 2 without). The
# unit tests play the first 200 under it too.
JUDGE_RACE_SCHEDULES ?= 1000

judge-race:
	@$(GO) test -race -count=1 -v -timeout $(TEST_TIMEOUT) -run '^TestJudge$$' -coverpkg=./watch/,./watch/watchtest/ -coverprofile=judge-race.cover ./watch/ -judge.schedules=$(JUDGE_RACE_SCHEDULES) > judge-race.log 2>&1; rc=$$?; \
		grep -E 'broke the invariants|^(FAIL|ok) ' judge-race.log; \
		grep -E '^judge: schedules=' judge-race.log | sed 's/^judge: /judge: race /'; \
		missed=""; if [ -f judge.cover ]; then missed=$$(awk 'FNR == 1 { f++; next } $$3 > 0 { if (f == 1) race[$$1] = 1; else if (!($$1 in race) && !($$1 in seen)) { seen[$$1] = 1; n += $$2 } } END { print n + 0 }' judge-race.cover judge.cover); \
			missed=" (statements the $(JUDGE_SCHEDULES) reach that these do not: $$missed)"; fi; \
		echo "judge: race coverage=$$($(COVER_SUMMARY) judge-race.cover)$$missed"; \
		exit $$rc

# The operator judge (examples/wgctrl/wgctrltest): OPERATOR_HISTORIES
# random histories of the Guestbook operator, wired with wgctrl as the
# adoption steps wire it, played by the operator authors' kit
# (wgctrltest) in virtual time: denials in one namespace of two or in all,
# outages (some past ProgressDeadline, the controller restarted in them),
# 410 storms, controller restarts, informers removed and made again,
# status conflicts, spec changes, owners deleted (some between a
# Reconcile's read and its write), a 10-minute ProgressDeadline, caches
# that make a kind's informers in either order, controllers that watch the
# kind metadata-only or not at all, a Reconcile with gates of its own
# (Reconciling, Stalled) restarted over; each checked for false, extra and
# missed Warnings, convergence, observedGeneration never ahead of a
# Reconcile, a first sync of one write, a restart that changed nothing
# writing nothing, kstatus, error-level lines only during denials and one
# for each denial seen for 3 minutes, the probe ready exactly when every
# informer the controller needs has synced, nothing written for an owner
# once deleted, no second informer of a kind. About a minute for 1,000. Then 20 seeds
# played twice ("operator: replay seeds=20 identical=K"; see
# TestOperatorJudgeReplay). examples-unit runs the first 100 under the
# race detector.
OPERATOR_HISTORIES ?= 1000

operator:
	@cd examples/wgctrl && $(GO) test -count=1 -v -timeout $(TEST_TIMEOUT) -run '^TestOperatorJudge(Replay)?$$' ./wgctrltest/ \
		-operator.histories=$(OPERATOR_HISTORIES) -operator.replays=20 > $(CURDIR)/operator.log 2>&1; rc=$$?; \
		grep -E '^operator:|broke the invariants|^(FAIL|ok) ' $(CURDIR)/operator.log; exit $$rc

# The pipeline judge (internal/pipeline): PIPELINE_HISTORIES random
# histories of a controller's world (streams and informers over the
# simulated API server with the judge's faults, the caller's own gates,
# StreamsCondition on and off, generation bumps, controller rollouts and
# outages, controllers that persist cursors and resume from them, consumers
# slow over snapshots, apiserver restarts, owners created, deleted and
# recreated, some while the controller is down, streams with a longer
# ProgressDeadline, controllers with a standby writer as wgctrl's Owner
# has: a "pipeline: worlds" line counts them), played in virtual time
# through the readiness accumulator and roll-up, status writes, Events through both
# recorder kinds and the time-to-first-Ready metric, every invariant
# checked against each history's ground truth. About 30 s for 2,000 on two
# busy cores; the unit run above already plays 40 with the race detector.
PIPELINE_HISTORIES ?= 2000

pipeline:
	@$(GO) test -count=1 -v -timeout $(TEST_TIMEOUT) -run '^TestPipeline$$' ./internal/pipeline/ -pipeline.histories=$(PIPELINE_HISTORIES) > pipeline.log 2>&1; rc=$$?; \
		grep -E '^pipeline:|broke the invariants|^(FAIL|ok) ' pipeline.log; exit $$rc

# Short fuzz runs: the grading function is total, a stream never panics
# on whatever events a server sends, and the judge's invariants hold on
# schedules drawn from the fuzz input.
# Built with the tag fuzzing, which leaves the tests over client-go's fake
# clientset out (watch/fakeclientset_test.go): fuzzing builds every
# dependency instrumented, and the fake clientset and its informers are
# 447 of the 802 packages of the watch package's tests.
# Budgets are counts of executions, about 20 s each on 2 cores: a budget
# in seconds can fail with "context deadline exceeded" when it runs out
# while a worker is busy (golang/go#75804, a race in Go 1.26's fuzz
# coordinator, fixed in Go 1.27), which is no finding.
fuzz:
	$(GO) test -tags fuzzing -timeout $(TEST_TIMEOUT) -run '^$$' -fuzz '^FuzzGrade$$' -fuzztime $(or $(FUZZTIME),20000x) ./watch/
	$(GO) test -tags fuzzing -timeout $(TEST_TIMEOUT) -run '^$$' -fuzz '^FuzzStreamEvents$$' -fuzztime $(or $(FUZZTIME),8000x) ./watch/
	$(GO) test -tags fuzzing -timeout $(TEST_TIMEOUT) -run '^$$' -fuzz '^FuzzJudge$$' -fuzztime $(or $(FUZZTIME),800x) ./watch/

# Not part of `test`: the pipeline judge's invariants on histories drawn
# from the fuzz input. Its seeds run with the unit tests; fuzzing needs an
# instrumented build of the test binary's every dependency, which no other
# fuzz target shares (about 4 CPU-minutes on a cold cache).
fuzz-pipeline:
	$(GO) test -tags fuzzing -timeout $(TEST_TIMEOUT) -run '^$$' -fuzz '^FuzzPipeline$$' -fuzztime $(or $(FUZZTIME),300x) ./internal/pipeline/

# End-to-end tests against real kube-apiservers and etcds started inside
# the test binaries: the scenarios (nested module internal/e2e), both
# example controllers (examples/e2e, with a controller-runtime manager's
# graded informer through apiserver outages of 5, 10 and 17 s: one "e2e:
# ctrlruntime-informer-outage" line), the demo in a short run of each mode
# with its summary checked (examples/demo), and the kubebuilder project
# below. The first build on a fresh machine compiles Kubernetes: about 7
# minutes, shared by the three binaries (bin/).
#
# The servers change process-wide state, so each test runs in a process of
# its own, SCENARIO_JOBS at a time, the longest first (.ci/pool): most of
# their time is spent waiting on timers, so a few run side by side on two
# cores as they do one after another. Full logs go to e2e.log,
# examples.log, demo.log and kubebuilder.log (each test's own under
# bin/pool/); the console shows each suite's summary lines ("e2e: ...",
# "demo: ..."), each test's result and its failures. make e2e, examples-e2e
# and kubebuilder run one suite each; scenarios, which make test runs, all
# of them in one pool.
SCENARIO_JOBS ?= 4
POOL_DIR      := $(CURDIR)/bin/pool
POOL_FILTER   := ^ *(e2e:|demo:)|^(--- |    --- |FAIL)|_test\.go:[0-9]+:
# The longest tests, longest first: they start first.
POOL_FIRST    := TestKubebuilder TestConsumerFarBehindIsNotStreaming TestRestartsAreQuiet TestInformerOutage TestInformerThroughResetsAndARestart TestControllerRuntimeInformerOutage TestOwnersFollowTheirNamespace TestSteadyCutsDoNotFlap \
	TestDemoTellsTheStoryInBothModes TestInformers TestAPIServerOutage TestRoutineCloses TestParity
E2E_SUITE         := e2e;internal/e2e/scenarios;$(CURDIR)/bin/e2e.test;.;;$(E2E_LOG);$(POOL_FILTER)
EXAMPLES_SUITE    := examples;examples/e2e;$(CURDIR)/bin/examples-e2e.test;.;^TestKubebuilder$$;$(CURDIR)/examples.log;$(POOL_FILTER)
DEMO_SUITE        := demo;examples/demo;$(CURDIR)/bin/demo.test;.;;$(CURDIR)/demo.log;$(POOL_FILTER)
KUBEBUILDER_SUITE := kubebuilder;examples/e2e;$(CURDIR)/bin/examples-e2e.test;^TestKubebuilder$$;;$(CURDIR)/kubebuilder.log;$(POOL_FILTER)
POOL = POOL_FIRST='$(POOL_FIRST)' .ci/pool $(SCENARIO_JOBS) $(POOL_DIR)

# build compiles the three test binaries, one after another (each go
# command compiles on every core; two side by side would compile the
# Kubernetes packages they share twice on a fresh machine); each suite's
# target the ones it runs.
build:
	@$(MAKE) --no-print-directory bin-e2e
	@$(MAKE) --no-print-directory bin-examples-e2e
	@$(MAKE) --no-print-directory bin-demo

bin-e2e:
	cd internal/e2e && $(GO) test -c -o $(CURDIR)/bin/e2e.test ./scenarios/

bin-examples-e2e:
	cd examples && $(GO) test -c -o $(CURDIR)/bin/examples-e2e.test ./e2e/

bin-demo:
	cd examples && $(GO) test -c -o $(CURDIR)/bin/demo.test ./demo/

scenarios: build
	@$(POOL) '$(E2E_SUITE)' '$(EXAMPLES_SUITE)' '$(DEMO_SUITE)' '$(KUBEBUILDER_SUITE)'

e2e: bin-e2e
	@$(POOL) '$(E2E_SUITE)'

# The examples (nested module examples/, and examples/wgctrl): their unit
# tests with the race detector, then their end-to-end tests and the demo.
examples: examples-unit examples-e2e

examples-unit:
	cd examples && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v -e /e2e$$ -e /demo$$)
	cd examples/wgctrl && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

examples-e2e: bin-examples-e2e bin-demo
	@$(POOL) '$(EXAMPLES_SUITE)' '$(DEMO_SUITE)'

# A kubebuilder project we did not write (examples/e2e, TestKubebuilder):
# kubebuilder v4.16.0 installed from the Go module proxy, a fresh scaffold
# whose Guestbook Owns a ConfigMap, the adoption steps of
# examples/README.md (examples/kubebuilder/adopt.patch) applied, built, and
# run against a real kube-apiserver: its CRD missing at startup, Ready, a
# quiet restart, the ConfigMaps denied at startup (a restart while the
# Guestbook is Stalled, which must write nothing, then held past
# controller-runtime's two-minute CacheSyncTimeout) and while running, each
# repaired; then run with --leader-elect and rolled to a new process.
# It prints one "e2e: kubebuilder ..." line per denial and one for the
# leader-elected rollout. About 5
# minutes warm (4 of them the story itself); the first run also
# installs kubebuilder and controller-gen and builds the scaffold's
# dependencies: about 2 to 3 minutes more. Log in kubebuilder.log.
kubebuilder: bin-examples-e2e
	@$(POOL) '$(KUBEBUILDER_SUITE)'

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
# own and built without the service discovery SDKs it does not need to
# test rules (Prometheus's build tag remove_all_sd). The first build of the
# day compiles Prometheus's scrape and rule engine (a few minutes on 2
# cores); the Go build cache keeps it.
MONITORING_TESTS := ^Test(ArgoCD|Dashboard|RulesFile|PrometheusRule|RuleTests|EveryAlert|DocQueries|Prometheus3|LeSelectors|Rejections|ServiceMonitor)
MONITORING_DAY   := ^Test(Day|SceneTable|ScrapeConfigSnippet)$$

monitoring:
	cd examples && $(GO) test -count=1 -v -timeout $(TEST_TIMEOUT) -run '$(MONITORING_TESTS)' ./monitoring/ | grep -E '^(monitoring:|--- |ok |FAIL)|_test\.go:[0-9]+:'
	cd examples/monitoring/day && $(GO) test -count=1 -v -timeout $(TEST_TIMEOUT) -run '$(MONITORING_DAY)' . | grep -E '^(monitoring:|--- |ok |FAIL)|_test\.go:[0-9]+:'
	cd examples/monitoring/promtool && $(GO) build -tags remove_all_sd -o $(CURDIR)/bin/promtool github.com/prometheus/prometheus/cmd/promtool
	cd examples/monitoring/promtool && $(CURDIR)/bin/promtool test rules ../prometheus/rules_test.yaml ../prometheus/day_test.yaml
	@f="examples/monitoring/prometheus/rules_test.yaml examples/monitoring/prometheus/day_test.yaml"; \
		echo "monitoring: promtool rule_tests=$$(cat $$f | grep -c 'eval_time:') alerts=$$(grep -h 'alertname:' $$f | sort -u | wc -l)"

# Not part of `test`: runs both example controllers against a real
# kube-apiserver, writes what they exposed and wrote into
# examples/monitoring/testdata/e2e, and regenerates the promtool tests from
# it. Review the diff and commit it.
monitoring-capture:
	cd examples && WATCHGRADE_MONITORING_CAPTURE=$(CURDIR)/examples/monitoring/testdata/e2e \
		$(GO) test -count=1 -v -timeout 20m -run '^Test(ClientGo|ControllerRuntime)Controller$$' ./e2e/ > $(CURDIR)/examples.log 2>&1; rc=$$?; \
		grep -E '^ *e2e:|^(--- |ok |FAIL)|observatory:' $(CURDIR)/examples.log; test $$rc -eq 0
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
