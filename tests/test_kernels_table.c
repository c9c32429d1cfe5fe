// test_kernels_table.c — kernels/bench/table.py: the kernels' table next to cuDNN from one call's logs
// (the logs of results/kernels/2026-11-27-h100-warp-specialized, whose figures the README quotes).
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
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

TEST(kernel_table_puts_each_other_dense_shape_next_to_cudnn_on_that_shape) {
  // A bench --shapes log and a peers.py --shapes log in the formats the two programs print (one row each shape).
  char dir[] = "/tmp/sr-ktable-XXXXXX", bench[600], peers[600], cmd[1400], *out = NULL;
  CHECK(mkdtemp(dir) != NULL);
  snprintf(bench, sizeof bench, "%s/shapes.log", dir);
  snprintf(peers, sizeof peers, "%s/cudnn-shapes.log", dir);
  FILE *f = fopen(bench, "w");
  CHECK(f != NULL);
  fprintf(f, "dense MHA         16K    100.8%%      2.00       550      nan      nan      nan      nan      nan      nan"
             "      nan      8.00       344     10.00\n"
             "dense d64         64K    100.2%%     20.00       400      nan      nan      nan      nan      nan      nan"
             "      nan     50.00       400     70.00\n");
  fclose(f);
  f = fopen(peers, "w");
  CHECK(f != NULL);
  fprintf(f, "SDPA cuDNN (MHA 16/16)             16K      1.90       579      6.00       458\n"
             "SDPA cuDNN (GQA d64)               64K     16.00       500     45.00       444\n"
             "SDPA cuDNN (GQA)                   64K     28.00       600     83.00       530\n");
  fclose(f);
  snprintf(cmd, sizeof cmd, "python3 kernels/bench/table.py %s %s", bench, peers);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  // MHA 16K: 1.90 / 2.00 = 0.95, 6.00 / 8.00 = 0.75; d 64 at 64K against the d 64 row, not the d 128 one:
  // 16.00 / 20.00 = 0.80, 45.00 / 50.00 = 0.90.
  CHECK_STR_CONTAINS(out, "dense MHA       16K      2.00      8.00      1.90      6.00      0.95      0.75");
  CHECK_STR_CONTAINS(out, "dense d64       64K     20.00     50.00     16.00     45.00      0.80      0.90");
  free(out);
  remove(bench), remove(peers), rmdir(dir);
}

TEST(kernel_table_reads_the_default_backward_however_many_variant_columns_stand_before_it) {
  // A bench row with one more backward variant column (b3) than the logs above: the default backward is the third
  // column from the end (bwd ms, bwd TF/s, fwdbwd ms), not the eighth after the forward's TF/s.
  char dir[] = "/tmp/sr-ktable-XXXXXX", bench[600], peers[600], cmd[1400], *out = NULL;
  CHECK(mkdtemp(dir) != NULL);
  snprintf(bench, sizeof bench, "%s/bench.log", dir);
  snprintf(peers, sizeof peers, "%s/cudnn.log", dir);
  FILE *f = fopen(bench, "w");
  CHECK(f != NULL);
  fprintf(f, "vs-like          128K      7.6%%     12.00         -      nan      nan      nan      nan   160.00    85.00"
             "    45.80    30.40     30.40         -     42.40\n");
  fclose(f);
  f = fopen(peers, "w");
  CHECK(f != NULL);
  fprintf(f, "SDPA cuDNN (GQA)                  128K    120.00       570    320.00       537\n");
  fclose(f);
  snprintf(cmd, sizeof cmd, "python3 kernels/bench/table.py %s %s", bench, peers);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  // 120.00 * 0.076 / 12.00 = 0.76; 320.00 * 0.076 / 30.40 = 0.80.
  CHECK_STR_CONTAINS(out, "vs-like        128K     12.00     30.40    120.00    320.00      0.76      0.80");
  free(out);
  remove(bench), remove(peers), rmdir(dir);
}

TEST(kernel_table_without_its_logs_says_how_to_call_it_and_exits_2) {
  char *out = NULL;
  CHECK_EQ_INT(test_run("python3 kernels/bench/table.py", &out), 2);
  CHECK_STR_CONTAINS(out, "Usage");
  free(out);
}
