# Coffer — the two commands: `make demo` and `make test`. Both install libsodium when missing.
SWIFT        ?= swift
STRICT       := -Xswiftc -warnings-as-errors
# Test output as a person reads it; CI reads `swift test`'s closing lines.
TEST_FLAGS   ?=
# `make test` builds every optional integration (package traits, see README "Integrations");
# `make test-tsan` builds the core alone, which also proves the core needs none of them.
TRAITS       ?= --enable-all-traits
# Who may import what (docs/ARCHITECTURE.md): SwiftPM refuses an import of a package target that
# is not among the importer's dependencies, even transitive ones; scripts/check-imports.py
# refuses one that is not among its direct dependencies (`coffer` importing CofferCrypto).
IMPORT_CHECK := --explicit-target-dependency-import-check error

.PHONY: all deps postgres-deps test-tools build install check-release-hooks test test-fast test-tsan demo demo-fleet docs bench bench-postgres bench-check stress fuzz format clean

all: build

deps:
	@./scripts/install-deps.sh

## PostgreSQL's server programs, for the CofferPostgres tests (each test process starts a
## throwaway cluster of its own in a temporary directory) and `make demo-fleet`.
postgres-deps:
	@./scripts/install-postgres.sh

build: deps
	./scripts/check-imports.py
	$(SWIFT) build $(STRICT) $(IMPORT_CHECK)

## `make install PREFIX=/usr/local` (DESTDIR honoured): the release binary, with every
## integration, and its manual page and bash, zsh and fish completions, generated from the
## command definitions (scripts/install.sh, scripts/man-page.py).
PREFIX       ?= /usr/local
install: deps
	$(SWIFT) build -c release $(STRICT) $(TRAITS) --product coffer
	$(call no-test-hooks,$$($(SWIFT) build -c release $(TRAITS) --show-bin-path)/coffer)
	./scripts/install.sh "$$($(SWIFT) build -c release $(TRAITS) --show-bin-path)/coffer" "$(DESTDIR)$(PREFIX)"

## The test hooks (COFFER_TEST_*) are compiled into debug builds only (Package.swift): a release
## binary that names one would honour it. `make install` refuses such a binary; CI checks the
## release build of `coffer` alone (no traits: the cheapest release build there is).
no-test-hooks = @if grep -q -a COFFER_TEST_ "$(1)"; then \
	echo "coffer: $(1) contains a COFFER_TEST_ hook: not a release build" >&2; exit 1; fi
check-release-hooks: deps
	$(SWIFT) build -c release $(STRICT) --product coffer
	$(call no-test-hooks,$$($(SWIFT) build -c release --show-bin-path)/coffer)

## git's own test of external credential helpers (t/t0303-credential-external.sh) against
## git-credential-coffer, from git's source tree at the installed git's version in ../git
## (scripts/test-git-credential.sh says how to get it); `make test` needs no network and no tree.
test-git-credential:
	./scripts/test-git-credential.sh

## age, keyctl and gpg, which the CLI tests run for real (scripts/install-test-tools.sh).
test-tools:
	@./scripts/install-test-tools.sh

## Every test, built with warnings as errors (with TRAITS, the CofferPostgres tests against a
## real server started by the tests themselves).
test: deps postgres-deps test-tools
	@# PyNaCl lets the independent vault reader (Tools/vault-reader.py) open what Coffer wrote;
	@# the vault tests that run it fail without it (test-tools installs python3-nacl on Debian).
	@python3 -c 'import nacl' 2>/dev/null || python3 -m pip install -q pynacl >/dev/null 2>&1 || \
		echo "coffer: PyNaCl is missing and pip could not install it: the independent-reader tests will fail" >&2
	./scripts/check-imports.py
	./scripts/check-doc-references.py
	$(SWIFT) build --build-tests $(STRICT) $(TRAITS) $(IMPORT_CHECK)
	@bin=$$($(SWIFT) build --show-bin-path $(TRAITS)) || exit 1; \
	$(SWIFT) test --skip-build $(TRAITS) $(TEST_FLAGS) --skip '$(OWN_PROCESS)'; rest=$$?; \
	echo "== $(OWN_PROCESS) but $(ONE_AT_A_TIME), in a test process of their own, after the rest:"; \
	NO_COLOR=1 "$$bin/CofferPackageTests.xctest" --testing-library swift-testing --filter '$(OWN_PROCESS)' \
		--skip '$(ONE_AT_A_TIME)'; status=$$?; \
	echo "== $(ONE_AT_A_TIME), one test at a time:"; \
	NO_COLOR=1 "$$bin/CofferPackageTests.xctest" --testing-library swift-testing --no-parallel \
		--filter '$(ONE_AT_A_TIME)'; alone=$$?; \
	[ $$rest -eq 0 ] && [ $$status -eq 0 ] && [ $$alone -eq 0 ]

## The PostgreSQL tests run in a test process of their own, after the rest. Swift Testing runs
## synchronous tests on the cooperative pool (2 threads on 2 cores): in one process, synchronous
## tests (kill -9 loops, coffer runs) held both threads for seconds, so a PostgreSQL test's await
## resumed after its statement deadline (3 s, 11 s) though the server had answered, and CI failed
## at random. The second process runs the test bundle itself: a second `swift test` would wait
## for the first's hold on the build folder. (All of them are Swift Testing tests.) It ran beside
## the rest until a clean-clone run at 5e4d186: the rest's 761 tests took both cores for six
## minutes, the PostgreSQL process took 360 s instead of 210 s alone, and 12 of its deadlines
## (2 s, 11 s) passed though the server was up. After the rest, it costs about four minutes more.
OWN_PROCESS := CofferPostgresTests

## Then, in a third process and one test at a time, the suites that stop, restore or kill the
## server of a cluster of their own and bound the calls that meet it (2-3 s deadlines). Run beside
## the other 43, which keep both cores busy for two and a half minutes (a 300-machine fleet, 900
## contended updates, backends terminated every 0.1 s), two of them missed a deadline in three
## clean-clone runs at e89e8d0 though the server had answered: a read was answered by a backend
## stopped with SIGSTOP only after the statement's deadline, a restored server's answer came 3 s
## late. Alone they take 78 s here (30 tests); the other 43 take 151 s, the 73 together 186 s.
ONE_AT_A_TIME := CofferPostgresTests\.(AccessTests|DeadlineTests|FailureTests|FollowingTests|VaultFollowingTests)

## The inner loop, a few minutes: the library's tests with no traits (no PostgreSQL server, no
## integration, nothing of swift-nio or BoringSSL to build), in .build-fast so it never
## invalidates `make test`'s build, and without the suites whose work is spawning processes: the
## CLI's (each test runs coffer), the kill -9 crash loops, counters across processes, and memory
## hygiene's children (a few other tests still start one helper process). `make test` still runs everything; README.md's "Tests in tiers" says which runs what.
FAST_SKIP := CofferCLITests|CrashLoopTests|CounterStressTests|MemoryHygieneTests
test-fast: deps
	$(SWIFT) build --build-tests $(STRICT) --scratch-path .build-fast
	$(SWIFT) test --skip-build --scratch-path .build-fast --skip '$(FAST_SKIP)'

## The tests again under ThreadSanitizer (a separate build folder, no traits), for what TSan can
## see: data races between the threads of one process. Left out:
## - the suites whose work is other processes (TSan instruments one address space and never sees
##   between processes, and each child under TSan costs seconds of CPU): the CLI's, but for the
##   ones that test `coffer run`'s threads and signals (RunTests, JobControlTests, TerminalTests,
##   which stay); the kill -9 crash loops; counters across processes;
## - the memory-hygiene children: TSan replaces `mlock` with a no-op and handles SIGSEGV itself, so
##   a test that counts lock failures or expects a guard-page SIGSEGV measures TSan there (and its
##   memory scan child hangs under TSan);
## - single-threaded loops that are only CPU: every byte of a vault flipped and opened (16,000
##   opens; the last test to end under TSan, 40 s after the rest);
## - the test that cuts a mapped store file to nothing: under TSan the SIGBUS of the guarded load
##   of its header is not handed to Coffer's handler (the process dies of it).
## All of them run in `make test`. With these out the TSan run took 394 s here, 586 s with them.
TSAN_SKIP := MemoryHygieneTests|CrashLoopTests|CounterStressTests|everyByteFlipIsDetectedOrHarmless|aFileCutToNothingUnderTheMappingFailsTheWriteNotTheProcess|CofferCLITests\.(ArgumentTests|BenchCommandTests|BindMountTests|CLIAttackTests|CommandTests|DefaultsTests|DockerCredentialHelperTests|ExitStatusOfFormatErrorsTests|FilePlacementTests|GenerateTests|GitCredentialHelperTests|HardeningTests|IdentityTests|ImportExportTests|ImportMemoryTests|InjectTests|InstallTests|KeyFileTests|MessageTests|OutputMaskerTests|SituationTests|UnlockTests|VaultLocationTests|VersionTests)
test-tsan: deps
	$(SWIFT) build --build-tests --sanitize=thread --scratch-path .build-tsan $(STRICT) $(IMPORT_CHECK)
	TSAN_OPTIONS=halt_on_error=1 $(SWIFT) test --skip-build --sanitize=thread --scratch-path .build-tsan \
		--skip '$(TSAN_SKIP)'

## The main job: a guided tour on a temporary vault (no set-up, no prompt): `coffer-demo`, a
## developer tool (not installed) that runs the `coffer` built beside it.
demo: deps
	$(SWIFT) build $(STRICT) --product coffer
	$(SWIFT) build $(STRICT) --product coffer-demo
	$(SWIFT) run --skip-build coffer-demo

## The documentation catalog (Sources/Coffer/Coffer.docc) with swift-docc-plugin, warnings as
## errors, in its own build folder so it never invalidates the test build.
DOCS_OUTPUT ?= .build-docs/Coffer.doccarchive
docs: deps
	$(SWIFT) package --scratch-path .build-docs --allow-writing-to-directory .build-docs \
		generate-documentation --target Coffer --warnings-as-errors --output-path $(DOCS_OUTPUT)

## Two processes' models converge on a secret that `coffer` rotates, through a throwaway
## PostgreSQL server (scripts/demo-fleet.sh, which runs inside scripts/with-postgres.sh).
demo-fleet: deps postgres-deps
	$(SWIFT) build $(STRICT) $(TRAITS) --product coffer
	$(SWIFT) build $(STRICT) $(TRAITS) --product CofferTestHelper
	./scripts/demo-fleet.sh

## The fleet store's figures (BENCHMARKS.md, "PostgreSQL"): `coffer-bench postgres` (the
## developers' benchmark suite, not installed) against a throwaway server on loopback (default
## settings: fsync and synchronous_commit on).
bench-postgres: deps postgres-deps
	$(SWIFT) build -c release $(TRAITS) --product coffer-bench
	./scripts/with-postgres.sh "$$($(SWIFT) build -c release $(TRAITS) --show-bin-path)/coffer-bench" postgres

## The benchmark suite (nested package, ordo-one/benchmark; installs SQLite and LMDB, its peers).
bench: deps
	@./scripts/install-bench-deps.sh
	cd Benchmarks && $(SWIFT) package --allow-writing-to-directory .benchmarkBaselines benchmark

## Fails when a benchmark regresses past the thresholds checked in under Benchmarks/Thresholds.
## `swift package` exits 1 both on a regression and when there are only improvements; the
## latter passes here (refresh Thresholds/ with `benchmark thresholds update`).
bench-check: deps
	@./scripts/install-bench-deps.sh
	@mkdir -p Benchmarks/.build
	cd Benchmarks && { $(SWIFT) package benchmark thresholds check >.build/bench-check.log 2>&1; status=$$?; \
		grep -v '\[1A' .build/bench-check.log; \
		if [ $$status -ne 0 ] && grep -q benchmarkThresholdImprovement .build/bench-check.log \
			&& ! grep -q benchmarkThresholdRegression .build/bench-check.log; then \
			echo "bench-check: only improvements"; status=0; fi; \
		exit $$status; }

## The crash, power-loss and multi-process tests at full count (see RELIABILITY.md).
STRESS_ITERATIONS ?= 1000
stress: deps
	$(SWIFT) build --build-tests $(STRICT)
	COFFER_STRESS_ITERATIONS=$(STRESS_ITERATIONS) $(SWIFT) test --skip-build $(TEST_FLAGS) \
		--filter 'CrashLoopTests|PowerLossTests|ReliabilityFaultTests|CounterStressTests|TamperBitTests'

## libFuzzer on each target, release with AddressSanitizer (RELIABILITY.md §10): the full count
## of FUZZ_RUNS executions each by default (10 million: about 1 h 20 min on 2 cores, one target
## after the other), or FUZZ_SECONDS each when that is set (CI: `make fuzz FUZZ_SECONDS=10`).
FUZZ_RUNS    ?= 10000000
FUZZ_SECONDS ?=
FUZZ_LIMIT   = $(if $(FUZZ_SECONDS),-max_total_time=$(FUZZ_SECONDS),-runs=$(FUZZ_RUNS))
FUZZ_TARGETS ?= frames header vault
FUZZ_FLAGS   := -c release --scratch-path .build-fuzz -Xswiftc -sanitize=fuzzer,address -Xswiftc -use-ld=lld \
	-Xswiftc -DCOFFER_LIBFUZZER
fuzz: deps
	$(SWIFT) build $(FUZZ_FLAGS) --product CofferFuzz
	@for t in $(FUZZ_TARGETS); do \
		mkdir -p .build-fuzz/corpus/$$t .build-fuzz/artifacts/$$t || exit 1; \
		echo "== fuzz $$t ($(FUZZ_LIMIT))"; \
		SWIFT_BACKTRACE=enable=no .build-fuzz/release/CofferFuzz $$t -malloc_limit_mb=64 -rss_limit_mb=2048 \
			-timeout=10 -max_len=9000 $(FUZZ_LIMIT) -print_final_stats=1 \
			-artifact_prefix=.build-fuzz/artifacts/$$t/ .build-fuzz/corpus/$$t Fuzz/corpus/$$t \
			> .build-fuzz/fuzz-$$t.log 2>&1; status=$$?; \
		grep -E '^(stat::|SUMMARY|Done )|ERROR|crash-|timeout-|oom-|leak-' .build-fuzz/fuzz-$$t.log; \
		[ $$status -eq 0 ] || { echo "fuzz $$t failed ($$status): .build-fuzz/fuzz-$$t.log"; exit 1; }; \
	done

format:
	$(SWIFT) format --in-place --recursive --configuration .swift-format Sources Tests

clean:
	rm -rf .build .build-tsan
