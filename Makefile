# One entry point for people and CI. Every target creates the virtual environment it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT := out
# pip builds the compiled kernels (native/, Rust) with cargo where it finds one: rustup's, where rustup puts it.
export PATH := $(HOME)/.cargo/bin:$(PATH)
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock $(shell find native -name '*.rs' -o -name Cargo.toml | grep -v target)

.PHONY: setup example test lint docs native-toolchain wheel chromium postgresql clean bench bench-signatures bench-profile \
	bench-engine bench-streaming bench-state bench-popularity bench-dense bench-retrieval bench-index bench-floor bench-cdc \
	bench-convert bench-rebuild bench-burst bench-failover bench-copies bench-lineages bench-report

# Without cargo the package installs without its compiled kernels and runs its Python ones (the same results, slower).
$(STAMP): pyproject.toml constraints.txt $(NATIVE_SOURCES)
	@command -v cargo >/dev/null || echo "cargo not found: installing without the compiled kernels, so the engine runs in Python (the same results, slower); Rust 1.85+ (rustup.rs) builds them" >&2
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

## Run the embedded engine on the bundled example feed; outputs in out/example-outputs.jsonl.
example: $(STAMP)
	rm -rf $(OUT)/example-state $(OUT)/example-outputs.jsonl
	mkdir -p $(OUT)
	$(BIN)/streamdedup run examples/feed.jsonl --state $(OUT)/example-state \
		--out $(OUT)/example-outputs.jsonl --batch-size 1

## Lint, type-check, run the compiled kernels' own tests (cargo test) and every test (the browser tests drive Debian's
## Chromium, installed when missing), then the engine's tests again on its Python kernels, which must give what the
## compiled ones give.
test: lint $(STAMP) chromium postgresql
	cd native && cargo test --locked --quiet -p streamdedup-kernels
	$(BIN)/pytest
	STREAMDEDUP_KERNELS=python $(BIN)/pytest -q tests/unit tests/contract tests/simulation

## The tests compare the compiled kernels with the Python ones, so they need the compiled ones built.
native-toolchain: $(STAMP)
	@command -v cargo >/dev/null || { echo "make test and make lint need cargo (Rust 1.85+, rustup.rs): the tests compare the compiled kernels with the Python ones" >&2; exit 1; }
	@$(BIN)/python -c "from streamdedup.core import kernels; assert kernels.available(), 'the compiled kernels did not build: pip install -e . shows why'"

## Build the wheel into dist/: the compiled kernels included, one wheel for CPython 3.11+ (stable ABI), no compiler
## needed to install it. The Dockerfile builds its image from it.
wheel:
	@command -v cargo >/dev/null || { echo "make wheel needs cargo (Rust 1.85+, rustup.rs)" >&2; exit 1; }
	rm -rf dist build
	$(PYTHON) -m pip wheel --quiet --no-deps --wheel-dir dist .
	$(PYTHON) -c "import glob, zipfile; [w] = glob.glob('dist/streamdedup-*.whl'); names = zipfile.ZipFile(w).namelist(); \
		assert any('/_native.' in n for n in names), w + ' has no compiled kernels: the build above says why'; print(w)"

## Build the documentation site (docs/, mkdocs.yml) into out/site; a broken link or name fails the build.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir $(OUT)/site

chromium:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium)

# tests/integration/test_connect.py runs a PostgreSQL server of its own (deploy/postgres/postgres.sh).
postgresql:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v pg_ctl >/dev/null || \
		(apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql)

lint: $(STAMP) native-toolchain
	$(BIN)/ruff check streamdedup tests examples benchmarks
	$(BIN)/ruff format --check streamdedup tests examples benchmarks
	$(BIN)/mypy
	cd native && cargo fmt --check && cargo clippy --release --locked --quiet -- -D warnings

## Benchmarks (never part of `make test`); each rewrites docs/benchmarks.md.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench-signatures: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.signatures
bench-profile: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.profile
bench-engine: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.engine
bench-streaming: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.streaming
bench-state: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.state
bench-popularity: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.popularity
bench-dense: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.dense
bench-retrieval: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.retrieval
bench-index: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.index
bench-floor: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.floor --peer
## A database's deletes and ACL changes to the index: PostgreSQL, Kafka Connect with Debezium, the broker, a worker
## and `index --follow`, all started and stopped by the benchmark (Java 17, Maven and Debian's postgresql needed).
bench-cdc: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.cdc_latency
## PDF, DOCX, PPTX, XLSX and cp1252 text beside the same texts in Markdown: conversion alone and `streamdedup run`.
bench-convert: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.convert_formats
## A state rebuilt under threshold=0.85 from the retained record of the Django run, beside that run and the feed
## run under the new threshold, all from launch.
bench-rebuild: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.rebuild
## 400 documents of 20 chunks produced at once to a running worker, against `streamdedup run` on the same events.
bench-burst: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.burst
## Failover: lag back to 0 after a worker's SIGKILL and after a 20 s broker outage, on a broker of its own that it
## stops and starts (STREAMDEDUP_BENCH_KAFKA_PORT when 29092 is taken).
bench-failover: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.failover
## The Django releases' folder where most chunks are copies: `streamdedup run` and the seed articles' datasketch loop,
## both from launch, interleaved rounds; the output's bytes by topic, rewrite and audit kind.
bench-copies: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.copies
## Semantic flags of `streamdedup index` on two Django releases, without and with a lineage rule.
bench-lineages: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.lineages
## Rewrite docs/benchmarks.md from benchmarks/results/*.json without running anything.
bench-report: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.report
bench: bench-signatures bench-profile bench-engine bench-streaming bench-state bench-popularity bench-dense \
	bench-retrieval bench-index bench-floor bench-convert bench-rebuild bench-burst bench-failover bench-copies \
	bench-lineages

clean:
	rm -rf $(OUT) .pytest_cache .mypy_cache .ruff_cache .hypothesis
