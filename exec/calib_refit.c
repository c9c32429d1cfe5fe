// calib_refit.c — a calibration done again from the points an earlier one logged (calibrate.h,
// calib_refit_from_log): the kept timings of a GPU run under the current fitting rules, on any machine, so
// that a change of rule reaches every kept calibration without the GPU (`sparsering-exec calibrate --refit`).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/calibrate.h"

#define MAX_POINTS 16  // timed sizes of one (phase, kind) a log may hold

typedef struct {
  int n[2][3];
  double flops[2][3][MAX_POINTS], seconds[2][3][MAX_POINTS];
  calib_ring ring;  // measured_s of the configurations found, by index; world[i] 0 where absent
  calib_layer layer;  // the layer-shaped calls logged (layer.n 0: a log from before them)
} refit_points;

static const char *const phases[2] = {"fwd", "bwd"}, *const kinds[3] = {"full", "partial", "bar"};

// One CSV line: an attention point (attn_PHASE_KIND,flops,us), a layer-shaped call (layer_SHAPE,tokens,fwd_us,bwd_us)
// or a ring row (ring_LAYOUT_wW,cells,fwd_us,bwd_us); links and GEMM rows are not refitted. Ring rows go to the
// configuration of calibration with that layout and size.
static int parse_line(const char *path, int lineno, char *line, refit_points *pt, const calib_ring *names, int heads,
                      sr_error *e) {
  char *f[4] = {0};
  int nf = 0;
  for (char *s = line; nf < 4;) {
    f[nf++] = s;
    char *c = strchr(s, ',');
    if (!c) break;
    *c = 0, s = c + 1;
  }
  if (strncmp(f[0], "attn_", 5) == 0) {
    for (int p = 0; p < 2; p++)
      for (int k = 0; k < 3; k++) {
        char want[32];
        snprintf(want, sizeof want, "attn_%s_%s", phases[p], kinds[k]);
        if (strcmp(f[0], want) != 0) continue;
        if (nf < 3 || pt->n[p][k] >= MAX_POINTS)
          return sr_input_error(e, path, "line", "%d: expected attn_PHASE_KIND,flops,us (at most %d a kind)", lineno,
                                MAX_POINTS);
        pt->flops[p][k][pt->n[p][k]] = atof(f[1]), pt->seconds[p][k][pt->n[p][k]++] = atof(f[2]) * 1e-6;
        return SR_OK;
      }
    return sr_input_error(e, path, "line", "%d: unknown attention measure '%s'", lineno, f[0]);
  }
  if (strncmp(f[0], "layer_", 6) == 0) {
    calib_layer *ly = &pt->layer;
    if (nf < 4) return sr_input_error(e, path, "line", "%d: expected layer_SHAPE,tokens,fwd_us,bwd_us", lineno);
    char *end;
    long long tokens = strtoll(f[1], &end, 10);
    if (*end || tokens <= 0) return sr_input_error(e, path, "line", "%d: '%s' is no token count", lineno, f[1]);
    if (calib_layer_add(ly, f[0] + 6, tokens, heads, e)) {
      char why[sizeof e->msg];  // the message is rewritten
      snprintf(why, sizeof why, "%s", e->msg);
      return sr_input_error(e, path, "line", "%d: %s", lineno, why);
    }
    ly->seconds[0][ly->n - 1] = atof(f[2]) * 1e-6, ly->seconds[1][ly->n - 1] = atof(f[3]) * 1e-6;
    return SR_OK;
  }
  if (strncmp(f[0], "ring_", 5) == 0) {
    for (int i = 0; i < CALIB_RING_CONFIGS; i++) {
      char want[64];
      snprintf(want, sizeof want, "ring_%s_w%d", names->layout[i], names->world[i]);
      if (strcmp(f[0], want) != 0) continue;
      if (nf < 4) return sr_input_error(e, path, "line", "%d: expected %s,cells,fwd_us,bwd_us", lineno, want);
      pt->ring.world[i] = names->world[i];
      pt->ring.measured_s[0][i] = atof(f[2]) * 1e-6, pt->ring.measured_s[1][i] = atof(f[3]) * 1e-6;
      return SR_OK;
    }
    return sr_input_error(e, path, "line", "%d: '%s' is no ring configuration of the calibration", lineno, f[0]);
  }
  return SR_OK;
}

// The configurations' names (layout, ring size) without timing them.
static int ring_names(const gpu_desc *g, int heads, int kvh, int hd, calib_ring *names, sr_error *e) {
  memset(names, 0, sizeof *names);
  for (int i = 0; i < CALIB_RING_CONFIGS; i++)
    if (calib_ring_config_model(g, i, heads, kvh, hd, names, e)) return e->code;
  return SR_OK;
}

// The ring-step fit over the configurations the log holds, against the kernel time at the slopes' rates (the
// ring benchmark's calls are of the calibration's own size, where the slope holds: calib_ring_measure), or, with
// layer-shaped calls logged, at the efficiencies and walks fitted to them (the ring benchmark then ran on their inputs).
static int refit_ring(const refit_points *pt, const gpu_desc *slopes, cluster_desc *cl, int heads, int kvh, int hd,
                      sr_error *e) {
  calib_ring r;
  memset(&r, 0, sizeof r);
  for (int i = 0; i < CALIB_RING_CONFIGS; i++) {
    if (!pt->ring.world[i]) continue;
    calib_ring one;
    memset(&one, 0, sizeof one);
    if (calib_ring_config_model(slopes, i, heads, kvh, hd, &one, e)) return e->code;
    int j = r.n++;
    memcpy(r.layout[j], one.layout[i], sizeof r.layout[j]);
    r.world[j] = one.world[i], r.steps[j] = one.steps[i], r.cells[j] = one.cells[i];
    for (int p = 0; p < 2; p++) r.kernel_s[p][j] = one.kernel_s[p][i], r.measured_s[p][j] = pt->ring.measured_s[p][i];
  }
  if (r.n == 0) return SR_OK;  // a log from before the ring-step benchmark: the file's ring steps stay
  if (calib_ring_fit(&r, e)) return e->code;
  for (int p = 0; p < 2; p++) cl->gpu.ring_step_us[p] = r.step_us[p], cl->gpu.ring_cell_us[p] = r.cell_us[p];
  return SR_OK;
}

int calib_refit_from_log(const char *path, const char *csv, cluster_desc *cl, int heads, int kv_heads, int head_dim,
                         sr_error *e) {
  refit_points *pt = calloc(1, sizeof *pt);
  calib_ring *names = calloc(1, sizeof *names);
  char *text = csv ? strdup(csv) : NULL;
  int rc = SR_OK, lineno = 0;
  if (!pt || !names || !text) {
    rc = sr_internal_error(e, 0, "out of memory");
    goto done;
  }
  if ((rc = ring_names(&cl->gpu, heads, kv_heads, head_dim, names, e))) goto done;
  for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    line[strcspn(line, "\r")] = 0;
    if (++lineno == 1 && strncmp(line, "measure,", 8) == 0) continue;  // the header
    if ((rc = parse_line(path, lineno, line, pt, names, heads, e))) goto done;
  }
  double peak = cl->gpu.peak_tflops;
  if (!(peak > 0)) {
    rc = sr_input_error(e, path, "gpu.peak_tflops", "the cluster file gives no peak to relate the rates to");
    goto done;
  }
  gpu_desc slopes = cl->gpu;
  double *eff[2][3] = {{&cl->gpu.eff_attn_fwd_full, &cl->gpu.eff_attn_fwd_partial, &cl->gpu.eff_attn_fwd_bar},
                       {&cl->gpu.eff_attn_bwd_full, &cl->gpu.eff_attn_bwd_partial, &cl->gpu.eff_attn_bwd_bar}};
  double *slope[2][3] = {{&slopes.eff_attn_fwd_full, &slopes.eff_attn_fwd_partial, &slopes.eff_attn_fwd_bar},
                         {&slopes.eff_attn_bwd_full, &slopes.eff_attn_bwd_partial, &slopes.eff_attn_bwd_bar}};
  for (int p = 0; p < 2; p++)
    for (int k = 0; k < 3; k++) {
      double tflops, fixed_us;
      if (pt->n[p][k] < 2) {
        rc = sr_input_error(e, path, "attn", "%s %s: %d timed size(s), a calibration logs at least 2", phases[p], kinds[k],
                            pt->n[p][k]);
        goto done;
      }
      if ((rc = calib_fit_rate(pt->flops[p][k], pt->seconds[p][k], pt->n[p][k], &tflops, &fixed_us, e))) goto done;
      *slope[p][k] = tflops / peak;
      *eff[p][k] = calib_sustained_rate(pt->flops[p][k], pt->seconds[p][k], pt->n[p][k]) / peak;
    }
  if ((rc = calib_bar_walk_fit(path, pt->flops[1][2], pt->seconds[1][2], pt->n[1][2], heads, kv_heads, head_dim,
                               cl->gpu.name, cl->gpu.bar_walk_ws, cl->gpu.bar_walk_pairs, &cl->gpu.bar_walk_us, e)))
    goto done;
  // the L2 the calls' keys are set against: the file's, else the datasheet's of the GPU it names (0: unknown)
  if (!(cl->gpu.l2_mb > 0)) cl->gpu.l2_mb = calib_gpu_l2(cl->gpu.name);
  if (pt->layer.n > 0) {  // the full tiles' rates, walks and loss beyond the L2 from the layer-shaped calls; the ring
                          // steps against them
    if ((rc = calib_layer_fit(&pt->layer, &cl->gpu, heads, kv_heads, head_dim, e))) {
      char why[sizeof e->msg];  // the message is rewritten
      snprintf(why, sizeof why, "%s", e->msg);
      rc = sr_input_error(e, path, "layer calls", "%s", why);
      goto done;
    }
    cl->gpu.eff_attn_fwd_full = pt->layer.tflops[0] / peak, cl->gpu.eff_attn_bwd_full = pt->layer.tflops[1] / peak;
    for (int p = 0; p < 2; p++)
      cl->gpu.attn_walk_us[p] = pt->layer.walk_us[p], cl->gpu.attn_l2[p] = pt->layer.l2_slow[p];
    slopes = cl->gpu;
  } else {  // a log from before them: the file's walks and L2 loss (none) stay out of the rule before them
    cl->gpu.attn_walk_us[0] = cl->gpu.attn_walk_us[1] = 0, cl->gpu.attn_l2[0] = cl->gpu.attn_l2[1] = 0;
    slopes.attn_walk_us[0] = slopes.attn_walk_us[1] = 0, slopes.attn_l2[0] = slopes.attn_l2[1] = 0;
  }
  rc = refit_ring(pt, &slopes, cl, heads, kv_heads, head_dim, e);
done:
  free(pt), free(names), free(text);
  return rc;
}
