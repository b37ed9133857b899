# One entry point for people and CI. Every target creates the virtual environment it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OUT := out
# pip builds the compiled kernels (native/, Rust) with cargo: rustup's, where rustup puts it.
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: setup example test lint docs chromium clean bench bench-signatures bench-profile bench-engine bench-streaming bench-state \
	bench-popularity bench-dense bench-retrieval bench-index bench-floor bench-report

$(STAMP): pyproject.toml constraints.txt native/Cargo.toml native/Cargo.lock native/src/*.rs native/src/*/*.rs
	@command -v cargo >/dev/null || { echo "cargo not found: the package's compiled kernels need Rust 1.85+ (rustup.rs)" >&2; exit 1; }
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

## Lint, type-check and run every test (the browser tests drive Debian's Chromium, installed when missing).
test: lint $(STAMP) chromium
	$(BIN)/pytest

## Build the documentation site (docs/, mkdocs.yml) into out/site; a broken link or name fails the build.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir $(OUT)/site

chromium:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium)

lint: $(STAMP)
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
## Rewrite docs/benchmarks.md from benchmarks/results/*.json without running anything.
bench-report: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.report
bench: bench-signatures bench-profile bench-engine bench-streaming bench-state bench-popularity bench-dense \
	bench-retrieval bench-index bench-floor

clean:
	rm -rf $(OUT) .pytest_cache .mypy_cache .ruff_cache .hypothesis
