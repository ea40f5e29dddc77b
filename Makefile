# draftflow — the two commands a newcomer needs:
#   make demo   run the pipeline end to end (embedded broker + simulated SGLang + bundled sample)
#   make test   the whole test suite
SHELL := /bin/bash
GO ?= go
PYTHON ?= python3
BIN := bin/draftflow
BENCH_BIN := bin/draftflow-bench
DEMO_OUT ?= out/demo
export DRAFTFLOW_CACHE ?= $(HOME)/.cache/draftflow
GOTEST_FLAGS ?= -timeout 45m
# RACE=1 runs the Go tests under the race detector (.ci/run does).
ifeq ($(RACE),1)
override GOTEST_FLAGS += -race
endif

.PHONY: all build demo test test-go test-python test-integration deps deps-go deps-python bench bench-kafka scale rebalance fuzz chaos vet fmt kafka-up kafka-down sglang-up sglang-down test-sglang test-capture test-train bench-train bench-sglang clean

all: build

# draftflow is the product; draftflow-bench the benchmarks (make bench, make bench-sglang), built beside it.
build:
	$(GO) build -o $(BIN) ./cmd/draftflow
	$(GO) build -o $(BENCH_BIN) ./cmd/draftflow-bench

## demo: the whole pipeline on the bundled sample, in one process, nothing from outside.
demo: build
	$(BIN) run --input testdata/sample/conversations.jsonl --out $(DEMO_OUT)

deps: deps-go deps-python

deps-go:
	$(GO) mod download
	cd deploy && $(GO) mod download

# Reference implementations and real readers the tests compare against (pinned), and the trainers' wheels
# (SpecForge, speculators) whose own loading code the tests run: downloaded, not installed (requirements-trainers.txt).
deps-python:
	@$(PYTHON) -m pip install -q --disable-pip-version-check -r requirements-test.txt
	@mkdir -p "$(DRAFTFLOW_CACHE)/wheels" && $(PYTHON) -m pip download -q --disable-pip-version-check --no-deps \
	  --require-hashes -r requirements-trainers.txt -d "$(DRAFTFLOW_CACHE)/wheels"

## test: everything — Go unit, contract, conformance and end-to-end tests, then the Python reader tests.
test: deps vet test-go test-python

vet:
	$(GO) vet ./...
	cd deploy && $(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

# deploy/ is a module of its own (its test's compose and YAML loaders stay out of the main go.mod).
test-go:
	$(GO) test $(GOTEST_FLAGS) ./...
	cd deploy && $(GO) test $(GOTEST_FLAGS) ./...

test-python:
	PYTHONPATH=python $(PYTHON) -m pytest -q -p no:cacheprovider python/tests

## test-integration: every test of every package whose tests reach Kafka, again, against a real Apache Kafka broker
## started from Maven jars, with a SASL_SSL listener too (KAFKA_SASL_SSL=1) for the security tests
## (DRAFTFLOW_TEST_SASL_*). Those packages are the ones whose tests import kafka/kafkatest, where every test gets its
## broker (its TestBrokersComeFromKafkatest checks that no test file reaches one otherwise), so none is missed.
KAFKA_TEST_PACKAGES = $(GO) list -test -f '{{if .ForTest}}{{.ForTest}} {{join .Deps " "}}{{end}}' ./... | \
	  awk '/ github.com\/draftflow\/draftflow\/kafka\/kafkatest( |$$)/ { print $$1 }' | sort -u
test-integration: deps-go
	@set -eo pipefail; pkgs=$$($(KAFKA_TEST_PACKAGES)); \
	  test -n "$$pkgs" || { echo "no package's tests import kafka/kafkatest"; exit 1; }; \
	  addr=$$(KAFKA_SASL_SSL=1 bash deploy/kafka/kafka.sh up); \
	  trap 'bash deploy/kafka/kafka.sh down' EXIT; \
	  test -n "$$addr" || { echo "kafka.sh up printed no address"; exit 1; }; \
	  export $$(bash deploy/kafka/kafka.sh env); \
	  echo "real Kafka at $$addr, SASL_SSL at $$DRAFTFLOW_TEST_SASL_BROKERS; testing" $$pkgs; \
	  DRAFTFLOW_TEST_BROKERS=$$addr $(GO) test $(GOTEST_FLAGS) -count=1 $$pkgs

kafka-up:
	@bash deploy/kafka/kafka.sh up

kafka-down:
	@bash deploy/kafka/kafka.sh down

## sglang-up: the real SGLang server (sglang==0.5.23, installed into $(DRAFTFLOW_CACHE)/venv by the script) on this
## machine's CPU, serving a small random-weight Qwen3-shaped model made here; prints its URL. SGLANG_PORT picks the
## port (default: a free one), SGLANG_POOL its KV pool in tokens, SGLANG_ARGS more server arguments. sglang-down stops it.
SGLANG_POOL ?= 8192
sglang-up:
	@bash deploy/sglang/sglang.sh install >/dev/null
	@bash deploy/sglang/sglang.sh up --name make $(if $(SGLANG_PORT),--port $(SGLANG_PORT)) --pool $(SGLANG_POOL) -- $(SGLANG_ARGS)

sglang-down:
	@bash deploy/sglang/sglang.sh down --name make

## test-sglang: the live tier: draftflow's binary against the real SGLang 0.5.23 on this machine's CPU (at most two
## servers at once; see docs/sglang.md "Real SGLang without a GPU"). Installs the venv on first use; runs on its own, not beside
## the Go tests or Kafka. LIVE_RUN narrows it to some tests (go test -run).
test-sglang: deps-go
	@bash deploy/sglang/sglang.sh install >/dev/null
	@bash deploy/sglang/sglang.sh model >/dev/null
	PYTHON=$(PYTHON) DRAFTFLOW_LIVE_SGLANG=1 OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} $(GO) test -count=1 -p 1 -timeout 40m -v $(if $(LIVE_RUN),-run '$(LIVE_RUN)',-skip '$(CAPTURE_TESTS)') ./internal/livesglang/

## test-capture: EAGLE-3 feature capture against the real SGLang 0.5.23 on this machine's CPU (an aux-capture
## server and a final-state server, one at a time): captured features equal a transformers forward pass
## (docs/hidden-states.md). Separate from test-sglang so each tier stays within its time bound.
CAPTURE_TESTS := TestFeatures
test-capture: deps-go
	@bash deploy/sglang/sglang.sh install >/dev/null
	PYTHON=$(PYTHON) DRAFTFLOW_LIVE_SGLANG=1 OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} $(GO) test -count=1 -p 1 -timeout 30m -v -run '$(CAPTURE_TESTS)' ./internal/livesglang/

## test-train: `draftflow run` with capture on two live SGLang 0.5.23 servers (aux and final state; the latter
## also generates), `draftflow vocab`, the exports of draftflow_data.offline, the servers stopped, then SpecForge
## 0.2.0's own `specforge train` (offline, on this machine's CPU) and `specforge export --to sglang`; speculators
## 0.9's dataset loader reads the same rows back (docs/training.md). Installs the trainer venv (~40 MB over the
## SGLang venv) on first use; pins both cores for minutes: run it on its own.
test-train:
	@bash deploy/specforge/specforge.sh install >/dev/null
	DRAFTFLOW_TRAIN=1 OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} PYTHONPATH=python $(PYTHON) -m pytest -q -s -p no:cacheprovider python/tests/test_training.py python/tests/test_specforge_online.py

## bench-train: "regenerating pays", measured with SpecForge 0.2.0's own loop on this machine's CPU
## (docs/training.md): drafters from `draftflow run`'s regenerated rows and from the same chats' own replies
## (`run --replies keep`), same steps and seeds, judged on rows the target generated from other chats; medians over
## BENCH_TRAIN_SEEDS. Two live SGLang servers, then 3 x seeds trainings (~25 min): not in make bench or .ci/run.
BENCH_TRAIN_SEEDS ?= 0,1,2
bench-train:
	@bash deploy/specforge/specforge.sh install >/dev/null
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} PYTHONPATH=python $(PYTHON) deploy/specforge/bench_train.py regenerate --out out/bench-train --seeds $(BENCH_TRAIN_SEEDS) --json out/bench-train.json

## bench-sglang: the generate policies and SGLang's bench_serving against the real SGLang 0.5.23 on this machine's
## CPU, one server per pool, interleaved repeats (docs/performance.md; long: not in make bench or .ci/run).
## BENCH_SGLANG_ARGS sizes it (draftflow-bench sglang -h); the table goes to stdout, JSON to bench-sglang.json.
BENCH_SGLANG_ARGS ?= --pools 512,1024 --prompts 32 --new-tokens 24 --sweep ""
bench-sglang: build
	@bash deploy/sglang/sglang.sh install >/dev/null
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} $(BENCH_BIN) sglang --draftflow $(BIN) --json bench-sglang.json $(BENCH_SGLANG_ARGS)

## bench: the benchmarks whose figures docs/performance.md reports (bench-kafka adds the real-broker side).
bench: build
	$(BENCH_BIN) generate --plot bench-generate.svg
	$(BENCH_BIN) generate --multi-turn
	$(BENCH_BIN) generate --multi-turn --backlog 4
	$(BENCH_BIN) generate --multi-turn --conversations 150 --turns 4
	$(BENCH_BIN) pipeline $(if $(DRAFTFLOW_TEST_BROKERS),--brokers $(DRAFTFLOW_TEST_BROKERS))
	$(GO) test -run '^$$' -bench 'ShardEncode|JSONLZstd|TokenBounds|Flush|TokenCounting' -cpu 1 -benchtime 5x ./shard/ ./sink/
	bash stages/tokenize/tokenizer/bench.sh

bench-kafka: build
	@set -eo pipefail; addr=$$(bash deploy/kafka/kafka.sh up); \
	  trap 'bash deploy/kafka/kafka.sh down' EXIT; \
	  $(BENCH_BIN) pipeline --brokers $$addr --records 10000 --repeat 3

## scale: SCALE_N (default 2,000,000) small conversations through every stage as separate processes on a real
## Kafka broker; prints each stage's peak memory and the throughput (not in CI; docs/performance.md has the figures).
SCALE_N ?= 2000000
scale:
	SCALE_N=$(SCALE_N) bash internal/scalegen/scale.sh

## fuzz: every fuzz target (record codecs, dataset and settings parsers, Parquet reader, SGLang responses, chat
## templates, tokenizers, shard names) for FUZZTIME each; CI runs it briefly. A failure leaves its input in the
## package's testdata/fuzz, where `go test` replays it from then on.
FUZZTIME ?= 10s
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) bash internal/fuzz.sh

## chaos: the sample through ingest, tokenize, two generate replicas and the sink as separate processes on a real
## broker and two faulty simulated servers, while each stage is SIGKILLed CHAOS_ROUNDS times (default 2), the
## broker restarted (SIGTERM, SIGKILL) and the servers killed, at seeded random moments; every conversation must
## end up in the shards whole, each turn exactly once (DRAFTFLOW_CHAOS_SEED replays a run). .ci/run runs it.
CHAOS_ROUNDS ?= 2
chaos: deps-go
	@set -eo pipefail; export DRAFTFLOW_KAFKA_DIR=$${DRAFTFLOW_KAFKA_DIR:-/tmp/draftflow-chaos-kafka}; \
	  bash deploy/kafka/kafka.sh up >/dev/null; trap 'bash deploy/kafka/kafka.sh down' EXIT; \
	  DRAFTFLOW_CHAOS_ROUNDS=$(CHAOS_ROUNDS) DRAFTFLOW_CHAOS_KAFKA_DIR=$$DRAFTFLOW_KAFKA_DIR $(GO) test -count=1 -timeout 20m -run TestChaos -v ./cmd/draftflow/

## rebalance: what scaling generate out and in costs the fleet: two replicas (separate processes, real Kafka broker)
## keep two simulated servers busy in real time (requests of 1-20 s); after 2.5 minutes a third joins, 2.5 minutes
## later the first leaves (SIGTERM); prints the output tokens/s the minute before and after each event, per run and
## the median of REBALANCE_RUNS (default 3, ~8 minutes each), and fails if any work was redone. Not in CI.
## internal/scalegen/rebalance.sh is the shorter scenario that counts redone work only.
REBALANCE_RUNS ?= 3
rebalance: deps-go
	@set -eo pipefail; export DRAFTFLOW_KAFKA_DIR=$${DRAFTFLOW_KAFKA_DIR:-/tmp/draftflow-rebalance-kafka}; \
	  addr=$$(bash deploy/kafka/kafka.sh up | tail -1); trap 'bash deploy/kafka/kafka.sh down' EXIT; \
	  DRAFTFLOW_REBALANCE_BROKERS=$$addr DRAFTFLOW_REBALANCE_RUNS=$(REBALANCE_RUNS) \
	  DRAFTFLOW_REBALANCE_OUT=$${DRAFTFLOW_REBALANCE_OUT:-$(CURDIR)/out/rebalance} \
	  $(GO) test -count=1 -timeout 90m -run TestRebalanceThroughput -v ./cmd/draftflow/

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin out
