// test_kernels_table.c — kernels/bench/table.py: the kernels' table next to cuDNN from one call's logs
// (the logs of results/kernels/2026-11-27-h100-warp-specialized, whose figures the README quotes).
#include <stdlib.h>
#include <string.h>

#include "tests/test.h"

#define RUN_DIR "results/kernels/2026-11-27-h100-warp-specialized"

TEST(kernel_table_puts_cudnn_next_to_ours_with_the_ratio_of_their_times) {
  char *out = NULL;
  CHECK_EQ_INT(test_run("python3 kernels/bench/table.py " RUN_DIR "/bench.log " RUN_DIR "/peers_cudnn.log", &out), 0);
  // dense causal 16K: ours 1.85 / 9.22 ms (bench.log), cuDNN 1.84 / 5.03 ms (peers_cudnn.log):
  // 1.84 / 1.85 = 0.995 -> 0.99, 5.03 / 9.22 = 0.546 -> 0.55.
  CHECK_STR_CONTAINS(out, "dense causal    16K      1.85      9.22      1.84      5.03      0.99      0.55");
  // VS-like 128K computes 7.6% of the causal pairs: 121.25 * 0.076 / 13.56 = 0.680, 325.45 * 0.076 / 85.26 = 0.290.
  CHECK_STR_CONTAINS(out, "vs-like        128K     13.56     85.26    121.25    325.45      0.68      0.29");
  free(out);
}

TEST(kernel_table_without_its_logs_says_how_to_call_it_and_exits_2) {
  char *out = NULL;
  CHECK_EQ_INT(test_run("python3 kernels/bench/table.py", &out), 2);
  CHECK_STR_CONTAINS(out, "Usage");
  free(out);
}
