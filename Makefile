# sparsering — build, test and run.
#
#   make            build bin/sparsering (and bin/sparsering-exec, CUDA objects where nvcc exists) and the
#                   shared libraries of the Python package (python/): build/release/libsparsering{,_cuda}.so
#   make run        install missing packages, build, run the default what-if study
#   make test       install missing packages, build, run the test suite ("N passed, N failed")
#   make test SAN=1 the same under AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench      planner / simulator speed benchmarks (CPU)
#   make studies    run the standard what-if studies into notebooks-data/ (CSV + JSON sidecars)
#   make figures    execute the notebooks of notebooks-data/ headless and write their PNG files
#   make gpu-test   kernel tests against the CPU reference (GPU machine only)
#   make fuzz       every parser's fuzz harness under clang's libFuzzer, FUZZ_SECONDS (60) each
#
# Sources are found by folder (one concept a folder), so adding a .c file needs no edit here.

CC       := mpicc
NVCC     ?= $(shell command -v nvcc 2>/dev/null || (test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc))
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
GPU      ?= $(if $(NVCC),1,0)
CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80

OPT      := -O2
ifeq ($(SAN),1)
  BUILD  := build/san
  OPT    := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  GPU    := 0
else
  BUILD  := build/release
endif

CPPFLAGS := -I. -D_GNU_SOURCE
CFLAGS   := -std=c11 $(OPT) -fPIC -g -Wall -Wextra -Werror -Wno-unused-parameter -Wno-format-truncation -MMD -MP
LDFLAGS  := $(filter -fsanitize%,$(OPT))
LDLIBS   := -lcjson -lgsl -lgslcblas -lm -lpthread
ifeq ($(GPU),1)
  CPPFLAGS += -DSR_HAVE_CUDA=1 -I$(CUDA_HOME)/include
  GPU_LIBS := -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -Wl,-rpath,$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib \
              -lcudart -lnccl -lcublas -lcublasLt -lstdc++
endif

# ---- sources ---------------------------------------------------------------------------------
LIB_SRC   := $(wildcard plan/*.c sim/*.c traces/*.c kernels/*.c)
CLI_SRC   := $(wildcard cli/*.c)
EXEC_MAIN := $(wildcard exec/main.c)
EXEC_SRC  := $(filter-out exec/main.c,$(wildcard exec/*.c train/*.c))
TEST_SRC  := $(wildcard tests/*.c)
# The C API of other languages (api/api.h): api/*_cuda.c only in the CUDA shared library.
API_CUDA_SRC := $(wildcard api/*_cuda.c)
API_SRC   := $(filter-out $(API_CUDA_SRC),$(wildcard api/*.c))
CU_SRC    := $(wildcard kernels/*.cu exec/*.cu train/*.cu)

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ   := $(CLI_SRC:%.c=$(BUILD)/%.o)
EXEC_OBJ  := $(EXEC_SRC:%.c=$(BUILD)/%.o)
EXEC_MAIN_OBJ := $(EXEC_MAIN:%.c=$(BUILD)/%.o)
EXEC_LIB  := $(BUILD)/libsparsering_exec.a
TEST_OBJ  := $(TEST_SRC:%.c=$(BUILD)/%.o)
API_OBJ   := $(API_SRC:%.c=$(BUILD)/%.o)
API_CUDA_OBJ := $(API_CUDA_SRC:%.c=$(BUILD)/%.o)
CU_OBJ    := $(if $(filter 1,$(GPU)),$(CU_SRC:%.cu=$(BUILD)/%.cu.o))
LIB       := $(BUILD)/libsparsering.a
CU_LIB    := $(if $(CU_OBJ),$(BUILD)/libsparsering_cuda.a)
# The planner, simulator and traces as a shared library with the C API (api/api.h) for other languages
# (python/ loads it with ctypes), always built; and the kernels with all of that as a second one, linked
# with the CUDA runtime, where nvcc exists. Position-independent objects (-fPIC costs nothing measurable
# on x86-64).
SO        := $(BUILD)/libsparsering.so
CU_SO     := $(if $(CU_OBJ),$(BUILD)/libsparsering_cuda.so)

BIN_DIR   := $(if $(filter 1,$(SAN)),$(BUILD)/bin,bin)
BIN       := $(BIN_DIR)/sparsering
EXEC_BIN  := $(BIN_DIR)/sparsering-exec
TEST_BIN  := $(BUILD)/run_tests

# Fuzz harnesses (tests/fuzz/fuzz_NAME.c), each linked with the replay driver (tests/fuzz/replay.c) so `make test`
# runs every one on its seed corpus plus mutations with any compiler; tests/fuzz/run.sh builds them against
# clang's libFuzzer for the long campaigns.
FUZZ_NAMES  := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_REPLAY := $(FUZZ_NAMES:%=$(BUILD)/fuzz/replay-%)

# GPU-only tools of kernels/ (their sources sit in subfolders so they stay out of the library).
GPU_TOOLS := $(if $(CU_LIB),bin/sparsering-gpu-test bin/sparsering-gpu-test-vs bin/sparsering-gpu-test-moba bin/sparsering-bench-attn bin/sparsering-bench-vs bin/sparsering-bench-adaspa)

.PHONY: all run test bench gpu-test deps clean studies figures python-libs fuzz
EXEC_TARGET := $(if $(EXEC_MAIN),$(EXEC_BIN))
all: $(BIN) $(EXEC_TARGET) $(GPU_TOOLS) $(SO) $(CU_SO)

deps:
	@sh scripts/install-deps.sh

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 -O3 $(CUDA_ARCH) -I. -DSR_HAVE_CUDA=1 -Xcompiler -Wall -Xcompiler -fPIC -lineinfo -MMD -MP $(NVCC_FLAGS) -c $< -o $@

# The commit is baked into one object (plan/version.c), rebuilt only when the commit changes: the stamp
# file is rewritten only when `git describe` says something new. Outside a git checkout: "unknown".
GIT_COMMIT := $(shell test -e .git && git describe --always --dirty 2>/dev/null || echo unknown)
$(BUILD)/git_commit.txt: FORCE
	@mkdir -p $(dir $@)
	@echo '$(GIT_COMMIT)' | cmp -s - $@ || echo '$(GIT_COMMIT)' > $@
$(BUILD)/plan/version.o: $(BUILD)/git_commit.txt
$(BUILD)/plan/version.o: CPPFLAGS += -DSR_GIT_COMMIT='"$(GIT_COMMIT)"'
.PHONY: FORCE
FORCE:

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# exec/ (all but main.c) and the trainer (train/) are a library too, so the tests link it.
$(EXEC_LIB): $(EXEC_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(CU_LIB): $(CU_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(SO): $(LIB_OBJ) $(API_OBJ)
	$(CC) -shared -o $@ $^ $(LDLIBS)

$(CU_SO): $(CU_OBJ) $(LIB_OBJ) $(API_OBJ) $(API_CUDA_OBJ)
	$(CC) -shared -o $@ $^ $(LDLIBS) $(GPU_LIBS)

# The shared libraries the Python package loads; a sanitizer build tests Python against the release ones
# (a sanitized library does not load into an unsanitized python3).
python-libs: $(SO) $(CU_SO)

# The whole-archive wrap keeps the self-registering commands and tests (constructor functions).
$(BIN): $(CLI_OBJ) $(LIB) $(CU_LIB)
	@mkdir -p $(BIN_DIR)
	$(CC) $(LDFLAGS) -o $@ -Wl,--whole-archive $(CLI_OBJ) -Wl,--no-whole-archive $(LIB) $(CU_LIB) $(LDLIBS) $(GPU_LIBS)

# Registration by constructors (commands, tests) needs --whole-archive for the exec library too.
# The CUDA objects and the C library call each other (index upload <-> bar chunks): link them as a group.
$(EXEC_BIN): $(EXEC_MAIN_OBJ) $(EXEC_LIB) $(LIB) $(CU_LIB)
	@mkdir -p $(BIN_DIR)
	$(CC) $(LDFLAGS) -o $@ $(EXEC_MAIN_OBJ) -Wl,--whole-archive $(EXEC_LIB) -Wl,--no-whole-archive -Wl,--start-group $(LIB) $(CU_LIB) -Wl,--end-group $(LDLIBS) $(GPU_LIBS)

$(TEST_BIN): $(TEST_OBJ) $(API_OBJ) $(EXEC_LIB) $(LIB) $(CU_LIB)
	$(CC) $(LDFLAGS) -o $@ $(TEST_OBJ) $(API_OBJ) $(EXEC_LIB) -Wl,--start-group $(LIB) $(CU_LIB) -Wl,--end-group $(LDLIBS) $(GPU_LIBS)

$(BUILD)/fuzz/replay-%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c tests/fuzz/fuzz.h $(EXEC_LIB) $(LIB) $(CU_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(filter-out -MMD -MP,$(CFLAGS)) $(LDFLAGS) -o $@ tests/fuzz/replay.c $< $(EXEC_LIB) \
	  -Wl,--start-group $(LIB) $(CU_LIB) -Wl,--end-group $(LDLIBS) $(GPU_LIBS)

bin/sparsering-gpu-test: kernels/test/gpu_test.cu kernels/test/index_build.h kernels/test/check.h $(LIB) $(CU_LIB)
	@mkdir -p bin
	$(NVCC) -std=c++17 -O2 $(CUDA_ARCH) -I. -DSR_HAVE_CUDA=1 -o $@ $< $(CU_LIB) $(LIB) $(LDLIBS)

bin/sparsering-gpu-test-vs: kernels/test/vs_gpu_test.cu kernels/test/index_build.h kernels/test/check.h $(LIB) $(CU_LIB)
	@mkdir -p bin
	$(NVCC) -std=c++17 -O2 $(CUDA_ARCH) -I. -DSR_HAVE_CUDA=1 -o $@ $< $(CU_LIB) $(LIB) $(LDLIBS)

bin/sparsering-gpu-test-moba: kernels/test/moba_gpu_test.cu kernels/test/index_build.h kernels/test/check.h $(LIB) $(CU_LIB)
	@mkdir -p bin
	$(NVCC) -std=c++17 -O2 $(CUDA_ARCH) -I. -DSR_HAVE_CUDA=1 -o $@ $< $(CU_LIB) $(LIB) $(LDLIBS)

bin/sparsering-bench-vs: kernels/bench/bench_vs.cu kernels/test/check.h $(LIB) $(CU_LIB)
	@mkdir -p bin
	$(NVCC) -std=c++17 -O2 $(CUDA_ARCH) -I. -DSR_HAVE_CUDA=1 -o $@ $< $(CU_LIB) $(LIB) $(LDLIBS)

bin/sparsering-bench-adaspa: kernels/bench/bench_adaspa.cu kernels/test/index_build.h kernels/test/check.h $(LIB) $(CU_LIB)
	@mkdir -p bin
	$(NVCC) -std=c++17 -O2 $(CUDA_ARCH) -I. -DSR_HAVE_CUDA=1 -o $@ $< $(CU_LIB) $(LIB) $(LDLIBS)

bin/sparsering-bench-attn: kernels/bench/bench_attn.cu kernels/test/index_build.h kernels/test/check.h $(LIB) $(CU_LIB)
	@mkdir -p bin
	$(NVCC) -std=c++17 -O2 $(CUDA_ARCH) -I. -DSR_HAVE_CUDA=1 -o $@ $< $(CU_LIB) $(LIB) $(LDLIBS)

# deps first, then a parallel build in a sub-make (a parallel build must not race the installs).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
run: deps
	$(MAKE) -j$(JOBS) all
	./$(BIN) whatif

# Tests run the CLI binaries too, so build them first; SR_BIN tells the tests where they are.
test: deps
	$(MAKE) -j$(JOBS) $(BIN) $(EXEC_TARGET) $(TEST_BIN) $(FUZZ_REPLAY) $(if $(filter 1,$(SAN)),,python-libs)
	$(if $(filter 1,$(SAN)),$(MAKE) -j$(JOBS) SAN=0 python-libs)
	SR_BIN=$(CURDIR)/$(BIN_DIR) SR_FUZZ=$(CURDIR)/$(BUILD)/fuzz SR_SAN=$(SAN) ./$(TEST_BIN)

# The long fuzzing campaigns: every harness against clang's libFuzzer (ASan + UBSan) for SECONDS each
# (`make fuzz FUZZ_SECONDS=600`); installs clang and its runtime first (FUZZ=1 scripts/install-deps.sh).
FUZZ_SECONDS ?= 60
fuzz:
	@FUZZ=1 sh scripts/install-deps.sh
	@for n in $(FUZZ_NAMES); do tests/fuzz/run.sh $$n $(FUZZ_SECONDS) || exit 1; done

# Each area registers its own bench-* command; run them all.
bench: deps $(BIN)
	@for c in $$(./$(BIN) help | awk '/^  bench-/{print $$1}'); do echo "== $$c"; ./$(BIN) $$c || exit 1; done

# The standard what-if studies into notebooks-data/ (CSV + JSON sidecar each), then their figures.
studies: deps $(BIN)
	python3 scripts/studies.py --bin $(BIN) --out notebooks-data

figures: deps
	$(MAKE) SAN=0 python-libs
	python3 scripts/figures.py

gpu-test: $(BIN) $(EXEC_TARGET) $(GPU_TOOLS)
	@test -x bin/sparsering-gpu-test || { echo "gpu-test: no GPU test binary built (nvcc missing?)"; exit 2; }
	./bin/sparsering-gpu-test
	./bin/sparsering-gpu-test-vs
	./bin/sparsering-gpu-test-moba

clean:
	rm -rf build bin

-include $(LIB_OBJ:.o=.d) $(API_OBJ:.o=.d) $(API_CUDA_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(EXEC_OBJ:.o=.d) $(EXEC_MAIN_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(CU_OBJ:.o=.d)
