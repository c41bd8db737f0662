# velvetrope — see README.md.
SHELL := /bin/bash
GO ?= go
PKGS := ./...
BIN := bin/velvetrope
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
STATICCHECK_VERSION := v0.8.2

.PHONY: run build test test-unit adversarial fuzz-short bench bench-compare lint compose-check services-up services-down proto clean

## run: the whole product on embedded in-memory backends (velvetrope dev)
run:
	$(GO) run ./cmd/velvetrope dev

## build: the binary in bin/
build:
	$(GO) build -ldflags "-X main.buildVersion=$(VERSION)" -o $(BIN) ./cmd/velvetrope

## test: validate docker-compose.yml, start the real services, run every test with -race, stop what was started,
## then fuzz-short; files tests keep (the dashboard screenshot) land in .test-output/_artifacts/
test: compose-check
	@scripts/services.sh up || { scripts/services.sh down; exit 1; }
	@mkdir -p .test-output
	@set -o pipefail; source .services.env && $(GO) test -race -count=1 -artifacts -outputdir $(CURDIR)/.test-output $(PKGS); status=$$?; \
		scripts/services.sh down; [ $$status -eq 0 ] || exit $$status
	@$(MAKE) --no-print-directory fuzz-short

# The fuzz targets of the parsers every client's request reaches on the decision path (package:target): /v1/check,
# Envoy's /json, the gRPC wire parser, the strict JSON scanner under the first two, a deferred request's path (checked
# on /v1/check and in the middleware) and the client address headers the middleware reads. The other targets
# (docs/testing.md) run their seeds in every go test and are fuzzed by hand.
FUZZ_TARGETS := ./internal/httpapi:FuzzCheckHandler ./internal/httpapi:FuzzChargeHandler ./ratelimit:FuzzParseLease ./rls:FuzzJSONHandler ./rls:FuzzWireParse ./internal/strictjson:FuzzDecode \
	./deferred:FuzzCheckPath ./middleware:FuzzClientIP ./events:FuzzDecodeRecord
FUZZTIME ?= 10s

## fuzz-short: each of FUZZ_TARGETS for FUZZTIME (10s); a failing input is written under the package's testdata/fuzz/
## (commit it: it becomes a seed). Minimizing a new input is capped at 2s so that the time goes to fuzzing. Go's own
## deadline race at the end of -fuzztime (no failing input) is run once more (scripts/fuzz.sh).
fuzz-short:
	@GO=$(GO) scripts/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

## adversarial: the adversarial suite alone: every attack the product was found to fail, against the real binary
## (internal/adversarial; make test runs it too). With the services up (source .services.env) none skips.
adversarial:
	$(GO) test -race -count=1 ./internal/adversarial/

## test-unit: the tests that need no services (integration tests skip)
test-unit:
	$(GO) test -race -count=1 $(PKGS)

## bench: every benchmark, with allocations
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# The peers of bench-compare: tools we run, installed from the Go module proxy into bin/, never part of the repository.
ENVOY_RATELIMIT := github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36
GUBERNATOR := github.com/gubernator-io/gubernator/v2/cmd/gubernator@v2.13.0

## bench-compare: velvetrope beside envoy's ratelimit and gubernator under the same gRPC load (velvetrope bench);
## rewrites the comparison in docs/benchmarks.md, docs/bench-compare.json and docs/bench-compare.png.
## COMPARE_FLAGS passes options to bench/compare (e.g. COMPARE_FLAGS="--keys 1000 --conns 4").
bench-compare: build
	GOBIN=$(CURDIR)/bin $(GO) install $(ENVOY_RATELIMIT)
	GOBIN=$(CURDIR)/bin $(GO) install $(GUBERNATOR)
	@scripts/services.sh up || { scripts/services.sh down; exit 1; }
	@source .services.env && $(GO) run ./bench/compare --bin bin $(COMPARE_FLAGS); status=$$?; \
		scripts/services.sh down; exit $$status

## lint: formatting, vet and staticcheck
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

## compose-check: validate docker-compose.yml with Debian's docker-compose (no Docker engine needed)
compose-check:
	@command -v docker-compose >/dev/null || { sudo -n true 2>/dev/null && SUDO=sudo; $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends docker-compose >/dev/null; }
	docker-compose -f docker-compose.yml config -q

## services-up / services-down: the real Redis, Redis Cluster, Kafka and ClickHouse on 127.0.0.1
services-up:
	scripts/services.sh up

services-down:
	scripts/services.sh down

clean:
	rm -rf bin

PROTOC_GEN_GO_VERSION := v1.36.12

## proto: regenerate events/v1 Go code (protoc from Debian's protobuf-compiler)
proto:
	@command -v protoc >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends protobuf-compiler; }
	GOBIN=$(CURDIR)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	PATH=$(CURDIR)/bin:$$PATH protoc --proto_path=events/v1 --go_out=events/v1 --go_opt=paths=source_relative events/v1/delta.proto
