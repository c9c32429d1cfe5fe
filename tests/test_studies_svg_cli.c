// test_studies_svg_cli.c — `sparsering sim --svg`: the chart of a simulated step has one row per GPU
// of the cluster, with compute and both link lanes, read back as XML by scripts/svg_summary.py.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test.h"

// The repository root: the tests run from it under `make test`; else above $SR_BIN.
static const char *repo_root(void) {
  static char root[4096];
  if (test_file_exists("scripts/svg_summary.py")) return ".";
  snprintf(root, sizeof root, "%s/..", test_bin_dir());
  char probe[4200];
  snprintf(probe, sizeof probe, "%s/scripts/svg_summary.py", root);
  if (!test_file_exists(probe)) snprintf(root, sizeof root, "%s/../../..", test_bin_dir());
  return root;
}

static int count_lines(const char *text, const char *prefix) {
  int n = 0;
  size_t k = strlen(prefix);
  for (const char *p = text; p && *p;) {
    if (strncmp(p, prefix, k) == 0) n++;
    p = strchr(p, '\n');
    if (p) p++;
  }
  return n;
}

// ---- the CLI ---------------------------------------------------------------------------------

TEST(svg_sim_cli_writes_one_row_per_gpu_with_compute_and_link_lanes) {
  // 2 nodes x 2 GPUs: a ring crosses nodes, so the chart has intra- and inter-node lanes.
  char cluster[4200], svg[4200], cmd[12000], *out = NULL;
  snprintf(cluster, sizeof cluster, "%s/c2x2.json", test_tmpdir());
  snprintf(svg, sizeof svg, "%s/step.svg", test_tmpdir());
  FILE *f = fopen(cluster, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs("{\"nodes\": 2, \"gpus_per_node\": 2, \"gpu\": {\"name\": \"t\", \"peak_tflops\": 100, \"hbm_gbps\": 1000, "
        "\"mem_gib\": 40}, \"intra_node\": {\"gbps\": 100, \"latency_us\": 3}, \"inter_node\": {\"nics_per_node\": 2, "
        "\"nic_gbps\": 25, \"latency_us\": 5}, \"host\": {\"pcie_gbps\": 25, \"latency_us\": 10, \"mem_gib\": 256}}\n",
        f);
  fclose(f);
  snprintf(cmd, sizeof cmd,
           "%s/sparsering sim --model tiny-test --cluster %s --seq 4096 --layout zigzag --schedule ring --pattern dense "
           "--svg %s",
           test_bin_dir(), cluster, svg);
  int rc = test_run(cmd, &out);
  CHECK_EQ_INT(rc, 0);
  if (rc) printf("%s\n", out ? out : "");
  free(out);
  out = NULL;
  snprintf(cmd, sizeof cmd, "python3 %s/scripts/svg_summary.py '%s'", repo_root(), svg);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "ranks 4\n");
  for (int r = 0; r < 4; r++) {
    char row[64];
    snprintf(row, sizeof row, "row %d bars ", r);
    CHECK_STR_CONTAINS(out, row);
  }
  CHECK_STR_CONTAINS(out, "compute,intra,inter");
  CHECK(count_lines(out, "bar ") > 0);
  free(out);
}
