// test_cluster.c — cluster descriptions: the shipped files load with the stated hardware, and every
// impossible or misspelt field is an input error naming the file and the field.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/cluster.h"
#include "tests/test.h"

// A valid two-node description; tests splice one defect into it at a time.
#define GPU_OK "\"gpu\": {\"name\": \"X\", \"peak_tflops\": 100, \"hbm_gbps\": 1000, \"mem_gib\": 40}"
#define INTRA_OK "\"intra_node\": {\"gbps\": 300, \"latency_us\": 3}"
#define INTER_OK "\"inter_node\": {\"nics_per_node\": 4, \"nic_gbps\": 25, \"latency_us\": 5}"
#define HOST_OK "\"host\": {\"pcie_gbps\": 25, \"mem_gib\": 512}"

static int parse(const char *text, cluster_desc *c, sr_error *e) { return cluster_from_json_text(text, "c.json", c, e); }

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

// ---------------------------------------------------------------------------------------------
// shipped clusters

TEST(cluster_shipped_files_all_load) {
  const char *names[] = {"a100-4x8", "h100-8x8", "h100-1x8", "h200-1x2", "h200-1x8", "a100-1x8", "h800-1x8"};
  const int world[] = {32, 64, 8, 2, 8, 8, 8};
  for (int i = 0; i < 7; i++) {
    cluster_desc c;
    sr_error e = {0};
    int rc = cluster_load(names[i], &c, &e);
    if (rc) test_fail(__FILE__, __LINE__, "%s: %s", names[i], e.msg);
    CHECK_EQ_INT(cluster_world(&c), world[i]);
    CHECK(strcmp(c.name, names[i]) == 0);
  }
}

// Every file under models/clusters/ loads, calibrated ones included (one was shipped whose description was over the
// parser's 255 characters), and names itself after its file.
TEST(cluster_every_file_under_models_clusters_loads_under_its_own_name) {
  DIR *d = opendir("models/clusters");
  CHECK(d != NULL);
  if (!d) return;
  int n = 0;
  for (struct dirent *de; (de = readdir(d));) {
    size_t len = strlen(de->d_name);
    if (len < 6 || strcmp(de->d_name + len - 5, ".json")) continue;
    char path[512], name[256];
    snprintf(path, sizeof path, "models/clusters/%s", de->d_name);
    snprintf(name, sizeof name, "%.*s", (int)(len - 5), de->d_name);
    cluster_desc c;
    sr_error e = {0};
    if (cluster_load(path, &c, &e)) test_fail(__FILE__, __LINE__, "%s: %s", path, e.msg);
    else if (strcmp(c.name, name)) test_fail(__FILE__, __LINE__, "%s names itself %s", path, c.name);
    n++;
  }
  closedir(d);
  CHECK(n >= 10);
}

TEST(cluster_a100_4x8_has_hdr_nic_per_gpu_and_nvlink3) {
  cluster_desc c;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load("a100-4x8", &c, &e), SR_OK);
  CHECK_EQ_INT(c.nodes, 4);
  CHECK_EQ_INT(c.gpus_per_node, 8);
  CHECK_NEAR(c.gpu.peak_tflops, 312, 0);
  CHECK_NEAR(c.gpu.mem_gib, 40, 0);
  CHECK_NEAR(c.intra.gbps, 300, 0);              // NVLink 3: 600 GB/s both ways
  CHECK_NEAR(cluster_inter_gbps_per_gpu(&c), 200.0 / 8, 1e-12);  // HDR 200 Gb/s = 25 GB/s each
  CHECK_EQ_INT(cluster_node_of(&c, 7), 0);
  CHECK_EQ_INT(cluster_node_of(&c, 8), 1);
  CHECK_EQ_INT(cluster_node_of(&c, 31), 3);
}

TEST(cluster_h100_8x8_has_ndr_nic_per_gpu) {
  cluster_desc c;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load("h100-8x8", &c, &e), SR_OK);
  CHECK_NEAR(cluster_inter_gbps_per_gpu(&c), 400.0 / 8, 1e-12);  // NDR 400 Gb/s = 50 GB/s
  CHECK_NEAR(c.intra.gbps, 450, 0);
  CHECK_NEAR(c.gpu.peak_tflops, 989, 0);
}

TEST(cluster_sustained_gemm_rate_is_read_when_given_and_absent_otherwise) {
  cluster_desc c;
  sr_error e = {0};
  const char *with = "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"X\", \"peak_tflops\": 100,"
                     " \"hbm_gbps\": 1000, \"mem_gib\": 40, \"efficiency\": {\"gemm\": 0.8, \"gemm_sustained\": 0.65}}, "
                     HOST_OK "}";
  CHECK_EQ_INT(parse(with, &c, &e), SR_OK);
  CHECK_NEAR(c.gpu.eff_gemm_sustained, 0.65, 0);
  const char *without = "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"X\", \"peak_tflops\": 100,"
                        " \"hbm_gbps\": 1000, \"mem_gib\": 40, \"efficiency\": {\"gemm\": 0.8}}, " HOST_OK "}";
  CHECK_EQ_INT(parse(without, &c, &e), SR_OK);
  CHECK_NEAR(c.gpu.eff_gemm_sustained, 0, 0);  // not measured: the simulator takes its fixed share
  char *text = cluster_to_json(&c);
  CHECK(text != NULL && strstr(text, "gemm_sustained") == NULL);  // nothing written for what was not measured
  free(text);
}

TEST(cluster_sustained_gemm_rate_above_one_is_an_error_naming_the_field) {
  cluster_desc c;
  sr_error e = {0};
  const char *text = "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"X\", \"peak_tflops\": 100,"
                     " \"hbm_gbps\": 1000, \"mem_gib\": 40, \"efficiency\": {\"gemm_sustained\": 1.5}}, " HOST_OK "}";
  CHECK_EQ_INT(parse(text, &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "gpu.efficiency.gemm_sustained");
}

TEST(cluster_sustained_attention_ratio_is_read_when_given_and_absent_otherwise) {
  cluster_desc c;
  sr_error e = {0};
  const char *with = "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"X\", \"peak_tflops\": 100,"
                     " \"hbm_gbps\": 1000, \"mem_gib\": 40, \"efficiency\": {\"attn_sustained\": 0.91}}, " HOST_OK "}";
  CHECK_EQ_INT(parse(with, &c, &e), SR_OK);
  CHECK_NEAR(c.gpu.eff_attn_sustained, 0.91, 0);
  const char *without = "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"X\", \"peak_tflops\": 100,"
                        " \"hbm_gbps\": 1000, \"mem_gib\": 40, \"efficiency\": {\"gemm\": 0.8}}, " HOST_OK "}";
  CHECK_EQ_INT(parse(without, &c, &e), SR_OK);
  CHECK_NEAR(c.gpu.eff_attn_sustained, 0, 0);  // not measured: a step's attention at the burst's efficiencies
  char *text = cluster_to_json(&c);
  CHECK(text != NULL && strstr(text, "attn_sustained") == NULL);  // nothing written for what was not measured
  free(text);
}

TEST(cluster_sustained_attention_ratio_outside_a_tenth_to_one_is_an_error_naming_the_field) {
  const char *bad[] = {"1.2", "0.05", "0"};
  for (int i = 0; i < 3; i++) {
    cluster_desc c;
    sr_error e = {0};
    char text[512];
    snprintf(text, sizeof text,
             "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"X\", \"peak_tflops\": 100,"
             " \"hbm_gbps\": 1000, \"mem_gib\": 40, \"efficiency\": {\"attn_sustained\": %s}}, " HOST_OK "}", bad[i]);
    CHECK_EQ_INT(parse(text, &c, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, "gpu.efficiency.attn_sustained");
  }
}

TEST(cluster_efficiency_defaults_fill_absent_fields) {
  cluster_desc c;
  sr_error e = {0};
  const char *text = "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"X\", \"peak_tflops\": 100,"
                     " \"hbm_gbps\": 1000, \"mem_gib\": 40, \"efficiency\": {\"gemm\": 0.9}}, " HOST_OK "}";
  CHECK_EQ_INT(parse(text, &c, &e), SR_OK);
  CHECK_NEAR(c.gpu.eff_gemm, 0.9, 0);
  CHECK(c.gpu.eff_attn_fwd_full > 0 && c.gpu.eff_attn_fwd_full <= 1);
  CHECK(c.gpu.eff_attn_bwd_bar > 0 && c.gpu.eff_attn_bwd_bar <= 1);
  CHECK_NEAR(c.gpu.comm_slowdown, 1.0, 0);
  CHECK_NEAR(cluster_inter_gbps_per_gpu(&c), 0.0, 0);  // one node: no network
}

// ---------------------------------------------------------------------------------------------
// validation: each defect names the file and the field

static void expect_error(const char *text, const char *needle) {
  cluster_desc c;
  sr_error e = {0};
  int rc = parse(text, &c, &e);
  if (rc != SR_EINPUT) test_fail(__FILE__, __LINE__, "expected SR_EINPUT for %s, got %d", needle, rc);
  if (!strstr(e.msg, needle)) test_fail(__FILE__, __LINE__, "expected '%s' in: %s", needle, e.msg);
}

TEST(cluster_valid_base_description_parses) {
  cluster_desc c;
  sr_error e = {0};
  CHECK_EQ_INT(parse("{\"nodes\": 2, \"gpus_per_node\": 4, " GPU_OK ", " INTRA_OK ", " INTER_OK ", " HOST_OK "}", &c, &e),
               SR_OK);
  CHECK_EQ_INT(cluster_world(&c), 8);
  CHECK_NEAR(cluster_inter_gbps_per_gpu(&c), 4 * 25.0 / 4, 1e-12);
  CHECK_NEAR(c.host_mem_gib, 512, 0);
}

TEST(cluster_unknown_field_is_reported) {
  expect_error("{\"nodes\": 2, \"gpus_per_node\": 4, \"gpus_per_nod\": 4, " GPU_OK ", " INTRA_OK ", " INTER_OK
               ", " HOST_OK "}",
               "c.json: gpus_per_nod: unknown field");
  expect_error("{\"nodes\": 2, \"gpus_per_node\": 4, " GPU_OK ", \"intra_node\": {\"gbps\": 300, \"latency\": 3}, "
               INTER_OK ", " HOST_OK "}",
               "c.json: intra_node.latency: unknown field");
  expect_error("{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"X\", \"peak_tflops\": 100, \"hbm_gbps\": 1,"
               " \"mem_gib\": 4, \"efficiency\": {\"gemm_fwd\": 0.5}}, " HOST_OK "}",
               "c.json: gpu.efficiency.gemm_fwd: unknown field");
}

TEST(cluster_zero_gpus_is_rejected) {
  expect_error("{\"nodes\": 2, \"gpus_per_node\": 0, " GPU_OK ", " INTRA_OK ", " INTER_OK ", " HOST_OK "}",
               "c.json: gpus_per_node");
  expect_error("{\"nodes\": 0, \"gpus_per_node\": 8, " GPU_OK ", " INTRA_OK ", " INTER_OK ", " HOST_OK "}",
               "c.json: nodes");
}

TEST(cluster_negative_or_zero_bandwidth_is_rejected) {
  expect_error("{\"nodes\": 2, \"gpus_per_node\": 4, " GPU_OK ", \"intra_node\": {\"gbps\": -300}, " INTER_OK ", " HOST_OK
               "}",
               "c.json: intra_node.gbps: -300 must be positive");
  expect_error("{\"nodes\": 2, \"gpus_per_node\": 4, " GPU_OK ", " INTRA_OK
               ", \"inter_node\": {\"nics_per_node\": 4, \"nic_gbps\": 0}, " HOST_OK "}",
               "c.json: inter_node.nic_gbps: 0 must be positive");
  expect_error("{\"nodes\": 1, \"gpus_per_node\": 1, " GPU_OK ", \"host\": {\"pcie_gbps\": -1, \"mem_gib\": 4}}",
               "c.json: host.pcie_gbps");
  expect_error("{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"X\", \"peak_tflops\": 100, \"hbm_gbps\": -5,"
               " \"mem_gib\": 4}, " HOST_OK "}",
               "c.json: gpu.hbm_gbps");
  expect_error("{\"nodes\": 2, \"gpus_per_node\": 4, " GPU_OK ", \"intra_node\": {\"gbps\": 300, \"latency_us\": -1}, "
               INTER_OK ", " HOST_OK "}",
               "c.json: intra_node.latency_us");
}

TEST(cluster_missing_gpu_or_network_is_rejected) {
  expect_error("{\"nodes\": 1, \"gpus_per_node\": 1, " HOST_OK "}", "c.json: gpu: missing");
  expect_error("{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"X\", \"hbm_gbps\": 1, \"mem_gib\": 4}, "
               HOST_OK "}",
               "c.json: gpu.peak_tflops: missing");
  // Several nodes need the network; several GPUs in a node need the intra-node link.
  expect_error("{\"nodes\": 2, \"gpus_per_node\": 4, " GPU_OK ", " INTRA_OK ", " HOST_OK "}", "c.json: inter_node: missing");
  expect_error("{\"nodes\": 1, \"gpus_per_node\": 4, " GPU_OK ", " HOST_OK "}", "c.json: intra_node: missing");
}

TEST(cluster_efficiency_outside_unit_interval_is_rejected) {
  expect_error("{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"X\", \"peak_tflops\": 100, \"hbm_gbps\": 1,"
               " \"mem_gib\": 4, \"efficiency\": {\"attn_fwd_full\": 1.2}}, " HOST_OK "}",
               "c.json: gpu.efficiency.attn_fwd_full");
  expect_error("{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"X\", \"peak_tflops\": 100, \"hbm_gbps\": 1,"
               " \"mem_gib\": 4, \"efficiency\": {\"gemm\": 0}}, " HOST_OK "}",
               "c.json: gpu.efficiency.gemm");
  expect_error("{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"X\", \"peak_tflops\": 100, \"hbm_gbps\": 1,"
               " \"mem_gib\": 4, \"comm_slowdown\": 0.5}, " HOST_OK "}",
               "c.json: gpu.comm_slowdown");
}

TEST(cluster_wrong_type_is_rejected) {
  expect_error("{\"nodes\": \"4\", \"gpus_per_node\": 8, " GPU_OK ", " INTRA_OK ", " INTER_OK ", " HOST_OK "}",
               "c.json: nodes: expected an integer");
  expect_error("{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": \"A100\", " HOST_OK "}", "c.json: gpu: expected an object");
  expect_error("[1, 2]", "c.json");
}

TEST(cluster_malformed_and_truncated_files_are_rejected) {
  char path[700];
  snprintf(path, sizeof path, "%s/bad.json", test_tmpdir());
  write_file(path, "{\"nodes\": 1,\n \"gpus_per_node\": 1\n \"gpu\": {}}");
  cluster_desc c;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load(path, &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, path);
  CHECK_STR_CONTAINS(e.msg, "line 3");
  snprintf(path, sizeof path, "%s/cut.json", test_tmpdir());
  write_file(path, "{\"nodes\": 4, \"gpus_per_node\": 8, \"gpu\": {\"name\": \"A1");
  CHECK_EQ_INT(cluster_load(path, &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, path);
  CHECK_STR_CONTAINS(e.msg, "truncated");
  CHECK_EQ_INT(cluster_load("no-such-cluster", &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "no-such-cluster");
}

TEST(cluster_cli_exits_2_naming_file_and_field) {
  char path[700], cmd[1600], *out = NULL;
  snprintf(path, sizeof path, "%s/neg.json", test_tmpdir());
  write_file(path, "{\"nodes\": 2, \"gpus_per_node\": 4, " GPU_OK ", " INTRA_OK
                   ", \"inter_node\": {\"nics_per_node\": 4, \"nic_gbps\": -25}, " HOST_OK "}");
  snprintf(cmd, sizeof cmd, "%s/sparsering cluster --cluster '%s'", test_bin_dir(), path);
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, path);
  CHECK_STR_CONTAINS(out, "inter_node.nic_gbps");
  free(out);
  out = NULL;
  snprintf(cmd, sizeof cmd, "%s/sparsering cluster --cluster h200-1x2", test_bin_dir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "1 nodes x 2 = 2");
  free(out);
}

// Every field a cluster_desc holds, compared exactly (cJSON prints doubles with 17 digits, so a
// written and re-read description must be bit-identical).
static int same_cluster(const cluster_desc *a, const cluster_desc *b) {
  const gpu_desc *x = &a->gpu, *y = &b->gpu;
  return strcmp(a->name, b->name) == 0 && strcmp(a->description, b->description) == 0 && a->nodes == b->nodes &&
         a->gpus_per_node == b->gpus_per_node && strcmp(x->name, y->name) == 0 && x->peak_tflops == y->peak_tflops &&
         x->hbm_gbps == y->hbm_gbps && x->mem_gib == y->mem_gib && x->eff_gemm == y->eff_gemm &&
         x->eff_attn_fwd_full == y->eff_attn_fwd_full && x->eff_attn_fwd_partial == y->eff_attn_fwd_partial &&
         x->eff_attn_fwd_bar == y->eff_attn_fwd_bar && x->eff_attn_bwd_full == y->eff_attn_bwd_full &&
         x->eff_attn_bwd_partial == y->eff_attn_bwd_partial && x->eff_attn_bwd_bar == y->eff_attn_bwd_bar &&
         x->eff_gemm_sustained == y->eff_gemm_sustained && x->eff_attn_sustained == y->eff_attn_sustained &&
         x->eff_mem == y->eff_mem && x->comm_slowdown == y->comm_slowdown && a->intra.gbps == b->intra.gbps &&
         a->intra.latency_us == b->intra.latency_us && a->nics_per_node == b->nics_per_node &&
         a->nic.gbps == b->nic.gbps && a->nic.latency_us == b->nic.latency_us && a->host.gbps == b->host.gbps &&
         a->host.latency_us == b->host.latency_us && a->host_mem_gib == b->host_mem_gib &&
         x->ring_step_us[0] == y->ring_step_us[0] && x->ring_step_us[1] == y->ring_step_us[1] &&
         x->ring_cell_us[0] == y->ring_cell_us[0] && x->ring_cell_us[1] == y->ring_cell_us[1] &&
         x->bar_walk_us == y->bar_walk_us && x->bar_walk_parts == y->bar_walk_parts && x->bar_walk_ws == y->bar_walk_ws &&
         x->bar_walk_pairs == y->bar_walk_pairs && x->attn_walk_us[0] == y->attn_walk_us[0] &&
         x->attn_walk_us[1] == y->attn_walk_us[1] && x->l2_mb == y->l2_mb && x->attn_l2[0] == y->attn_l2[0] &&
         x->attn_l2[1] == y->attn_l2[1] && a->calibrated == b->calibrated &&
         strcmp(a->calibration, b->calibration) == 0;
}

TEST(cluster_written_json_reads_back_identically) {
  const char *names[] = {"a100-4x8", "h100-8x8", "h100-1x8", "h200-1x2", "h200-1x8", "a100-1x8", "h800-1x8",
                         "h200-1x2-calibrated"};
  for (int i = 0; i < 8; i++) {
    cluster_desc a, b;
    sr_error e = {0};
    CHECK_EQ_INT(cluster_load(names[i], &a, &e), SR_OK);
    a.gpu.eff_attn_fwd_bar = 0.123456789012345;  // a calibrated figure with many digits
    a.gpu.ring_step_us[1] = 12.5, a.gpu.ring_cell_us[0] = 0.0625;
    a.gpu.bar_walk_us = 8.500146044253384;
    if (i % 2 == 0) a.gpu.attn_walk_us[0] = 0.061234567890123456, a.gpu.attn_walk_us[1] = 0.25;  // others: absent
    if (i % 2 == 0) a.gpu.l2_mb = 50, a.gpu.attn_l2[0] = 0.09020702607970003, a.gpu.attn_l2[1] = 0.0297;
    // the others keep it absent (0); cJSON's own printing gave 0.654321098765432 for it, a bit away
    if (i % 2) a.gpu.eff_gemm_sustained = 0.6543210987654321;
    if (i % 2 == 0) a.gpu.eff_attn_sustained = 0.9123456789012345;  // the others: absent (0)
    if (i % 2) a.gpu.bar_walk_parts = i % 4 == 1 ? 1 : 16;             // the others: not said (0)
    if (i % 4 == 3) a.gpu.bar_walk_ws = 1;                              // the others: the mma.sync bar kernels (0)
    if (i == 7) a.gpu.bar_walk_pairs = 1;                               // the others: a chunk a CTA (0)
    char *text = cluster_to_json(&a);
    CHECK(text != NULL);
    if (!text) continue;
    int rc = cluster_from_json_text(text, "written.json", &b, &e);
    if (rc) test_fail(__FILE__, __LINE__, "%s re-read: %s", names[i], e.msg);
    CHECK(same_cluster(&a, &b));
    free(text);
  }
}

// Reports say where the efficiencies come from: measured clusters name their calibration; every other
// shipped cluster is uncalibrated and says from what its figures were derived.
TEST(cluster_calibration_note_says_calibrated_or_where_the_guesses_come_from) {
  const char *derived[] = {"a100-4x8", "h100-8x8", "h100-1x8", "h200-1x2", "h200-1x8", "a100-1x8", "h800-1x8"};
  char note[600];
  for (int i = 0; i < 7; i++) {
    cluster_desc c;
    sr_error e = {0};
    CHECK_EQ_INT(cluster_load(derived[i], &c, &e), SR_OK);
    CHECK_EQ_INT(c.calibrated, 0);
    CHECK_STR_CONTAINS(cluster_calibration_note(&c, note, sizeof note), "uncalibrated: efficiencies from our H200 measurements");
  }
  cluster_desc c;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load("h200-1x2-calibrated", &c, &e), SR_OK);
  CHECK_EQ_INT(c.calibrated, 1);
  CHECK_STR_CONTAINS(cluster_calibration_note(&c, note, sizeof note), "calibrated: sparsering-exec calibrate on 2 x NVIDIA H200");
  // A file that records nothing is uncalibrated, and the note names the file.
  CHECK_EQ_INT(cluster_from_json_text("{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"G\", \"peak_tflops\": 100, "
                                      "\"hbm_gbps\": 1000, \"mem_gib\": 40}, " HOST_OK "}", "bare.json", &c, &e), SR_OK);
  CHECK_STR_CONTAINS(cluster_calibration_note(&c, note, sizeof note), "uncalibrated: efficiencies from bare.json (no calibration recorded)");
}

// Derived guesses follow docs/models.md's rule from the same H200 reference: the H800 and H100 (same
// compute, 3350 GB/s) keep the H200's tile fractions and scale its bars by 3350 / 4800.
TEST(cluster_derived_bar_efficiency_scales_with_hbm_over_peak) {
  cluster_desc h200, h800, a100;
  sr_error e = {0};
  CHECK_EQ_INT(cluster_load("h200-1x8", &h200, &e), SR_OK);
  CHECK_EQ_INT(cluster_load("h800-1x8", &h800, &e), SR_OK);
  CHECK_EQ_INT(cluster_load("a100-1x8", &a100, &e), SR_OK);
  CHECK_NEAR(h800.gpu.eff_attn_fwd_full, h200.gpu.eff_attn_fwd_full, 0);
  CHECK_NEAR(h800.gpu.eff_attn_fwd_bar, h200.gpu.eff_attn_fwd_bar * 3350 / 4800, 5e-4);
  CHECK_NEAR(a100.gpu.eff_attn_bwd_bar, h200.gpu.eff_attn_bwd_bar * (2039.0 / 4800) / (312.0 / 989), 5e-4);
  CHECK_NEAR(h800.intra.gbps, 200, 0);  // NVLink of the H800: 400 GB/s both ways
}

// The bars' walk of the derived files (docs/models.md): the H200 reference's 10.1 us a step on every Hopper GPU (the
// same SMs at the same clock), and on the A100 that time at its 1410 MHz boost clock against the H200's 1980.
TEST(cluster_derived_bar_walk_is_the_h200s_on_hopper_and_clock_scaled_on_the_a100) {
  const char *hopper[] = {"h200-1x2", "h200-1x8", "h100-1x8", "h100-8x8", "h800-1x8"};
  sr_error e = {0};
  for (int i = 0; i < 5; i++) {
    cluster_desc c;
    CHECK_EQ_INT(cluster_load(hopper[i], &c, &e), SR_OK);
    CHECK_NEAR(c.gpu.bar_walk_us, 10.1, 0);
  }
  cluster_desc a100;
  CHECK_EQ_INT(cluster_load("a100-4x8", &a100, &e), SR_OK);
  CHECK_NEAR(a100.gpu.bar_walk_us, 10.1 * 1980 / 1410, 0.05);
}

TEST(cluster_denormal_or_overflowing_figures_are_refused_not_simulated_as_inf) {
  // 1e-320 GB/s made every transfer take infinite time (step time inf, then -nan, exit 0)
  cluster_desc c;
  sr_error e = {0};
  const char *tiny = "{\"nodes\": 2, \"gpus_per_node\": 8, " GPU_OK ", " INTRA_OK ", "
                     "\"inter_node\": {\"nics_per_node\": 4, \"nic_gbps\": 1e-320, \"latency_us\": 5}, " HOST_OK "}";
  CHECK_EQ_INT(parse(tiny, &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "c.json: inter_node.nic_gbps:");
  CHECK_STR_CONTAINS(e.msg, "implausibly small");
  const char *huge = "{\"nodes\": 2, \"gpus_per_node\": 8, " GPU_OK ", " INTRA_OK ", "
                     "\"inter_node\": {\"nics_per_node\": 4, \"nic_gbps\": 1e400, \"latency_us\": 5}, " HOST_OK "}";
  CHECK_EQ_INT(parse(huge, &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "inter_node.nic_gbps: a number as large as 1e400 is beyond the range of a double");
  CHECK(!strstr(e.msg, "[-inf, inf]"));
  const char *eff = "{\"nodes\": 2, \"gpus_per_node\": 8, \"gpu\": {\"name\": \"X\", \"peak_tflops\": 100, "
                    "\"hbm_gbps\": 1000, \"mem_gib\": 40, \"efficiency\": {\"gemm\": 1e-320}}, " INTRA_OK ", " INTER_OK
                    ", " HOST_OK "}";
  CHECK_EQ_INT(parse(eff, &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "gpu.efficiency.gemm");
}

TEST(cluster_key_given_twice_is_refused) {
  cluster_desc c;
  sr_error e = {0};
  const char *twice = "{\"nodes\": 2, \"nodes\": 4, \"gpus_per_node\": 8, " GPU_OK ", " INTRA_OK ", " INTER_OK ", " HOST_OK "}";
  CHECK_EQ_INT(parse(twice, &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "c.json: nodes: given twice");
}

// The bars' walk is optional (absent: not modelled, 0) and, like the other latencies, not negative.
TEST(cluster_bar_walk_is_optional_and_not_negative) {
  cluster_desc c;
  sr_error e = {0};
  const char *with = "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"G\", \"peak_tflops\": 100, "
                     "\"hbm_gbps\": 1000, \"mem_gib\": 40, \"bar_walk_us\": 8.5}, " HOST_OK "}";
  CHECK_EQ_INT(cluster_from_json_text(with, "w.json", &c, &e), SR_OK);
  CHECK(c.gpu.bar_walk_us == 8.5);
  const char *without = "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"G\", \"peak_tflops\": 100, "
                        "\"hbm_gbps\": 1000, \"mem_gib\": 40}, " HOST_OK "}";
  CHECK_EQ_INT(cluster_from_json_text(without, "wo.json", &c, &e), SR_OK);
  CHECK(c.gpu.bar_walk_us == 0);
  const char *neg = "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"G\", \"peak_tflops\": 100, "
                    "\"hbm_gbps\": 1000, \"mem_gib\": 40, \"bar_walk_us\": -1}, " HOST_OK "}";
  CHECK_EQ_INT(cluster_from_json_text(neg, "neg.json", &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "gpu.bar_walk_us");
}

// Which walk the bar kernel runs (gpu.bar_walk_parts): optional (0: not said), 1 to 64 parts, an integer.
TEST(cluster_bar_walk_parts_is_optional_an_integer_from_1_to_64) {
  cluster_desc c;
  sr_error e = {0};
  const char *fmt = "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"G\", \"peak_tflops\": 100, "
                    "\"hbm_gbps\": 1000, \"mem_gib\": 40%s}, " HOST_OK "}";
  char text[600];
  snprintf(text, sizeof text, fmt, ", \"bar_walk_parts\": 16");
  CHECK_EQ_INT(cluster_from_json_text(text, "p.json", &c, &e), SR_OK);
  CHECK_EQ_INT(c.gpu.bar_walk_parts, 16);
  snprintf(text, sizeof text, fmt, "");
  CHECK_EQ_INT(cluster_from_json_text(text, "p.json", &c, &e), SR_OK);
  CHECK_EQ_INT(c.gpu.bar_walk_parts, 0);
  char *w = cluster_to_json(&c);
  CHECK(w != NULL && strstr(w, "bar_walk_parts") == NULL);  // nothing written for what was not said
  free(w);
  const char *bad[] = {", \"bar_walk_parts\": 0", ", \"bar_walk_parts\": 65", ", \"bar_walk_parts\": 1.5",
                       ", \"bar_walk_parts\": \"whole\""};
  for (int i = 0; i < 4; i++) {
    snprintf(text, sizeof text, fmt, bad[i]);
    CHECK_EQ_INT(cluster_from_json_text(text, "p.json", &c, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, "gpu.bar_walk_parts");
  }
}

// Whether the bars run on the warp-specialized kernel (gpu.bar_walk_ws): optional (0), 0 or 1, written only when 1.
TEST(cluster_bar_walk_ws_is_optional_zero_or_one) {
  cluster_desc c;
  sr_error e = {0};
  const char *fmt = "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"G\", \"peak_tflops\": 100, "
                    "\"hbm_gbps\": 1000, \"mem_gib\": 40%s}, " HOST_OK "}";
  char text[600];
  snprintf(text, sizeof text, fmt, ", \"bar_walk_parts\": 16, \"bar_walk_ws\": 1");
  CHECK_EQ_INT(cluster_from_json_text(text, "p.json", &c, &e), SR_OK);
  CHECK_EQ_INT(c.gpu.bar_walk_ws, 1);
  char *w = cluster_to_json(&c);
  CHECK(w != NULL && strstr(w, "\"bar_walk_ws\"") != NULL);
  free(w);
  snprintf(text, sizeof text, fmt, "");
  CHECK_EQ_INT(cluster_from_json_text(text, "p.json", &c, &e), SR_OK);
  CHECK_EQ_INT(c.gpu.bar_walk_ws, 0);
  w = cluster_to_json(&c);
  CHECK(w != NULL && strstr(w, "bar_walk_ws") == NULL);
  free(w);
  const char *bad[] = {", \"bar_walk_ws\": 2", ", \"bar_walk_ws\": -1", ", \"bar_walk_ws\": 0.5", ", \"bar_walk_ws\": true"};
  for (int i = 0; i < 4; i++) {
    snprintf(text, sizeof text, fmt, bad[i]);
    CHECK_EQ_INT(cluster_from_json_text(text, "p.json", &c, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, "gpu.bar_walk_ws");
  }
}

// Backward variant 5's pairs of compute chunks (gpu.bar_walk_pairs): optional (absent: 0, not written back), 0 or 1,
// and 1 only on the warp-specialized bars kernel (gpu.bar_walk_ws 1); the CLI exits 2 naming the file and the field.
TEST(cluster_bar_walk_pairs_is_optional_zero_or_one_and_only_with_ws) {
  cluster_desc c;
  sr_error e = {0};
  const char *fmt = "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"G\", \"peak_tflops\": 100, "
                    "\"hbm_gbps\": 1000, \"mem_gib\": 40%s}, " HOST_OK "}";
  char text[600];
  snprintf(text, sizeof text, fmt, ", \"bar_walk_parts\": 16, \"bar_walk_ws\": 1, \"bar_walk_pairs\": 1");
  CHECK_EQ_INT(cluster_from_json_text(text, "p.json", &c, &e), SR_OK);
  CHECK_EQ_INT(c.gpu.bar_walk_pairs, 1);
  CHECK_EQ_INT(c.gpu.bar_walk_ws, 1);
  char *w = cluster_to_json(&c);
  CHECK(w != NULL && strstr(w, "\"bar_walk_pairs\"") != NULL);
  free(w);
  snprintf(text, sizeof text, fmt, ", \"bar_walk_parts\": 16, \"bar_walk_ws\": 1");  // a variant-4 file as before
  CHECK_EQ_INT(cluster_from_json_text(text, "p.json", &c, &e), SR_OK);
  CHECK_EQ_INT(c.gpu.bar_walk_pairs, 0);
  w = cluster_to_json(&c);
  CHECK(w != NULL && strstr(w, "bar_walk_pairs") == NULL);
  free(w);
  snprintf(text, sizeof text, fmt, ", \"bar_walk_ws\": 1, \"bar_walk_pairs\": 0");
  CHECK_EQ_INT(cluster_from_json_text(text, "p.json", &c, &e), SR_OK);
  CHECK_EQ_INT(c.gpu.bar_walk_pairs, 0);
  const char *bad[] = {", \"bar_walk_ws\": 1, \"bar_walk_pairs\": 2",
                       ", \"bar_walk_ws\": 1, \"bar_walk_pairs\": -1",
                       ", \"bar_walk_ws\": 1, \"bar_walk_pairs\": 0.5",
                       ", \"bar_walk_ws\": 1, \"bar_walk_pairs\": \"yes\"",
                       ", \"bar_walk_pairs\": 1",  // pairs without the warp-specialized kernel
                       ", \"bar_walk_ws\": 0, \"bar_walk_pairs\": 1"};
  for (int i = 0; i < 6; i++) {
    snprintf(text, sizeof text, fmt, bad[i]);
    CHECK_EQ_INT(cluster_from_json_text(text, "p.json", &c, &e), SR_EINPUT);
    CHECK_STR_CONTAINS(e.msg, "p.json");
    CHECK_STR_CONTAINS(e.msg, "gpu.bar_walk_pairs");
    if (i >= 4) CHECK_STR_CONTAINS(e.msg, "bar_walk_ws 1");  // the reason: pairs only on the warp-specialized kernel
  }
  char path[700], cmd[1600], *out = NULL;
  snprintf(path, sizeof path, "%s/pairs.json", test_tmpdir());
  snprintf(text, sizeof text, fmt, ", \"bar_walk_pairs\": 1");
  write_file(path, text);
  snprintf(cmd, sizeof cmd, "%s/sparsering cluster --cluster '%s'", test_bin_dir(), path);
  CHECK_EQ_INT(test_run(cmd, &out), 2);
  CHECK_STR_CONTAINS(out, path);
  CHECK_STR_CONTAINS(out, "gpu.bar_walk_pairs");
  free(out);
}

// The attention kernels' cost per walk is optional (absent: not modelled, 0, and not written back), an object of the
// two phases' microseconds, neither negative nor beyond the latencies' range, and refuses a key it does not know.
TEST(cluster_attn_walk_is_optional_per_phase_and_not_negative) {
  cluster_desc c;
  sr_error e = {0};
#define WALK_GPU(x) "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"G\", \"peak_tflops\": 100, " \
                    "\"hbm_gbps\": 1000, \"mem_gib\": 40" x "}, " HOST_OK "}"
  CHECK_EQ_INT(cluster_from_json_text(WALK_GPU(", \"attn_walk\": {\"fwd_us\": 0.06, \"bwd_us\": 0.5}"), "w.json", &c, &e),
               SR_OK);
  CHECK(c.gpu.attn_walk_us[0] == 0.06 && c.gpu.attn_walk_us[1] == 0.5);
  CHECK_EQ_INT(cluster_from_json_text(WALK_GPU(", \"attn_walk\": {\"bwd_us\": 0.5}"), "b.json", &c, &e), SR_OK);
  CHECK(c.gpu.attn_walk_us[0] == 0 && c.gpu.attn_walk_us[1] == 0.5);
  CHECK_EQ_INT(cluster_from_json_text(WALK_GPU(""), "wo.json", &c, &e), SR_OK);
  CHECK(c.gpu.attn_walk_us[0] == 0 && c.gpu.attn_walk_us[1] == 0);
  char *text = cluster_to_json(&c);
  CHECK(text && !strstr(text, "attn_walk"));
  free(text);
  CHECK_EQ_INT(cluster_from_json_text(WALK_GPU(", \"attn_walk\": {\"fwd_us\": -0.1}"), "neg.json", &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "neg.json: gpu.attn_walk.fwd_us:");
  CHECK_EQ_INT(cluster_from_json_text(WALK_GPU(", \"attn_walk\": {\"bwd_us\": 2e6}"), "big.json", &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "gpu.attn_walk.bwd_us");
  CHECK_EQ_INT(cluster_from_json_text(WALK_GPU(", \"attn_walk\": {\"fwd_cell_us\": 1}"), "key.json", &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "fwd_cell_us");
  CHECK_EQ_INT(cluster_from_json_text(WALK_GPU(", \"attn_walk\": 0.06"), "num.json", &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "gpu.attn_walk");
#undef WALK_GPU
}

// The L2 cache (MiB) and the FULL tiles' loss beyond it are optional (absent: 0, not modelled, not written back); the
// loss is a fraction of a tile's time in [0, 10] per phase, refuses a key it does not know, and needs the cache it is
// beyond.
TEST(cluster_l2_and_the_loss_beyond_it_are_optional_and_checked) {
  cluster_desc c;
  sr_error e = {0};
#define L2_GPU(x) "{\"nodes\": 1, \"gpus_per_node\": 1, \"gpu\": {\"name\": \"G\", \"peak_tflops\": 100, " \
                  "\"hbm_gbps\": 1000, \"mem_gib\": 40" x "}, " HOST_OK "}"
  CHECK_EQ_INT(
      cluster_from_json_text(L2_GPU(", \"l2_mb\": 50, \"attn_l2\": {\"fwd\": 0.09, \"bwd\": 0.03}"), "w.json", &c, &e),
      SR_OK);
  CHECK(c.gpu.l2_mb == 50 && c.gpu.attn_l2[0] == 0.09 && c.gpu.attn_l2[1] == 0.03);
  CHECK_EQ_INT(cluster_from_json_text(L2_GPU(", \"l2_mb\": 40"), "l2.json", &c, &e), SR_OK);
  CHECK(c.gpu.l2_mb == 40 && c.gpu.attn_l2[0] == 0 && c.gpu.attn_l2[1] == 0);
  char *text = cluster_to_json(&c);
  CHECK(text && strstr(text, "\"l2_mb\"") && !strstr(text, "attn_l2"));
  free(text);
  CHECK_EQ_INT(cluster_from_json_text(L2_GPU(""), "wo.json", &c, &e), SR_OK);
  CHECK(c.gpu.l2_mb == 0 && c.gpu.attn_l2[0] == 0 && c.gpu.attn_l2[1] == 0);
  text = cluster_to_json(&c);
  CHECK(text && !strstr(text, "l2_mb") && !strstr(text, "attn_l2"));
  free(text);
  CHECK_EQ_INT(cluster_from_json_text(L2_GPU(", \"l2_mb\": 50, \"attn_l2\": {\"fwd\": -0.1}"), "neg.json", &c, &e),
               SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "neg.json: gpu.attn_l2.fwd:");
  CHECK_EQ_INT(cluster_from_json_text(L2_GPU(", \"l2_mb\": 50, \"attn_l2\": {\"bwd\": 11}"), "big.json", &c, &e),
               SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "gpu.attn_l2.bwd");
  CHECK_EQ_INT(cluster_from_json_text(L2_GPU(", \"l2_mb\": 50, \"attn_l2\": {\"fwd_us\": 1}"), "key.json", &c, &e),
               SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "fwd_us");
  CHECK_EQ_INT(cluster_from_json_text(L2_GPU(", \"attn_l2\": {\"fwd\": 0.09}"), "nol2.json", &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "nol2.json: gpu.attn_l2: given without gpu.l2_mb");
  CHECK_EQ_INT(cluster_from_json_text(L2_GPU(", \"l2_mb\": 0"), "zero.json", &c, &e), SR_EINPUT);
  CHECK_STR_CONTAINS(e.msg, "gpu.l2_mb");
#undef L2_GPU
}
