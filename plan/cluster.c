// cluster.c — reading cluster descriptions (models/clusters/*.json) with strict validation: a typo
// or an impossible figure in a cluster file silently skews every simulated time, so unknown fields
// and out-of-range values are input errors naming the file, the field and the reason.
#include "plan/cluster.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/json.h"
#include "plan/util.h"

// ---------------------------------------------------------------------------------------------
// field helpers

// A strictly positive number (bandwidths, peaks, memory): zero or negative is impossible.
static int get_positive(const cJSON *obj, const char *key, int required, double hi, const char *unit, double *out,
                        const char *file, const char *ctx, sr_error *e) {
  double v = NAN;
  int rc = json_get_num(obj, key, required, -INFINITY, INFINITY, &v, file, ctx, e);
  if (rc || isnan(v)) return rc;  // absent optional field: *out keeps its default
  char f[128];
  snprintf(f, sizeof f, "%s.%s", ctx, key);
  if (!(v > 0)) return sr_input_error(e, file, f, "%g must be positive (%s)", v, unit);
  // a figure a millionth of any real device's (1e-320) would make every time infinite
  if (v < 1e-3) return sr_input_error(e, file, f, "%g %s is implausibly small (at least 0.001)", v, unit);
  if (v > hi) return sr_input_error(e, file, f, "%g %s is implausibly large (at most %g)", v, unit, hi);
  *out = v;
  return SR_OK;
}

// A latency in microseconds: zero is allowed (an idealised link), negative is not.
static int get_latency(const cJSON *obj, const char *key, double *out, const char *file, const char *ctx, sr_error *e) {
  double v = NAN;
  int rc = json_get_num(obj, key, 0, -INFINITY, INFINITY, &v, file, ctx, e);
  if (rc || isnan(v)) return rc;
  char f[128];
  snprintf(f, sizeof f, "%s.%s", ctx, key);
  if (v < 0 || v > 1e6) return sr_input_error(e, file, f, "%g us is out of range [0, 1e6]", v);
  *out = v;
  return SR_OK;
}

// An achieved fraction of peak: in (0, 1].
static int get_efficiency(const cJSON *obj, const char *key, double *out, const char *file, sr_error *e) {
  double v = NAN;
  int rc = json_get_num(obj, key, 0, -INFINITY, INFINITY, &v, file, "gpu.efficiency", e);
  if (rc || isnan(v)) return rc;
  char f[128];
  snprintf(f, sizeof f, "gpu.efficiency.%s", key);
  // attn_sustained is a ratio to the burst's rate, not a share of peak: a clock held under the power limit, not a tenth
  if (!strcmp(key, "attn_sustained") && !(v >= 0.1 && v <= 1))
    return sr_input_error(e, file, f, "%g is not a ratio of the held to the burst's rate in [0.1, 1]", v);
  if (!(v > 0 && v <= 1)) return sr_input_error(e, file, f, "%g is not a fraction of peak in (0, 1]", v);
  if (v < 1e-4) return sr_input_error(e, file, f, "%g of peak is implausibly small (at least 0.0001)", v);
  *out = v;
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// sections

// Defaults for a GPU whose file gives no measured efficiencies: deliberately conservative
// round figures (docs/models.md says where the shipped files' figures come from).
static void gpu_defaults(gpu_desc *g) {
  g->eff_gemm = 0.6;
  g->eff_attn_fwd_full = 0.5, g->eff_attn_fwd_partial = 0.4, g->eff_attn_fwd_bar = 0.25;
  g->eff_attn_bwd_full = 0.4, g->eff_attn_bwd_partial = 0.3, g->eff_attn_bwd_bar = 0.2;
  g->eff_mem = 0.8;
  g->comm_slowdown = 1.0;
  g->adaspa_search_ratio = 0;  // AdaSpa's reported ratio (sim/estimate.c)
}

static int parse_gpu(const cJSON *root, const char *file, gpu_desc *g, sr_error *e) {
  static const char *const known[] = {"name",          "peak_tflops", "fp64_tflops",   "fp8_tflops", "hbm_gbps",
                                      "mem_gib",       "efficiency",  "comm_slowdown", "ring_step",  "adaspa_search_ratio",
                                      "bar_walk_us",   "attn_walk",   "l2_mb",         "attn_l2",    "bar_walk_parts",
                                      "bar_walk_ws",   "bar_walk_pairs", NULL};
  static const char *const known_ring[] = {"fwd_us", "bwd_us", "fwd_cell_us", "bwd_cell_us", NULL};
  static const char *const known_walk[] = {"fwd_us", "bwd_us", NULL};
  static const char *const known_l2[] = {"fwd", "bwd", NULL};
  static const char *const known_eff[] = {"gemm",          "gemm_sustained",   "attn_fwd_full", "attn_fwd_partial",
                                          "attn_fwd_bar",  "attn_bwd_full",    "attn_bwd_partial", "attn_bwd_bar",
                                          "mem",           "attn_sustained", NULL};
  const cJSON *gpu = NULL;
  int rc;
  if ((rc = json_get_obj(root, "gpu", &gpu, file, NULL, e))) return rc;
  if ((rc = json_check_known(gpu, known, file, "gpu", e))) return rc;
  gpu_defaults(g);
  if ((rc = json_get_str(gpu, "name", 1, g->name, sizeof g->name, file, "gpu", e))) return rc;
  if ((rc = get_positive(gpu, "peak_tflops", 1, 1e5, "dense bf16 TFLOP/s", &g->peak_tflops, file, "gpu", e))) return rc;
  // absent: the ratio of the H100/H200 SXM datasheets, 989 dense bf16 to 34 FP64 vector TFLOP/s
  g->fp64_tflops = g->peak_tflops * (34.0 / 989.0);
  if ((rc = get_positive(gpu, "fp64_tflops", 0, 1e4, "FP64 vector TFLOP/s", &g->fp64_tflops, file, "gpu", e)))
    return rc;
  // absent: no FP8 units (A100), the indexer runs at the bf16 rate
  g->fp8_tflops = g->peak_tflops;
  if ((rc = get_positive(gpu, "fp8_tflops", 0, 1e5, "dense FP8 TFLOP/s", &g->fp8_tflops, file, "gpu", e))) return rc;
  if ((rc = get_positive(gpu, "hbm_gbps", 1, 1e6, "GB/s", &g->hbm_gbps, file, "gpu", e))) return rc;
  if ((rc = get_positive(gpu, "mem_gib", 1, 1e5, "GiB", &g->mem_gib, file, "gpu", e))) return rc;
  const cJSON *eff = cJSON_GetObjectItemCaseSensitive(gpu, "efficiency");
  if (eff && !cJSON_IsNull(eff)) {
    if (!cJSON_IsObject(eff)) return sr_input_error(e, file, "gpu.efficiency", "expected an object");
    if ((rc = json_check_known(eff, known_eff, file, "gpu.efficiency", e))) return rc;
    double *dst[] = {&g->eff_gemm,          &g->eff_gemm_sustained,   &g->eff_attn_fwd_full, &g->eff_attn_fwd_partial,
                     &g->eff_attn_fwd_bar,  &g->eff_attn_bwd_full,    &g->eff_attn_bwd_partial, &g->eff_attn_bwd_bar,
                     &g->eff_mem,           &g->eff_attn_sustained};
    for (int i = 0; known_eff[i]; i++)
      if ((rc = get_efficiency(eff, known_eff[i], dst[i], file, e))) return rc;
  }
  // optional: the search's measured share of a dense forward (written back only when given)
  if ((rc = get_positive(gpu, "adaspa_search_ratio", 0, 100, "share of a dense forward", &g->adaspa_search_ratio, file,
                         "gpu", e)))
    return rc;
  double slow = NAN;
  if ((rc = json_get_num(gpu, "comm_slowdown", 0, -INFINITY, INFINITY, &slow, file, "gpu", e))) return rc;
  if (!isnan(slow)) {
    // A comm kernel can only take SMs away from compute, never add them: factor >= 1.
    if (!(slow >= 1 && slow <= 10))
      return sr_input_error(e, file, "gpu.comm_slowdown", "%g is out of range [1, 10] (1 = no slowdown)", slow);
    g->comm_slowdown = slow;
  }
  // optional: the bars' backward walk (written back only when given; absent: not modelled)
  if ((rc = get_latency(gpu, "bar_walk_us", &g->bar_walk_us, file, "gpu", e))) return rc;
  // optional: the bar kernel's walk, whole (1) or split into up to that many parts (absent: not said, the old floor)
  int64_t parts = 0;
  if ((rc = json_get_int(gpu, "bar_walk_parts", 0, 1, 64, &parts, file, "gpu", e))) return rc;
  g->bar_walk_parts = (int)parts;
  // optional: the bars on the warp-specialized kernel (1) or the mma.sync bar kernels (0, absent)
  int64_t ws = 0;
  if ((rc = json_get_int(gpu, "bar_walk_ws", 0, 0, 1, &ws, file, "gpu", e))) return rc;
  g->bar_walk_ws = (int)ws;
  // optional: that kernel's bars in pairs of compute chunks (1, variant 5) or one chunk a CTA (0, absent)
  int64_t pairs = 0;
  if ((rc = json_get_int(gpu, "bar_walk_pairs", 0, 0, 1, &pairs, file, "gpu", e))) return rc;
  if (pairs && !ws)
    return sr_input_error(e, file, "gpu.bar_walk_pairs", "1 needs gpu.bar_walk_ws 1: only the warp-specialized bars "
                          "kernel (backward variant 5) pairs compute chunks");
  g->bar_walk_pairs = (int)pairs;
  const cJSON *ring = cJSON_GetObjectItemCaseSensitive(gpu, "ring_step");
  if (ring && !cJSON_IsNull(ring)) {
    if (!cJSON_IsObject(ring)) return sr_input_error(e, file, "gpu.ring_step", "expected an object");
    if ((rc = json_check_known(ring, known_ring, file, "gpu.ring_step", e))) return rc;
    double *dst[] = {&g->ring_step_us[0], &g->ring_step_us[1], &g->ring_cell_us[0], &g->ring_cell_us[1]};
    for (int i = 0; known_ring[i]; i++)
      if ((rc = get_latency(ring, known_ring[i], dst[i], file, "gpu.ring_step", e))) return rc;
  }
  // optional: the attention kernels' cost per walk (written back only when given; absent: not modelled)
  const cJSON *walk = cJSON_GetObjectItemCaseSensitive(gpu, "attn_walk");
  if (walk && !cJSON_IsNull(walk)) {
    if (!cJSON_IsObject(walk)) return sr_input_error(e, file, "gpu.attn_walk", "expected an object {fwd_us, bwd_us}");
    if ((rc = json_check_known(walk, known_walk, file, "gpu.attn_walk", e))) return rc;
    for (int i = 0; known_walk[i]; i++)
      if ((rc = get_latency(walk, known_walk[i], &g->attn_walk_us[i], file, "gpu.attn_walk", e))) return rc;
  }
  // optional: the L2 cache and the FULL tiles' slowdown beyond it (written back only when given; absent: not modelled)
  if ((rc = get_positive(gpu, "l2_mb", 0, 1e4, "MiB", &g->l2_mb, file, "gpu", e))) return rc;
  const cJSON *l2 = cJSON_GetObjectItemCaseSensitive(gpu, "attn_l2");
  if (l2 && !cJSON_IsNull(l2)) {
    if (!cJSON_IsObject(l2)) return sr_input_error(e, file, "gpu.attn_l2", "expected an object {fwd, bwd}");
    if ((rc = json_check_known(l2, known_l2, file, "gpu.attn_l2", e))) return rc;
    for (int i = 0; known_l2[i]; i++) {
      double v = NAN;
      char f[32];
      snprintf(f, sizeof f, "gpu.attn_l2.%s", known_l2[i]);
      if ((rc = json_get_num(l2, known_l2[i], 0, -INFINITY, INFINITY, &v, file, "gpu.attn_l2", e))) return rc;
      if (isnan(v)) continue;
      // a tile whose keys leave the cache does not run faster (>= 0); over ten times its time is a typo
      if (!(v >= 0 && v <= 10))
        return sr_input_error(e, file, f, "%g is out of range [0, 10] (a fraction of a FULL tile's time)", v);
      g->attn_l2[i] = v;
    }
    if ((g->attn_l2[0] > 0 || g->attn_l2[1] > 0) && !(g->l2_mb > 0))
      return sr_input_error(e, file, "gpu.attn_l2", "given without gpu.l2_mb, the cache it is beyond");
  }
  return SR_OK;
}

// "calibration": {"measured": true|false, "source": "..."} (optional: absent means not measured).
static int parse_calibration(const cJSON *root, const char *file, cluster_desc *c, sr_error *e) {
  static const char *const known[] = {"measured", "source", NULL};
  const cJSON *cal = cJSON_GetObjectItemCaseSensitive(root, "calibration");
  if (!cal || cJSON_IsNull(cal)) return SR_OK;
  if (!cJSON_IsObject(cal)) return sr_input_error(e, file, "calibration", "expected an object {measured, source}");
  int rc = json_check_known(cal, known, file, "calibration", e);
  if (!rc) rc = json_get_bool(cal, "measured", 1, &c->calibrated, file, "calibration", e);
  if (!rc) rc = json_get_str(cal, "source", 1, c->calibration, sizeof c->calibration, file, "calibration", e);
  return rc;
}

static int parse_links(const cJSON *root, const char *file, cluster_desc *c, sr_error *e) {
  static const char *const known_intra[] = {"gbps", "latency_us", NULL};
  static const char *const known_inter[] = {"nics_per_node", "nic_gbps", "latency_us", NULL};
  static const char *const known_host[] = {"pcie_gbps", "latency_us", "mem_gib", NULL};
  int rc;
  const cJSON *intra = NULL, *host = NULL;

  // Intra-node link: required when a node has more than one GPU (a lone GPU talks to no peer).
  c->intra.latency_us = 3.0;
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "intra_node");
  if (it || c->gpus_per_node > 1) {
    if ((rc = json_get_obj(root, "intra_node", &intra, file, NULL, e))) return rc;
    if ((rc = json_check_known(intra, known_intra, file, "intra_node", e))) return rc;
    if ((rc = get_positive(intra, "gbps", 1, 1e5, "GB/s per direction per GPU", &c->intra.gbps, file, "intra_node", e)))
      return rc;
    if ((rc = get_latency(intra, "latency_us", &c->intra.latency_us, file, "intra_node", e))) return rc;
  }

  // Inter-node network: required with more than one node; optional (and unused) on one node.
  c->nic.latency_us = 5.0;
  it = cJSON_GetObjectItemCaseSensitive(root, "inter_node");
  if (it || c->nodes > 1) {
    const cJSON *inter = NULL;
    if ((rc = json_get_obj(root, "inter_node", &inter, file, NULL, e))) return rc;
    if ((rc = json_check_known(inter, known_inter, file, "inter_node", e))) return rc;
    int64_t nics = 0;
    if ((rc = json_get_int(inter, "nics_per_node", 1, 1, 1024, &nics, file, "inter_node", e))) return rc;
    c->nics_per_node = (int)nics;
    if ((rc = get_positive(inter, "nic_gbps", 1, 1e5, "GB/s per NIC per direction", &c->nic.gbps, file, "inter_node", e)))
      return rc;
    if ((rc = get_latency(inter, "latency_us", &c->nic.latency_us, file, "inter_node", e))) return rc;
  }

  if ((rc = json_get_obj(root, "host", &host, file, NULL, e))) return rc;
  if ((rc = json_check_known(host, known_host, file, "host", e))) return rc;
  if ((rc = get_positive(host, "pcie_gbps", 1, 1e5, "GB/s per direction per GPU", &c->host.gbps, file, "host", e)))
    return rc;
  c->host.latency_us = 10.0;
  if ((rc = get_latency(host, "latency_us", &c->host.latency_us, file, "host", e))) return rc;
  if ((rc = get_positive(host, "mem_gib", 1, 1e7, "GiB per node", &c->host_mem_gib, file, "host", e))) return rc;
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// loading

static void cluster_name_from_path(const char *path, char *out, size_t size) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  if (n > 5 && strcmp(base + n - 5, ".json") == 0) n -= 5;
  snprintf(out, size, "%.*s", (int)n, base);
}

int cluster_from_json_text(const char *text, const char *file, cluster_desc *c, sr_error *e) {
  static const char *const known[] = {"name", "description", "nodes", "gpus_per_node", "gpu",
                                      "intra_node", "inter_node", "host", "calibration", NULL};
  memset(c, 0, sizeof *c);
  cJSON *root = NULL;
  int rc = json_parse_text(text, file, &root, e);
  if (rc) return rc;
  if (!cJSON_IsObject(root)) {
    rc = sr_input_error(e, file, NULL, "expected a JSON object (a cluster description)");
    goto done;
  }
  if ((rc = json_check_known(root, known, file, NULL, e))) goto done;
  cluster_name_from_path(file, c->name, sizeof c->name);
  if ((rc = json_get_str(root, "name", 0, c->name, sizeof c->name, file, NULL, e))) goto done;
  if ((rc = json_get_str(root, "description", 0, c->description, sizeof c->description, file, NULL, e))) goto done;
  int64_t nodes = 0, gpn = 0;
  if ((rc = json_get_int(root, "nodes", 1, 1, 1 << 20, &nodes, file, NULL, e))) goto done;
  if ((rc = json_get_int(root, "gpus_per_node", 1, 1, 1024, &gpn, file, NULL, e))) goto done;
  if (nodes * gpn > (1 << 24)) {
    rc = sr_input_error(e, file, "nodes", "%lld nodes x %lld GPUs is more GPUs than supported (16M)", (long long)nodes,
                        (long long)gpn);
    goto done;
  }
  c->nodes = (int)nodes;
  c->gpus_per_node = (int)gpn;
  if ((rc = parse_gpu(root, file, &c->gpu, e))) goto done;
  if ((rc = parse_links(root, file, c, e))) goto done;
  if ((rc = parse_calibration(root, file, c, e))) goto done;
  snprintf(c->path, sizeof c->path, "%s", file);
done:
  cJSON_Delete(root);
  return rc;
}

int cluster_load(const char *name_or_path, cluster_desc *c, sr_error *e) {
  memset(c, 0, sizeof *c);
  char path[512];
  int rc = sr_find_data_file(name_or_path, "models/clusters", path, sizeof path, e);
  if (rc) return rc;
  char *text = NULL;
  if ((rc = sr_read_file(path, &text, NULL, e))) return rc;
  rc = cluster_from_json_text(text, path, c, e);
  free(text);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// writing

// cJSON's adders return NULL when memory runs out; *ok records any failure so that a half-built
// description is never printed.
static void add_num(cJSON *obj, const char *key, double v, int *ok) {
  if (!obj || !json_add_number_exact(obj, key, v)) *ok = 0;  // calibrated figures read back bit for bit
}
static void add_str(cJSON *obj, const char *key, const char *v, int *ok) {
  if (!obj || !cJSON_AddStringToObject(obj, key, v)) *ok = 0;
}
static cJSON *add_obj(cJSON *obj, const char *key, int *ok) {
  cJSON *o = obj ? cJSON_AddObjectToObject(obj, key) : NULL;
  if (!o) *ok = 0;
  return o;
}

char *cluster_to_json(const cluster_desc *c) {
  const gpu_desc *g = &c->gpu;
  int ok = 1;
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  add_str(root, "name", c->name, &ok);
  if (c->description[0]) add_str(root, "description", c->description, &ok);
  add_num(root, "nodes", c->nodes, &ok);
  add_num(root, "gpus_per_node", c->gpus_per_node, &ok);
  cJSON *gpu = add_obj(root, "gpu", &ok);
  add_str(gpu, "name", g->name, &ok);
  add_num(gpu, "peak_tflops", g->peak_tflops, &ok);
  add_num(gpu, "fp64_tflops", g->fp64_tflops, &ok);
  add_num(gpu, "fp8_tflops", g->fp8_tflops, &ok);
  add_num(gpu, "hbm_gbps", g->hbm_gbps, &ok);
  add_num(gpu, "mem_gib", g->mem_gib, &ok);
  cJSON *eff = add_obj(gpu, "efficiency", &ok);
  add_num(eff, "gemm", g->eff_gemm, &ok);
  if (g->eff_gemm_sustained > 0) add_num(eff, "gemm_sustained", g->eff_gemm_sustained, &ok);
  add_num(eff, "attn_fwd_full", g->eff_attn_fwd_full, &ok);
  add_num(eff, "attn_fwd_partial", g->eff_attn_fwd_partial, &ok);
  add_num(eff, "attn_fwd_bar", g->eff_attn_fwd_bar, &ok);
  add_num(eff, "attn_bwd_full", g->eff_attn_bwd_full, &ok);
  add_num(eff, "attn_bwd_partial", g->eff_attn_bwd_partial, &ok);
  add_num(eff, "attn_bwd_bar", g->eff_attn_bwd_bar, &ok);
  add_num(eff, "mem", g->eff_mem, &ok);
  if (g->eff_attn_sustained > 0) add_num(eff, "attn_sustained", g->eff_attn_sustained, &ok);
  add_num(gpu, "comm_slowdown", g->comm_slowdown, &ok);
  if (g->adaspa_search_ratio > 0) add_num(gpu, "adaspa_search_ratio", g->adaspa_search_ratio, &ok);
  if (g->ring_step_us[0] > 0 || g->ring_step_us[1] > 0 || g->ring_cell_us[0] > 0 || g->ring_cell_us[1] > 0) {
    cJSON *ring = add_obj(gpu, "ring_step", &ok);
    add_num(ring, "fwd_us", g->ring_step_us[0], &ok);
    add_num(ring, "bwd_us", g->ring_step_us[1], &ok);
    add_num(ring, "fwd_cell_us", g->ring_cell_us[0], &ok);
    add_num(ring, "bwd_cell_us", g->ring_cell_us[1], &ok);
  }
  if (g->bar_walk_us > 0) add_num(gpu, "bar_walk_us", g->bar_walk_us, &ok);
  if (g->bar_walk_parts > 0) add_num(gpu, "bar_walk_parts", g->bar_walk_parts, &ok);
  if (g->bar_walk_ws) add_num(gpu, "bar_walk_ws", g->bar_walk_ws, &ok);
  if (g->bar_walk_pairs) add_num(gpu, "bar_walk_pairs", g->bar_walk_pairs, &ok);
  if (g->attn_walk_us[0] > 0 || g->attn_walk_us[1] > 0) {
    cJSON *walk = add_obj(gpu, "attn_walk", &ok);
    add_num(walk, "fwd_us", g->attn_walk_us[0], &ok);
    add_num(walk, "bwd_us", g->attn_walk_us[1], &ok);
  }
  if (g->l2_mb > 0) add_num(gpu, "l2_mb", g->l2_mb, &ok);
  if (g->attn_l2[0] > 0 || g->attn_l2[1] > 0) {
    cJSON *l2 = add_obj(gpu, "attn_l2", &ok);
    add_num(l2, "fwd", g->attn_l2[0], &ok);
    add_num(l2, "bwd", g->attn_l2[1], &ok);
  }
  if (c->gpus_per_node > 1) {
    cJSON *intra = add_obj(root, "intra_node", &ok);
    add_num(intra, "gbps", c->intra.gbps, &ok);
    add_num(intra, "latency_us", c->intra.latency_us, &ok);
  }
  if (c->nics_per_node > 0) {
    cJSON *inter = add_obj(root, "inter_node", &ok);
    add_num(inter, "nics_per_node", c->nics_per_node, &ok);
    add_num(inter, "nic_gbps", c->nic.gbps, &ok);
    add_num(inter, "latency_us", c->nic.latency_us, &ok);
  }
  cJSON *host = add_obj(root, "host", &ok);
  add_num(host, "pcie_gbps", c->host.gbps, &ok);
  add_num(host, "latency_us", c->host.latency_us, &ok);
  add_num(host, "mem_gib", c->host_mem_gib, &ok);
  if (c->calibration[0]) {
    cJSON *cal = add_obj(root, "calibration", &ok);
    if (cal && !cJSON_AddBoolToObject(cal, "measured", c->calibrated)) ok = 0;
    add_str(cal, "source", c->calibration, &ok);
  }
  char *out = ok ? json_print_stable(root) : NULL;
  cJSON_Delete(root);
  return out;
}

double cluster_inter_gbps_per_gpu(const cluster_desc *c) {
  // The node's NICs are shared by its GPUs; a single-node cluster has no inter-node traffic.
  if (c->nics_per_node <= 0 || c->gpus_per_node <= 0) return 0.0;
  return (double)c->nics_per_node * c->nic.gbps / (double)c->gpus_per_node;
}

const char *cluster_calibration_note(const cluster_desc *c, char *buf, size_t size) {
  if (c->calibrated) snprintf(buf, size, "calibrated: %s", c->calibration[0] ? c->calibration : c->path);
  else if (c->calibration[0]) snprintf(buf, size, "uncalibrated: efficiencies from %s", c->calibration);
  else snprintf(buf, size, "uncalibrated: efficiencies from %s (no calibration recorded)", c->path[0] ? c->path : c->name);
  return buf;
}
