# codeinterp — see README.md. `make run` starts the server; `make test` runs every test.

GO       ?= go
BIN      := bin
TOOLS    := $(abspath $(BIN)/tools)
BUF_VERSION          := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
BUF      := $(TOOLS)/buf
PROTOC_GEN_GO := $(TOOLS)/protoc-gen-go

# Packages whose tests make up `make test` (everything).
PKGS     := ./...
BENCH_COUNT ?= 5
FUZZTIME ?= 2m

.PHONY: all build run test test-unit test-e2e test-envoy bench fuzz lint proto proto-check tools clean

all: build

build:
	$(GO) build -o $(BIN)/extproc ./cmd/extproc

## run: start the server with the local bubblewrap sandbox and the configuration that goes with
## envoy/envoy.yaml (more flags: ARGS="--log-level debug ...").
RUN_CONFIG ?= envoy/codeinterp.yaml
run: build
	$(BIN)/extproc --config $(RUN_CONFIG) $(ARGS)

## test: vet, format check, and every test (unit, adversarial sandbox, Envoy harness, e2e) with -race.
test: lint
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

test-unit:
	$(GO) test -race -count=1 ./pkg/... ./cmd/... ./envoy/...

test-e2e:
	$(GO) test -race -count=1 ./test/e2e/...

## test-envoy: the e2e scenarios against a real Envoy (needs an `envoy` binary on PATH; skipped otherwise).
test-envoy:
	$(GO) test -count=1 -run '/real-envoy' -v ./test/e2e/

## bench: the benchmarks the issues ask for (medians over BENCH_COUNT runs).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) ./pkg/... ./test/e2e/... | tee $(BIN)/bench.txt

## fuzz: run every fuzz target for FUZZTIME each.
fuzz:
	@set -e; for pkg in $$($(GO) list ./pkg/...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

tools: $(BUF) $(PROTOC_GEN_GO)

$(BUF):
	GOBIN=$(TOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)

$(PROTOC_GEN_GO):
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

## proto: regenerate api/ Go code from the proto schema.
proto: tools
	$(BUF) lint
	PATH=$(TOOLS):$$PATH $(BUF) generate

## proto-check: buf lint, and fail if the checked-in generated code is stale.
proto-check: tools
	$(BUF) lint
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	PATH=$(TOOLS):$$PATH $(BUF) generate -o $$tmp; \
	if ! diff -r -x '*.proto' $$tmp/api api >/dev/null; then \
	  echo "generated code in api/ is stale: run 'make proto'"; diff -r -x '*.proto' $$tmp/api api | head -40; exit 1; fi; \
	echo "api/: generated code is up to date"

clean:
	rm -rf $(BIN)
