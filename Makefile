# swverbs top-level targets (README names them):
#   make demo    build, then run the completion-counter demo on the default loopback device
#   make test    install test dependencies (as root), then build and run every test:
#                plain, AddressSanitizer+UBSan (full suite), ThreadSanitizer (threaded tests)
#   make build   build only (build/)          make bench   run the benchmarks
#   make format  clang-format the sources     make clean   remove build trees
JOBS   ?= $(shell nproc)
CTEST  := ctest --output-on-failure --timeout 300 -j $(JOBS)
CMAKE  := cmake -G Ninja -Wno-dev

.PHONY: all build demo test test-plain test-asan test-tsan bench format clean deps

all: build

deps:
	@tools/install-deps.sh build

build: deps
	@$(CMAKE) -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build

demo: build
	build/tools/swverbs-demo

test: 
	@tools/install-deps.sh test
	@$(MAKE) --no-print-directory test-plain test-asan test-tsan
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

bench: build
	@for b in build/bench/bench_*; do [ -x "$$b" ] && "$$b"; done

format:
	@find src include tools tests bench -name '*.[ch]' | xargs clang-format -i

clean:
	rm -rf build build-asan build-tsan
