# `make test` is the one command that runs every check; .ci/run calls it.
# It needs only Go (see go.mod for the version) and network access to the Go
# module proxy: modules are downloaded on first use.

GO       ?= go
FUZZTIME ?= 20s

.PHONY: test check-format vet unit fuzz bench

test: check-format vet unit fuzz

check-format:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# The race detector is on for every unit test, examples included.
unit:
	$(GO) test -race -count=1 ./...

# Short fuzz runs: the grading function is total, and a stream never panics
# on whatever events a server sends.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzGrade$$' -fuzztime $(FUZZTIME) ./watch/
	$(GO) test -run '^$$' -fuzz '^FuzzStreamEvents$$' -fuzztime $(FUZZTIME) ./watch/

# Benchmarks are not part of `test`; the README records their figures.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 3 ./watch/
