// mpi_fixture.h — what the tests that launch sparsering-exec under mpirun share: the Open MPI
// environment, a CPU "cluster" file of nodes x ranks, counting the lines a run printed, and a small training run's
// CSV columns.
#ifndef SR_MPI_FIXTURE_H
#define SR_MPI_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test.h"

// Open MPI as root, oversubscribed (idle ranks yield the cores: busy-polling collectives would starve
// the ranks that compute), shared memory only; its own allocations at exit are not ours to
// report under the leak sanitizer.
#define MPI_ENV                                                                                             \
  "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "         \
  "OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_mpi_yield_when_idle=1 ASAN_OPTIONS=detect_leaks=0 "

// A CPU "cluster" of nodes x per_node ranks (real node boundaries for the double ring and USP), written
// into the test's temporary folder; the path stays valid until the next call.
static inline const char *mpi_cpu_cluster(int nodes, int per_node) {
  static char path[600];
  snprintf(path, sizeof path, "%s/cpu-%dx%d.json", test_tmpdir(), nodes, per_node);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return path;
  fprintf(f,
          "{ \"nodes\": %d, \"gpus_per_node\": %d,\n"
          "  \"gpu\": { \"name\": \"cpu\", \"peak_tflops\": 1, \"hbm_gbps\": 10, \"mem_gib\": 1,\n"
          "    \"efficiency\": { \"gemm\": 0.5, \"attn_fwd_full\": 0.5, \"attn_fwd_partial\": 0.5, \"attn_fwd_bar\": 0.5,\n"
          "      \"attn_bwd_full\": 0.5, \"attn_bwd_partial\": 0.5, \"attn_bwd_bar\": 0.5, \"mem\": 0.5 },\n"
          "    \"comm_slowdown\": 1.0 },\n"
          "  \"intra_node\": { \"gbps\": 10, \"latency_us\": 1.0 },\n"
          "  \"inter_node\": { \"nics_per_node\": 1, \"nic_gbps\": 1, \"latency_us\": 5.0 },\n"
          "  \"host\": { \"pcie_gbps\": 10, \"latency_us\": 10.0, \"mem_gib\": 16 } }\n",
          nodes, per_node);
  fclose(f);
  return path;
}

// models/clusters/h200-1x2.json with `ranks` GPUs on its node (a plan's world must equal the job's ranks),
// written into the test's temporary folder; the path stays valid until the next call.
static inline const char *mpi_h200_cluster(int ranks) {
  static char path[600];
  char cmd[1400];
  snprintf(path, sizeof path, "%s/h200-1x%d.json", test_tmpdir(), ranks);
  snprintf(cmd, sizeof cmd, "sed 's/\"gpus_per_node\": 2/\"gpus_per_node\": %d/' models/clusters/h200-1x2.json > %s",
           ranks, path);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  return path;
}

// Lines of out that start with prefix and end with suffix.
static inline int count_lines(const char *out, const char *prefix, const char *suffix) {
  int n = 0;
  for (const char *p = out; p && *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p), ls = strlen(suffix);
    if (strncmp(p, prefix, strlen(prefix)) == 0 && len >= ls && strncmp(p + len - ls, suffix, ls) == 0) n++;
    p = nl ? nl + 1 : NULL;
  }
  return n;
}

// Train `steps` steps of 90 tokens of a small text on `world` ranks (sparsering-exec train --csv, lr 3e-3, `extra`
// flags), and copy each step's CSV columns from the loss on (`cols` of them: loss, then grad_norm, ...) as written
// (%.17g, comma-separated) into rows[i * row_len]; the run's exit status (a failed run is reported), -1 without CSV.
static inline int train_fox_columns(int world, const char *model, const char *extra, int steps, int cols, char *rows,
                                    size_t row_len) {
  const char *dir = test_tmpdir();
  char csv[700], text[700], cmd[4096];
  static int run;
  snprintf(text, sizeof text, "%s/fox.txt", dir);
  snprintf(csv, sizeof csv, "%s/train-%d.csv", dir, run++);
  snprintf(cmd, sizeof cmd, "for i in 1 2 3 4 5 6 7 8; do printf 'the quick brown fox jumps over the lazy dog %%d. ' $i; done > %s",
           text);
  CHECK_EQ_INT(test_run(cmd, NULL), 0);
  snprintf(cmd, sizeof cmd,
           MPI_ENV "mpirun --oversubscribe -np %d %s/sparsering-exec train --model %s --cluster %s --seq 90 --data %s "
                   "--steps %d --lr 3e-3 --csv %s --quiet %s",
           world, test_bin_dir(), model, mpi_h200_cluster(world), text, steps, csv, extra);
  char *out = NULL;
  int rc = test_run(cmd, &out);
  if (rc != 0) test_fail(__FILE__, __LINE__, "exit %d: %.2000s", rc, out ? out : "");
  free(out);
  FILE *f = fopen(csv, "r");
  if (!f) return -1;
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof line, f)) {  // run,step,loss,grad_norm,...
    if (strncmp(line, "run,", 4) == 0 || n >= steps) continue;
    char *from = line, *to;
    for (int c = 0; c < 2 && from; c++) from = strchr(from, ',') ? strchr(from, ',') + 1 : NULL;
    to = from;
    for (int c = 0; c < cols && to; c++) to = strchr(to, ',') ? strchr(to, ',') + 1 : NULL;
    if (!from || !to) continue;
    snprintf(rows + (size_t)n++ * row_len, row_len, "%.*s", (int)(to - from - 1), from);
  }
  fclose(f);
  CHECK_EQ_INT(n, steps);
  return rc;
}

#endif
