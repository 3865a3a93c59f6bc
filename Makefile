# Coffer — the two commands: `make demo` and `make test`. Both install libsodium when missing.
SWIFT        ?= swift
STRICT       := -Xswiftc -warnings-as-errors
# Test output as a person reads it; CI reads `swift test`'s closing lines.
TEST_FLAGS   ?=

.PHONY: all deps build test test-tsan demo bench bench-check stress fuzz format clean

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	$(SWIFT) build $(STRICT)

## Every test, built with warnings as errors.
test: deps
	$(SWIFT) build --build-tests $(STRICT)
	$(SWIFT) test --skip-build $(TEST_FLAGS)

## The concurrency-sensitive suites again under ThreadSanitizer (a separate build folder).
test-tsan: deps
	$(SWIFT) build --build-tests --sanitize=thread --scratch-path .build-tsan $(STRICT)
	$(SWIFT) test --skip-build --sanitize=thread --scratch-path .build-tsan \
		--filter 'CofferStateTests|CofferStorageTests|CofferVaultTests'

## The main job: a guided tour on a temporary vault (no set-up, no prompt).
demo: deps
	$(SWIFT) build $(STRICT) --product coffer
	$(SWIFT) run --skip-build coffer demo

## The benchmark suite (nested package, ordo-one/benchmark).
bench: deps
	cd Benchmarks && $(SWIFT) package --allow-writing-to-directory .benchmarkBaselines benchmark

## Fails when a benchmark regresses past the thresholds checked in under Benchmarks/Thresholds.
bench-check: deps
	cd Benchmarks && $(SWIFT) package benchmark thresholds check

format:
	$(SWIFT) format --in-place --recursive --configuration .swift-format Sources Tests

clean:
	rm -rf .build .build-tsan
