// test_train_precision.c — the `--precision bf16|tf32` flag of `train` and `train-gpu-check`: it picks
// the CUDA model's GEMM precision, and every misuse (an unknown value, or any value on the CPU backend,
// which computes in float32) is an input error (exit 2) naming the flag before any device is touched.
#include <stdlib.h>
#include <string.h>

#include "tests/test.h"

// Run a sparsering-exec command line; returns the exit status and the output in *out.
static int exec_run(const char *args, char **out) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s/sparsering-exec %s 2>&1", test_bin_dir(), args);
  return test_run(cmd, out);
}

TEST(train_precision_bf16_on_cpu_backend_is_an_input_error) {
  char *out = NULL;
  CHECK_EQ_INT(exec_run("train --model tiny-test --seq 64 --steps 1 --backend cpu --precision bf16", &out), 2);
  CHECK_STR_CONTAINS(out, "--precision");
  CHECK_STR_CONTAINS(out, "CPU backend");
  free(out);
}

TEST(train_precision_tf32_on_default_cpu_backend_is_an_input_error) {
  char *out = NULL;
  CHECK_EQ_INT(exec_run("train --model tiny-test --seq 64 --steps 1 --precision tf32", &out), 2);
  CHECK_STR_CONTAINS(out, "--precision");
  CHECK_STR_CONTAINS(out, "float32");
  free(out);
}

TEST(train_precision_unknown_value_is_an_input_error_naming_the_choices) {
  char *out = NULL;
  CHECK_EQ_INT(exec_run("train --model tiny-test --seq 64 --steps 1 --backend cuda --precision fp16", &out), 2);
  CHECK_STR_CONTAINS(out, "--precision");
  CHECK_STR_CONTAINS(out, "'fp16' is not one of bf16, tf32");
  free(out);
}

#if SR_HAVE_CUDA
TEST(train_gpu_check_precision_unknown_value_is_an_input_error) {
  char *out = NULL;
  CHECK_EQ_INT(exec_run("train-gpu-check --model tiny-test --seq 64 --precision fp8", &out), 2);
  CHECK_STR_CONTAINS(out, "--precision");
  CHECK_STR_CONTAINS(out, "'fp8' is not one of bf16, tf32");
  free(out);
}
#endif
