# swverbs top-level targets (README names them):
#   make demo    build, then run the completion-counter demo on the default loopback device
#   make test    install test dependencies (as root), then build and run every test:
#                plain, AddressSanitizer+UBSan (full suite), ThreadSanitizer (threaded tests),
#                then the libFuzzer targets for a bounded time (clang; build-fuzz/)
#   make build   build only (build/)          make bench   run the benchmarks
#   make install build, then install under PREFIX (default /usr/local; DESTDIR honoured)
#   make deb     build the Debian package build-deb/swverbs_<version>_<arch>.deb
#   make format  clang-format the sources     make clean   remove build trees
JOBS   ?= $(shell nproc)
CTEST  := ctest --output-on-failure --timeout 300 -j $(JOBS)
CMAKE  := cmake -G Ninja -Wno-dev

PREFIX ?= /usr/local

.PHONY: all build install deb demo test test-plain test-asan test-tsan test-fuzz bench format clean deps

all: build

deps:
	@tools/install-deps.sh build

build: deps
	@$(CMAKE) -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build

install: build
	DESTDIR="$(DESTDIR)" cmake --install build --prefix "$(PREFIX)"

deb: deps
	@tools/make-deb.sh build-deb build-deb

demo: build
	build/tools/swverbs-demo

test: 
	@tools/install-deps.sh test
	@$(MAKE) --no-print-directory test-plain test-asan test-tsan test-fuzz
	@echo "make test: all suites passed"

test-plain: deps
	$(CMAKE) -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build build
	$(CTEST) --test-dir build

test-asan: deps
	$(CMAKE) -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSWV_SANITIZE=address,undefined >/dev/null
	cmake --build build-asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		$(CTEST) --test-dir build-asan

test-tsan: deps
	$(CMAKE) -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DSWV_SANITIZE=thread >/dev/null
	cmake --build build-tsan
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 $(CTEST) --test-dir build-tsan -L threaded

# libFuzzer needs clang and its runtime (Debian: clang, libclang-rt-14-dev, which
# tools/install-deps.sh test installs as root). Without them the stage says so loudly
# and skips, as tests whose tools are missing do.
FUZZ_CC ?= clang
test-fuzz: deps
	@if printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' | \
	    $(FUZZ_CC) -x c -fsanitize=fuzzer,address,undefined -o /dev/null - 2>/dev/null; then \
		$(CMAKE) -S . -B build-fuzz -DCMAKE_C_COMPILER=$(FUZZ_CC) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
			-DSWV_FUZZ=ON >/dev/null && \
		cmake --build build-fuzz && \
		$(CTEST) --test-dir build-fuzz -L fuzz; \
	else \
		echo "make test-fuzz: WARNING: $(FUZZ_CC) cannot build libFuzzer targets" \
		     "(clang + libclang-rt-14-dev): fuzz tests NOT run" >&2; \
	fi

# The anchors the scripts compare against (sockperf, qperf, UCX, libfabric) come with the
# test dependencies. bench/bench_cntr_runs.sh runs bench_cntr five times on each path
# (intra-host link, forced UDP).
bench: build
	@./tools/install-deps.sh test
	@for b in build/bench/bench_*; do [ -x "$$b" ] && "$$b"; done
	@for s in bench/*.sh; do bash "$$s" build; done

format:
	@find src include tools tests bench -name '*.[ch]' | xargs clang-format -i

clean:
	rm -rf build build-asan build-tsan build-fuzz build-deb
