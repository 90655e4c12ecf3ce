# The two commands a newcomer needs:
#   make demo   - elastic training through injected preemptions, with a report
#   make test   - every test: the release build, then ASan+UBSan, then TSan
# Both install the Debian packages they need first (scripts/install-deps.sh).

BUILD      ?= build
JOBS       ?= $(shell nproc)
CMAKE_GEN  := -G Ninja
CTEST_ARGS ?= --output-on-failure --timeout 600

.PHONY: all deps build build-asan build-tsan test test-release test-asan test-tsan demo bench clean format

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

build-asan: deps
	@cmake -S . -B $(BUILD)-asan $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DTIDE_SANITIZE=address,undefined >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)

build-tsan: deps
	@cmake -S . -B $(BUILD)-tsan $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DTIDE_SANITIZE=thread >/dev/null
	@cmake --build $(BUILD)-tsan -j $(JOBS)

test-release: build
	cd $(BUILD) && ctest $(CTEST_ARGS)

# The sanitizer passes run every tier except the Kubernetes one (which the release
# pass covers; its cost is the control plane, not Tide's code).
test-asan: build-asan
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest $(CTEST_ARGS) -LE 'k8s|bench'

test-tsan: build-tsan
	cd $(BUILD)-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest $(CTEST_ARGS) -L tsan

test: test-release test-asan test-tsan

demo: build
	@scripts/demo.sh $(BUILD)

bench: build
	@bench/run-all.sh $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan
