# A thin front for CMake. The two commands that matter:
#   make run    install what is missing, build, run the main job (linfuse tour)
#   make test   install what is missing, build with ASan+UBSan, run every test
BUILD      ?= build
TEST_BUILD ?= build-test
PREFIX     ?= /usr/local
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)

# The tour needs the library and the tool, and the CUDA module only where a GPU can run it.
RUN_CUDA := $(shell test -e /proc/driver/nvidia/version && echo AUTO || echo OFF)

.PHONY: all run build test test-gpu install wheel bench format clean

all: build

# Only what the tour needs: no tests, no benches.
run:
	@scripts/deps.sh build
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DLINFUSE_TESTS=OFF -DLINFUSE_CUDA=$(RUN_CUDA)
	cmake --build $(BUILD) -j $(JOBS) --target linfuse_cli
	./$(BUILD)/linfuse tour

# Everything: the library, the CUDA module where nvcc is, the tool, the tests.
build:
	@scripts/deps.sh build
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DLINFUSE_TESTS=ON -DLINFUSE_CUDA=AUTO
	cmake --build $(BUILD) -j $(JOBS)

# Both compilers, each with ASan + UBSan and warnings as errors; the clang build skips the
# tests that do not depend on the compiler (the fuzzer is clang's already, the install test
# builds a release of its own) and the CUDA module (nvcc compiles the same kernels with the same
# host compiler either way: the gcc build has compiled them once). Then ThreadSanitizer on the
# tests that run threads. clang's OpenMP runtime dies at start-up on an empty registration file a
# killed process left in /dev/shm under the same pid: scripts/omp_shm_sweep.sh clears those first.
space := $(subst ,, )
TSAN_TESTS := test_threads test_profiler test_ops test_compile test_inject
test:
	@scripts/deps.sh test
	CC=gcc cmake -S . -B $(TEST_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLINFUSE_SANITIZE=ON
	cmake --build $(TEST_BUILD) -j $(JOBS)
	ctest --test-dir $(TEST_BUILD) --output-on-failure -j $(JOBS)
	@scripts/omp_shm_sweep.sh
	CC=clang cmake -S . -B $(TEST_BUILD)-clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLINFUSE_SANITIZE=ON -DLINFUSE_CUDA=OFF
	cmake --build $(TEST_BUILD)-clang -j $(JOBS)
	ctest --test-dir $(TEST_BUILD)-clang --output-on-failure -j $(JOBS) -E '^(fuzz|install|docs|wheel)$$'
	CC=clang cmake -S . -B $(TEST_BUILD)-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLINFUSE_SANITIZE=thread -DLINFUSE_CUDA=OFF
	cmake --build $(TEST_BUILD)-tsan -j $(JOBS) --target $(TSAN_TESTS)
	ctest --test-dir $(TEST_BUILD)-tsan --output-on-failure -j $(JOBS) -R '^($(subst $(space),|,$(TSAN_TESTS)))$$'

# On a GPU machine: the CUDA backend against the CPU (CI only builds this test), then every
# experiment's trace on the GPU.
test-gpu:
	@scripts/deps.sh test-gpu
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DLINFUSE_TESTS=ON -DLINFUSE_CUDA=ON
	cmake --build $(BUILD) -j $(JOBS)
	./$(BUILD)/tests/test_cases cuda
	LINFUSE_GEMV_KERNEL=mma ./$(BUILD)/tests/test_cases cuda "gemm bf16"
	LINFUSE_GEMV_KERNEL=tma ./$(BUILD)/tests/test_cases cuda "gemm bf16"
	./$(BUILD)/tests/test_cuda
	./$(BUILD)/tests/test_cuda_stream
	./$(BUILD)/tests/test_tp_gpu
	tests/gpu/experiments_gpu.sh ./$(BUILD)/linfuse $(BUILD)/gpu-traces
	@if python3 -c 'import torch, transformers, safetensors' 2>/dev/null; then \
		tests/gpu/hf_mlp_check.py ./$(BUILD)/linfuse $(BUILD)/hf-check; \
	else echo 'hf_mlp_check: skipped (needs torch, transformers and safetensors)'; fi
	@if python3 -c 'import torch' 2>/dev/null; then \
		tests/gpu/profile_check.py ./$(BUILD)/linfuse $(BUILD)/profile-check; \
	else echo 'profile_check: skipped (needs torch)'; fi
	@if python3 -c 'import torch, transformers' 2>/dev/null; then \
		PYTHONPATH=python LINFUSE_LIBRARY=$(BUILD)/liblinfuse.so tests/gpu/torch_patch_check.py \
			--linfuse ./$(BUILD)/linfuse --out $(BUILD)/torch-check --models llama,gemma,phi3,qwen3,olmo2,gemma3 && \
		PYTHONPATH=python LINFUSE_LIBRARY=$(BUILD)/liblinfuse.so tests/gpu/torch_survey.py; \
	else echo 'torch_patch_check, torch_survey: skipped (need torch and transformers)'; fi

# What an install holds: the library, the CUDA module where nvcc is, the tool, headers and package
# files; no tests (they are not installed, so building them here was time spent for nothing).
install:
	@scripts/deps.sh build
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DLINFUSE_TESTS=OFF -DLINFUSE_CUDA=AUTO
	cmake --build $(BUILD) -j $(JOBS)
	cmake --install $(BUILD) --prefix $(PREFIX)

# The Python wheel (setup.py: the CMake build inside the package; docs/python.md): dist/linfuse-*.whl.
# Debian's setuptools and wheel build it; nothing is fetched.
wheel:
	@scripts/deps.sh wheel
	JOBS=$(JOBS) /usr/bin/python3 -m pip wheel --no-build-isolation --no-deps --no-index -w dist .

# OpenBLAS is the yardstick; OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE slow it down, so they are
# unset for this command only.
bench: build
	@scripts/deps.sh bench
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ./$(BUILD)/linfuse bench cpu

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(TEST_BUILD) $(TEST_BUILD)-clang $(TEST_BUILD)-tsan
