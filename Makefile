# kvtier: the two commands a new machine needs are `make run` and `make test`.
# Both install missing Debian packages first (scripts/install-deps.sh, idempotent).

BUILD_DIR   ?= build
ASAN_DIR    ?= build-asan
TIDY_DIR    ?= build-tidy
TSAN_DIR    ?= build-tsan
FUZZ_DIR    ?= build-fuzz
FUZZ_SECONDS ?= 60
BUILD_TYPE  ?= RelWithDebInfo
# Debug info: -g1 keeps line tables and function names (backtraces, sanitizer reports,
# perf) and leaves out variable info, which cost a quarter of an -O2 build's compile
# time on the 2-core CI machine. DEBUG_INFO=-g for a debugger session. GCC's code is
# the same at every -g level, so benchmark figures do not depend on it.
DEBUG_INFO  ?= -g1
KVTIER_CUDA ?= AUTO
JOBS        ?= $(shell nproc)
ARGS        ?=

.PHONY: all deps configure build test run test-asan test-tsan fuzz tidy clean

all: build

deps:
	./scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DKVTIER_CUDA=$(KVTIER_CUDA) \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 $(DEBUG_INFO) -DNDEBUG" -DCMAKE_CXX_FLAGS_DEBUG=$(DEBUG_INFO)

# Leaves the CLI at build/bin/kvtier.
build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) --timeout 300

# The main job: kvtier up with local defaults (ARGS="--metrics-port 9500" to change them),
# the built-in chat workload replayed against it through the RPC, and the report
# (REPLAY_ARGS="--trace FILE" for another workload); then it stops. scripts/run.sh.
run: build
	./scripts/run.sh $(BUILD_DIR)/bin $(ARGS)

# AddressSanitizer + UBSan build of the whole tree (CUDA off: nvcc objects are not
# instrumented), with every test. Built with clang, whose -Wthread-safety proves the
# locking annotations at every compile (common/mutex.h), where the main tree is GCC's: two
# compilers' warnings, at no more build time.
test-asan: deps
	cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=$(DEBUG_INFO) -DKVTIER_SANITIZE=ON -DKVTIER_CUDA=OFF
	cmake --build $(ASAN_DIR) -j $(JOBS)
	ctest --test-dir $(ASAN_DIR) --output-on-failure -j $(JOBS) --timeout 600

# ThreadSanitizer over the threaded libraries' tests (tiers, data stream, worker storage and
# offload), built with GCC and CUDA off; scripts/tsan.sh lists them, and why the tests that
# cross KJ's executor are left out. Not in CI: 6 min 21 s from scratch on two cores.
test-tsan: deps
	cmake -S . -B $(TSAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DKVTIER_TSAN=ON -DKVTIER_CUDA=OFF \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 $(DEBUG_INFO) -DNDEBUG"
	./scripts/tsan.sh $(TSAN_DIR) $(JOBS)

# libFuzzer, with ASan and UBSan, over what kvtier parses from outside: block headers, trace
# lines, configuration and tokens files (the *_fuzz.cc targets; ctest replays their seeds
# in every tree). FUZZ_SECONDS each; scripts/fuzz.sh says where the corpus and any crash go.
fuzz: deps
	cmake -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 $(DEBUG_INFO)" \
	  -DKVTIER_SANITIZE=ON -DKVTIER_FUZZ=ON -DKVTIER_CUDA=OFF
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target kvtier_fuzzers
	./scripts/fuzz.sh $(FUZZ_DIR) $(FUZZ_SECONDS)

# clang-tidy over the production sources and our headers, with the checks .clang-tidy names
# (and the reasons for those it leaves off); fails on any warning. The tree is configured
# with clang for its compile database, and only the generated headers are made.
tidy: deps
	cmake -S . -B $(TIDY_DIR) -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DCMAKE_BUILD_TYPE=Debug -DKVTIER_CUDA=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
	cmake --build $(TIDY_DIR) --target kvtier_rpc_schema
	./scripts/tidy.sh $(TIDY_DIR) $(JOBS)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR) $(FUZZ_DIR) $(TIDY_DIR)
