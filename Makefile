# replan — the two commands that matter on a fresh machine:
#   make demo   runs replan against a simulated 64-GPU cluster
#   make test   runs every test (unit, fuzz seeds, end-to-end where the host allows)

GO       ?= go
BIN      ?= bin/replan
PKGS     ?= ./...
SHARED   ?= ../shared
STATICCHECK_VERSION ?= v0.8.2

.PHONY: all build test bench lint fmt demo fuzz clean

all: build

build:
	$(GO) build -o $(BIN) .
	$(GO) build -ldflags "-s -w" -o $(dir $(BIN))replan-agent ./cmd/replan-agent

test:
	$(GO) test -count=1 -timeout 15m $(PKGS)

# Benchmarks print the issue targets as tables (ratios against baselines
# measured in the same run) and the Go benchmarks' ns/op.
bench: build
	$(GO) run . perf bench --data $(SHARED)/data/morphling
	$(GO) test -run '^$$' -bench . -benchtime 20x ./perf/...

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

fmt:
	gofmt -w .

demo:
	$(GO) run . demo

# Short fuzzing passes over every parser and the plan enumerator.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzEnumerate -fuzztime 30s ./perf/
	$(GO) test -run '^$$' -fuzz FuzzParsePlanSpec -fuzztime 30s ./perf/
	$(GO) test -run '^$$' -fuzz FuzzLoadArch -fuzztime 30s ./perf/
	$(GO) test -run '^$$' -fuzz FuzzProfile -fuzztime 30s ./dataset/

clean:
	rm -rf bin
