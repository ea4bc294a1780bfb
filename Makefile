# `make test` is the one command that runs every check; .ci/run calls it.
# It needs only Go (see go.mod for the version) and network access to the Go
# module proxy: modules are downloaded on first use.

GO       ?= go
FUZZTIME ?= 20s
E2E_LOG  ?= $(CURDIR)/e2e.log

SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: test check-format vet unit fuzz e2e bench

test: check-format vet unit fuzz e2e

check-format:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	cd internal/e2e && $(GO) vet ./...

# The race detector is on for every unit test, examples included.
unit:
	$(GO) test -race -count=1 ./...

# Short fuzz runs: the grading function is total, and a stream never panics
# on whatever events a server sends.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzGrade$$' -fuzztime $(FUZZTIME) ./watch/
	$(GO) test -run '^$$' -fuzz '^FuzzStreamEvents$$' -fuzztime $(FUZZTIME) ./watch/

# End-to-end tests against a real kube-apiserver and etcd started inside the
# test binary (nested module internal/e2e). The first build on a fresh
# machine compiles Kubernetes: about 7 minutes. The full log goes to
# $(E2E_LOG); the console shows each test, its failures, and one summary
# line per scenario ("e2e: ...").
e2e:
	cd internal/e2e && $(GO) test -count=1 -v -timeout 40m ./... 2>&1 | tee $(E2E_LOG) | \
		grep --line-buffered -E '^(e2e:|=== RUN|--- |PASS|FAIL|ok )|_test\.go:[0-9]+:'

# Benchmarks are not part of `test`; the README records their figures.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 3 ./watch/
