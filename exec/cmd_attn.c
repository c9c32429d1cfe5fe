// cmd_attn.c — `sparsering-exec attn`: distributed forward + backward of attention for a plan on
// seeded random Q/K/V (--inputs vs: Q and K whose attention is vertical-slash), with an optional check
// against single-process dense masked attention, a timeline (CSV + Chrome trace) and the bytes that
// skipping saved, the simulator's prediction (--predict; vs-online: from the pattern the run estimated)
// and that pattern as a trace (--trace-out). --layout, --schedule and
// --pattern take comma-separated lists: every combination runs in the same mpirun (the tests use it
// to cover layouts x schedules x patterns without paying the MPI start-up each time).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/attn_data.h"
#include "exec/calibrate.h"
#include "exec/comm.h"
#include "exec/dist_attn.h"
#include "exec/exec.h"
#include "exec/exec_dev.h"
#include "exec/exec_plan.h"
#include "sim/predict.h"
#include "exec/timeline.h"
#include "kernels/workspace.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"
#include "plan/util.h"
#include "traces/trace.h"

// --layout, --schedule and --pattern take lists here (this table's rows refine plan_spec_flags' rows).
static const cli_flag attn_flags[] = {
    {"layout", "L,...", "required unless --strategy", "layouts to run, comma-separated (each as in sparsering plan)"},
    {"schedule", "S,...", "required unless --strategy", "schedules to run, comma-separated"},
    {"pattern", "P,...", "dense, or the strategy's", "patterns to run, comma-separated; every combination runs"},
    EXEC_MOBA_GATE_FLAG,
    {"backend", "NAME", "cpu", "cpu (the reference kernels over MPI) or cuda (one GPU a rank, NCCL)"},
    {"layers", "N", "1", "layers to run, 1 to 1000 (each with its own pattern)"},
    {"repeat", "N", "1", "forward + backward repetitions a layer (the last one is timed into the timeline)"},
    {"inputs", "KIND", "random", "Q, K, V: random, or vs (attention that is vertical-slash)"},
    {"data-seed", "X", "1", "seed of the inputs"},
    {"check", NULL, NULL, "compare every layer against single-process dense masked attention"},
    {"tol", "X", "1e-4 (cpu), 2e-2 (cuda)", "the check's tolerance (relative)"},
    {"predict", NULL, NULL, "print the simulator's prediction of every layer beside the measured time"},
    {"predict-csv", cli_out_file, NULL, "with the prediction: write its timeline as CSV (implies --predict)"},
    {"csv", cli_out_file, NULL, "write the measured timeline as CSV (sparsering compare reads it)"},
    {"trace", cli_out_file, NULL, "write the measured timeline as Chrome trace JSON (Perfetto)"},
    {"run", "N", "0", "run number of the first combination in the timeline"},
    {"trace-out", cli_out_file, NULL, "write the pattern the run ran (vs-online: the estimated one) as a trace"},
    {"digest", NULL, NULL, "print a hash of every layer's O, LSE, dQ, dK, dV over the ranks (bit-exact comparison of runs)"},
    {"plan-bytes-only", NULL, NULL, "set every layer's plan up and print what it keeps in device memory, item by item; "
     "run no attention"},
    {"fail-rank", "R", "-1 (none)", "testing: this rank fails during the run"},
    {"fail-at-step", "S", "0", "testing: the ring step at which --fail-rank fails"},
    {"fail-mode", "MODE", "kill", "testing: kill (the rank exits) or hang (it stops answering)"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage attn_usage = {
    NULL,
    "mpirun -np 2 sparsering-exec attn --backend cpu --model tiny-test --cluster h200-1x2 --seq 700 --layout zigzag "
    "--schedule ring --pattern vs-like:4:16:8 --check",
    {plan_spec_flags, exec_plan_flags, attn_flags, NULL}};

typedef struct {
  int cuda, check, fail_hang, predict, inputs, digest, plan_bytes_only;
  int layer_times;  // SR_LAYER_TIMES=1: every layer's wall time by part (layer_clock)
  double t_start;   // when the command started (the start-up's time, with layer_times)
  int64_t run;      // --run: the first combination's run number (the start-up is printed before its layer 0)
  const char *predict_csv, *trace_out;
  int64_t layers, data_seed, fail_rank, fail_step, repeat;
  double tol;
  dist_index_build index_build;  // --index-build
  int moba_gate;                 // --moba-gate: EXEC_GATE_HOST, _GPU or _AUTO
} attn_opts;

// A rank that hits an error stops the whole job with the message (never a hang on the others).
static void fail(comm *c, sr_error *e) __attribute__((noreturn));
static void fail(comm *c, sr_error *e) {
  char m[1100];
  snprintf(m, sizeof m, "%s", e->msg);
  comm_abort(c, c->rank, m, comm_status_of(e));
}

// --trace-out: the pattern the run ran (vs-online: estimated by its last forward) as a one-step trace
// (docs/traces.md), by the writer the trainer's --trace uses. A trace holds every layer of the model; when
// --layers ran fewer, the layers not run repeat the run ones cyclically (the origin says so) rather than
// keep the synthetic stand-in, which the inputs never produced.
static int trace_out_write(const attn_opts *o_, const plan *pl, pattern *pat, int layers, sr_error *e) {
  int online = pattern_spec_at_run_time(pl->spec.pattern);
  if (online)
    for (int l = layers; l < pat->layers; l++) {
      int src = l % layers;
      for (int h = 0; h < pat->heads; h++) {
        head_pattern *d = pattern_head(pat, l, h);
        const head_pattern *s = pattern_head(pat, src, h);
        free(d->vertical), free(d->slash), free(d->mask);
        *d = *s;  // kind and sizes (a BLOCK head's block, blocks and words); the arrays are copied below
        size_t mask_bytes = s->mask ? sizeof(uint64_t) * (size_t)(s->n_blocks * s->row_words) : 0;
        d->vertical = malloc(sizeof(int32_t) * (size_t)s->n_vertical + 4);
        d->slash = malloc(sizeof(int32_t) * (size_t)s->n_slash + 4);
        d->mask = s->mask ? malloc(mask_bytes + 8) : NULL;
        if (!d->vertical || !d->slash || (s->mask && !d->mask)) return sr_internal_error(e, 0, "out of memory");
        if (s->n_vertical) memcpy(d->vertical, s->vertical, sizeof(int32_t) * (size_t)s->n_vertical);
        if (s->n_slash) memcpy(d->slash, s->slash, sizeof(int32_t) * (size_t)s->n_slash);
        if (s->mask) memcpy(d->mask, s->mask, mask_bytes);
      }
    }
  trace_info ti;
  memset(&ti, 0, sizeof ti);
  trace_info_set_model(&ti, &pl->model);
  ti.seq_len = pat->n_tokens;
  ti.layers = pat->layers;
  ti.heads = pat->heads;
  snprintf(ti.source, sizeof ti.source, "executor");
  char lay[600];
  snprintf(ti.origin, sizeof ti.origin, "sparsering-exec attn %s | %s | %s, inputs %s, data seed %lld%s",
           plan_spec_layout_flag(&pl->spec, lay, sizeof lay), pl->spec.schedule, pl->spec.pattern,
           o_->inputs == ATTN_INPUTS_VS ? "vs" : "random", (long long)o_->data_seed,
           online && layers < pat->layers ? "; layers past --layers repeat the estimated ones" : "");
  ti.seed = pl->spec.seed;
  trace_writer tw;
  int rc = trace_writer_begin(&tw, &ti, e);
  if (!rc) rc = trace_writer_add_step(&tw, pat, NULL, e);
  if (!rc && trace_writer_finish(&tw, o_->trace_out, e)) {
    char why[600];
    snprintf(why, sizeof why, "%s", e->msg);
    rc = sr_input_error(e, NULL, "--trace-out", "%s: cannot write the trace (%s)", o_->trace_out, why);
  }
  trace_writer_free(&tw);
  return rc;
}

// The online estimate and the block search combine exact fixed-point sums, so every rank selects the same
// pattern and rank 0's copy is the run's; a hash of the layer's indices (and block masks), compared over the
// ranks, makes that a checked fact.
static int same_on_every_rank(comm *c, const pattern *pat, int layer, sr_error *e) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (int i = 0; i < pat->heads; i++) {
    const head_pattern *hp = pattern_head(pat, layer, i);
    for (int64_t w = 0; hp->kind == PATTERN_BLOCK && w < hp->n_blocks * hp->row_words; w++)
      h = (h ^ hp->mask[w]) * 1099511628211ull;
    if (hp->kind == PATTERN_MOBA || hp->kind == PATTERN_TOKENS) {  // a gate's selection: its arrays
      int moba = hp->kind == PATTERN_MOBA;
      int64_t n = moba ? hp->sel_off[hp->n_groups] : hp->tok_off[hp->n_groups];
      const int64_t *off = moba ? hp->sel_off : hp->tok_off;
      const int32_t *v = moba ? hp->sel : hp->tok_key;
      for (int64_t t = 0; t <= hp->n_groups; t++) h = (h ^ (uint64_t)off[t]) * 1099511628211ull;
      for (int64_t x = 0; x < n; x++) h = (h ^ (uint32_t)v[x]) * 1099511628211ull;
      for (int64_t x = 0; !moba && x < 2 * n; x++) h = (h ^ hp->tok_rows[x]) * 1099511628211ull;
      continue;
    }
    int32_t nv = hp->kind == PATTERN_VS ? hp->n_vertical : -1, ns = hp->kind == PATTERN_VS ? hp->n_slash : -1;
    for (int32_t j = -1; j < nv + ns + 1; j++) {
      int32_t x = j < 0 ? nv : j < nv ? hp->vertical[j] : j == nv ? ns : hp->slash[j - nv - 1];
      h = (h ^ (uint32_t)x) * 1099511628211ull;
    }
  }
  uint64_t lo = h, hi = h;
  if (comm_host_allreduce(c, &lo, 1, MPI_UINT64_T, MPI_MIN, e) || comm_host_allreduce(c, &hi, 1, MPI_UINT64_T, MPI_MAX, e))
    return e->code;
  if (lo != hi) return sr_internal_error(e, 0, "layer %d: the ranks estimated different patterns", layer);
  return SR_OK;
}

// Can --trace-out's file be created (its folder writable, the path not a folder)? Checked before the run so
// a long run does not end in an unwritable path; the write itself still reports its own failure.
static int trace_out_check(const char *path, sr_error *e) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) dir[1] = 0;
  else *slash = 0;
  struct stat st;
  if (path[0] == 0 || (stat(path, &st) == 0 && S_ISDIR(st.st_mode)))
    return sr_input_error(e, NULL, "--trace-out", "'%s' is not a file path", path);
  if (access(dir, W_OK | X_OK) != 0)
    return sr_input_error(e, NULL, "--trace-out", "%s: cannot write in folder %s (%s)", path, dir, strerror(errno));
  return SR_OK;
}

// adaspa-online: the layer's searches and reuses, the searched mask's recall and budgets, the reused mask's recall
// (measured on the repetitions' inputs, which the cached LSE describes) and the last search's times.
// The layer's work as the plan counts it (plan/tiles.h): the kept pairs and what the kernels compute (whole
// tiles and bars), both as shares of the causal pairs, so a time can be read against the dense rate per pair.
static int work_print(const plan *pl, const pattern *pat, int layer, sr_error *e) {
  int W = pl->layout.world, H = pat->heads;
  work_count *wc = malloc((size_t)H * (size_t)W * (size_t)W * sizeof *wc);
  if (!wc) return sr_internal_error(e, 0, "attn: out of memory");
  int rc = tiles_account_layer(pat, layer, &pl->layout, wc, e);
  if (rc) {
    free(wc);
    return rc;
  }
  double kept = 0, computed = 0;
  for (int64_t i = 0; i < (int64_t)H * W * W; i++)
    kept += wc[i].pairs, computed += (double)(wc[i].full + wc[i].partial) * TILE * TILE + (double)wc[i].bars * TILE;
  free(wc);
  double causal = (double)H * model_causal_pairs(pl->spec.seq);
  printf("  layer %d: work: kept pairs %.4f%% of causal, computed %.4f%% (%.2fx the kept)\n", layer,
         100 * kept / causal, 100 * computed / causal, kept > 0 ? computed / kept : 0.0);
  return SR_OK;
}

static int search_print(dist_attn *da, int layer, sr_error *e) {
  dist_search_stats s;
  if (dist_attn_search_stats(da, &s, e)) return e->code;
  printf("  layer %d: search: %lld search(es), %lld reuse(s), %lld dense pass(es); recall %.4f at the search (mean "
         "sparsity %.4f)", layer, (long long)s.searches, (long long)s.reuses, (long long)s.dense_passes, s.recall_search,
         s.sparsity_mean);
  if (s.reused_measured > 0) printf(", %.4f reused (%lld forwards)", s.recall_reused, (long long)s.reused_measured);
  if (s.last_from_table)
    printf("; last dense pass with the masses from its block table %.3f ms (%lld such), then the selections %.3f ms, "
           "its mask to execution form %.3f ms\n", 1e3 * s.dense_s, (long long)s.table_searches, 1e3 * s.search_s,
           1e3 * s.index_s);
  else
    printf("; last dense pass %.3f ms, last LSE-cached search %.3f ms, its mask to execution form %.3f ms\n",
           1e3 * s.dense_s, 1e3 * s.search_s, 1e3 * s.index_s);
  return SR_OK;
}

// --digest: FNV-1a over the bits of this rank's outputs, then over the ranks' hashes in rank order (rank 0's).
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static int outputs_digest(comm *c, const float *o, const float *lse, const float *dq, const float *dk, const float *dv,
                          size_t qn, size_t kn, size_t ln, uint64_t *out, sr_error *e) {
  uint64_t h = 1469598103934665603ull;
  h = fnv(h, o, qn * 4), h = fnv(h, lse, ln * 4), h = fnv(h, dq, qn * 4), h = fnv(h, dk, kn * 4), h = fnv(h, dv, kn * 4);
  uint64_t *all = malloc(sizeof(uint64_t) * (size_t)c->world);
  if (!all) return sr_internal_error(e, 0, "out of memory");
  if (comm_host_gather(c, &h, 1, MPI_UINT64_T, all, 0, e)) {
    free(all);
    return e->code;
  }
  *out = fnv(1469598103934665603ull, all, sizeof(uint64_t) * (size_t)c->world);
  free(all);
  return SR_OK;
}

// What the run held, largest over its layers and ranks: device memory in use after a layer (CUDA), the attention
// plan's own device bytes, the shared workspace, pinned host memory (CUDA) or the offloaded chunks (CPU backend),
// and the bytes copied to and from the host.
typedef struct {
  double used, plan, shared, pinned, offload, out, in;
} attn_memory;

static int memory_after_layer(const attn_opts *o_, dist_attn *da, attn_memory *m, sr_error *e) {
  int64_t plan = 0, shared = 0, used = 0, total = 0;
  dist_attn_device_bytes(da, &plan, &shared);
  if (o_->cuda && exec_dev_memory(&used, &total, e)) return e->code;
  dist_stats st = dist_attn_stats(da);
  double v[7] = {(double)used, (double)plan, (double)shared, (double)dist_attn_shared_pinned_bytes(),
                 (double)dist_attn_offload_bytes(da), (double)st.host_bytes_out, (double)st.host_bytes_in};
  double *f = &m->used;
  for (int i = 0; i < 7; i++) f[i] = fmax(f[i], v[i]);
  return SR_OK;
}

// Bytes as "12.34 GiB", "56.7 MiB" or "8.0 KiB" (one of four rotating buffers: several in one printf).
static const char *size_text(double b) {
  static char buf[4][32];
  static int k;
  char *t = buf[k++ % 4];
  if (b >= 1073741824.0) snprintf(t, 32, "%.2f GiB", b / 1073741824.0);
  else if (b >= 1048576.0) snprintf(t, 32, "%.1f MiB", b / 1048576.0);
  else snprintf(t, 32, "%.1f KiB", b / 1024.0);
  return t;
}

// Rank 0's memory lines: measured (the largest rank) and, with --predict, the simulator's (pm: each item the largest
// over the layers), item by item, with its error against what the GPU had in use and against the items' sum.
static void memory_print(const attn_opts *o_, const plan *pl, comm *c, attn_memory *m, const sim_attn_memory *pm) {
  sr_error e = {0};
  if (comm_host_allreduce(c, &m->used, 7, MPI_DOUBLE, MPI_MAX, &e)) comm_abort(c, c->rank, e.msg, 1);
  if (c->rank != 0) return;
  int64_t n = 0;
  for (int r = 0; r < pl->layout.world; r++) n = sr_max64(n, pl->layout.rank_count[r]);
  const model_config *md = &pl->model;
  double inputs = (double)ws_layer_tensor_bytes(n, (int)md->num_heads, (int)md->num_kv_heads, (int)md->head_dim);
  if (o_->cuda) {
    printf("  memory per GPU (largest rank): %s in use after a layer (the rank's tensors %s, ", size_text(m->used),
           size_text(inputs));
    printf("the attention plan %s, the shared workspace %s); pinned host memory %s\n", size_text(m->plan),
           size_text(m->shared), size_text(m->pinned));
  } else if (m->offload > 0) {
    printf("  host memory (CPU backend, fp32): offloaded chunks %s a rank\n", size_text(m->offload));
  }
  if (m->out > 0) printf("  host copies (a rank, last repetition): %.0f B out, %.0f B back\n", m->out, m->in);
  if (!o_->predict) return;
  char text[300];
  predict_memory_text(pm, text, sizeof text);
  printf("  memory predicted (sim, the CUDA backend): %s", text);
  double items = inputs + m->plan + m->shared;
  if (o_->cuda && m->used > 0)
    printf("; error %+.1f%% of the memory in use, %+.1f%% of the items", 100 * (pm->total - m->used) / m->used,
           100 * (pm->total - items) / items);
  printf("\n");
}

// "layer L: plan device bytes ...": what the plan keeps in device memory on the CUDA backend (dist_plan_bytes), and
// its share of the shared workspace (dist_attn_workspace_bytes), each item the largest over the ranks.
static int plan_bytes_print(comm *c, const dist_attn *da, int layer, sr_error *e) {
  dist_plan_bytes b;
  int64_t ws;
  if (dist_attn_plan_bytes(da, &b, e) || dist_attn_workspace_bytes(da, &b, &ws, e)) return e->code;
  int64_t v[10] = {b.index, b.fwd_form, b.transposed, b.bar_chunks, b.masks, b.positions, b.bar_scratch, b.bars, b.bars_t, ws};
  if (comm_host_allreduce(c, v, 10, MPI_INT64_T, MPI_MAX, e)) return e->code;
  if (c->rank != 0) return SR_OK;
  dist_plan_bytes m = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]};
  printf("  layer %d: plan device bytes (largest rank): index %lld, forward form %lld, transposed %lld, bar chunks %lld, "
         "masks %lld, positions %lld; total %lld (%s); bars' scratch %lld, expanded bars %lld + %lld in the shared "
         "workspace of %lld (%s)\n",
         layer, (long long)m.index, (long long)m.fwd_form, (long long)m.transposed, (long long)m.bar_chunks,
         (long long)m.masks, (long long)m.positions, (long long)dist_plan_bytes_total(&m),
         size_text((double)dist_plan_bytes_total(&m)), (long long)m.bar_scratch, (long long)m.bars, (long long)m.bars_t,
         (long long)v[9], size_text((double)v[9]));
  fflush(stdout);
  return SR_OK;
}

// --plan-bytes-only: every layer's plan set up, its device bytes printed, and freed; no attention runs.
static int plan_bytes_only(const attn_opts *o_, comm *c, plan *pl, pattern *pat, sr_error *e) {
  int64_t layers = o_->layers < pat->layers ? o_->layers : pat->layers;
  for (int layer = 0; layer < layers; layer++) {
    dist_attn *da;
    double tc = sr_now();
    if (dist_attn_create_with(pl, pat, layer, c, o_->cuda ? DIST_CUDA : DIST_CPU, o_->index_build, &da, e)) fail(c, e);
    if (c->rank == 0)
      printf("  layer %d: set up in %.3f s (tile index built on the %s)\n", layer, sr_now() - tc,
             dist_attn_index_on_gpu(da) ? "GPU" : "host");
    if (plan_bytes_print(c, da, layer, e)) fail(c, e);
    double ix, cols, tt;
    int64_t pairs;
    if (c->rank == 0 && dist_attn_fpdt_build_s(da, &ix, &cols, &tt, &pairs))
      printf("  layer %d: FPDT host build (rank 0): chunk indices %.3f s, their compact columns %.3f s, %lld chunk pairs' "
             "transposes with bar chunks %.3f s\n", layer, ix, cols, (long long)pairs, tt);
    dist_attn_free(da);
  }
  return 0;
}

// SR_LAYER_TIMES=1 in the environment: where each layer's wall time goes, part by part, so a run shows what besides
// its set-up and kernels takes the time. Each rank clocks its parts back to back (they sum to the layer's wall time
// on that rank); a part that ends in a collective or a device sync holds the wait for the other ranks or the device.
// Rank 0 prints its own parts and, for each, the largest over the ranks (a collective, only with the variable set).
enum {
  LT_SETUP, LT_PLAN_BYTES, LT_INPUTS, LT_UPLOAD, LT_UNTIMED, LT_TIMED, LT_WORK, LT_PREDICT, LT_STATS, LT_CHECK, LT_FREE,
  LT_PARTS
};
static const char *const lt_names[LT_PARTS] = {
    "set up", "plan bytes and selection", "inputs filled", "inputs uploaded", "untimed repetitions",
    "timed repetition", "timings and work", "prediction", "memory and bytes", "check and digest", "plan freed"};
typedef struct {
  double t0, t, part[LT_PARTS + 1];  // part[LT_PARTS]: the layer's wall time
} layer_clock;

static void lc_start(layer_clock *lc) {
  memset(lc, 0, sizeof *lc);
  lc->t0 = lc->t = sr_now();
}
// The time since the last mark goes to `part`.
static void lc_mark(layer_clock *lc, int part) {
  double now = sr_now();
  lc->part[part] += now - lc->t;
  lc->t = now;
}
static void lc_print(comm *c, layer_clock *lc, int layer, sr_error *e) {
  lc->part[LT_PARTS] = lc->t - lc->t0;
  double most[LT_PARTS + 1];
  memcpy(most, lc->part, sizeof most);
  if (comm_host_allreduce(c, most, LT_PARTS + 1, MPI_DOUBLE, MPI_MAX, e)) fail(c, e);
  if (c->rank != 0) return;
  printf("  layer %d: wall %.3f s on rank 0 (largest rank %.3f s):", layer, lc->part[LT_PARTS], most[LT_PARTS]);
  for (int i = 0; i < LT_PARTS; i++) printf("%s %s %.3f (%.3f)", i ? "," : "", lt_names[i], lc->part[i], most[i]);
  printf(" s\n");
  fflush(stdout);
}

// One plan: every layer's forward + backward, timings, bytes, the check and the trace. Returns 1 when the
// check fails, 2 when --trace-out could not be written (input error), 3 on another error writing it.
static int run_plan(const attn_opts *o_, comm *c, plan *pl, pattern *pat, timeline *tl, sr_error *e) {
  const model_config *m = &pl->model;
  int H = (int)m->num_heads, Hkv = (int)m->num_kv_heads, d = (int)m->head_dim;
  int64_t layers = o_->layers < pat->layers ? o_->layers : pat->layers;
  if (o_->trace_out && pattern_spec_estimation(pl->spec.pattern) == PATTERN_GATED) {  // before a long run
    gating_opts g = {0};
    pattern_spec_gating_opts(pl->spec.pattern, &g, e);
    if (g.kind == PATTERN_TOKENS || layers < pat->layers) {
      sr_input_error(e, NULL, "--trace-out", g.kind == PATTERN_TOKENS ? "token top-k selections (each row its own keys) "
                     "have no trace kind" : "a gated pattern's trace holds every layer it selected: run all %d "
                     "layers (--layers %d)", pat->layers, pat->layers);
      if (c->rank == 0) sr_error_report(e, "sparsering-exec attn");
      return 2;
    }
  }
  int64_t nl = pl->layout.rank_count[c->rank];
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)sr_max64(1, nl));
  size_t qn = (size_t)sr_max64(1, nl * H * d), kn = (size_t)sr_max64(1, nl * Hkv * d);
  float *q = malloc(sizeof(float) * qn), *k = malloc(sizeof(float) * kn), *v = malloc(sizeof(float) * kn);
  float *dout = malloc(sizeof(float) * qn), *o = malloc(sizeof(float) * qn), *dq = malloc(sizeof(float) * qn);
  float *dk = malloc(sizeof(float) * kn), *dv = malloc(sizeof(float) * kn);
  float *lse = malloc(sizeof(float) * (size_t)sr_max64(1, nl * H));
  if (!pos || !q || !k || !v || !dout || !o || !dq || !dk || !dv || !lse) {
    sr_internal_error(e, 0, "out of memory");
    fail(c, e);
  }
  layout_positions(&pl->layout, c->rank, pos);
  exec_dev dev = {0};
  if (o_->cuda && exec_dev_alloc(&dev, nl, H, Hkv, d, e)) fail(c, e);
  double fwd_sum = 0, bwd_sum = 0, worst = 0;
  int64_t sent = 0, saved = 0, skipped = 0;
  pattern_estimation how = pattern_spec_estimation(pl->spec.pattern);
  int check_failed = 0, online = pattern_spec_at_run_time(pl->spec.pattern), searched = how == PATTERN_SEARCHED;
  attn_memory mem = {0};
  sim_attn_memory pmem = {0};  // --predict: each item the largest over the layers
  if (o_->layer_times && c->rank == 0 && tl->run == o_->run) {
    printf("  start-up (MPI, NCCL, the plan, its pattern, the rank's tensors) %.3f s on rank 0 before layer 0\n",
           sr_now() - o_->t_start);
    fflush(stdout);
  }
  layer_clock lc;
  for (int layer = 0; layer < layers; layer++) {
    dist_attn *da;
    lc_start(&lc);
    double tc = sr_now();
    if (dist_attn_create_with(pl, pat, layer, c, o_->cuda ? DIST_CUDA : DIST_CPU, o_->index_build, &da, e)) fail(c, e);
    tc = sr_now() - tc;
    lc_mark(&lc, LT_SETUP);
    if (c->rank == 0)
      printf("  layer %d: set up in %.3f s (tile index built on the %s)\n", layer, tc, dist_attn_index_on_gpu(da) ? "GPU" : "host");
    if (plan_bytes_print(c, da, layer, e)) fail(c, e);
    if (o_->moba_gate != EXEC_GATE_HOST && dist_attn_moba_gate_gpu(da, o_->moba_gate == EXEC_GATE_GPU, e)) fail(c, e);
    dist_attn_set_fail(da, (int)o_->fail_rank, (int)o_->fail_step, o_->fail_hang);
    if (dist_attn_estimate_online(da, e)) fail(c, e);  // vs-online, moba, token-topk select on the CPU backend too
    lc_mark(&lc, LT_PLAN_BYTES);
    float *in[4] = {q, k, v, dout};
    for (int t = 0; t < 4; t++)
      if (attn_inputs_fill(o_->inputs, (uint64_t)o_->data_seed, layer, t, pos, nl, pl->layout.n_tokens, H, Hkv, d, in[t], e))
        fail(c, e);
    lc_mark(&lc, LT_INPUTS);
    if (o_->cuda && exec_dev_upload(&dev, q, k, v, dout, e)) fail(c, e);
    lc_mark(&lc, LT_UPLOAD);
    double tf = 0, tb = 0;
    int64_t mark = tl->n;  // this layer's events start here (last repeat)
    for (int rep = 0; rep < o_->repeat; rep++) {
      if (rep == o_->repeat - 1) mark = tl->n;
      dist_attn_set_timeline(da, rep == o_->repeat - 1 ? tl : NULL);
      dist_attn_reset_stats(da);
      // adaspa-online: a repetition is a step on the same inputs (the first one's dense pass serves every later
      // search: AdaSpa's cached LSE)
      dist_attn_search_step(da, rep, 0);
      if (comm_barrier(c, e)) fail(c, e);
      double t0 = sr_now();
      int rc = o_->cuda ? dist_attn_fwd(da, dev.q, dev.k, dev.v, dev.o, dev.lse, e) : dist_attn_fwd(da, q, k, v, o, lse, e);
      if (rc || comm_sync(c, e)) fail(c, e);
      double t1 = sr_now();
      rc = o_->cuda ? dist_attn_bwd(da, dev.q, dev.k, dev.v, dev.o, dev.lse, dev.dout, dev.dq, dev.dk, dev.dv, e)
                    : dist_attn_bwd(da, q, k, v, o, lse, dout, dq, dk, dv, e);
      if (rc || comm_sync(c, e)) fail(c, e);
      tf = t1 - t0, tb = sr_now() - t1;
      lc_mark(&lc, rep == o_->repeat - 1 ? LT_TIMED : LT_UNTIMED);
    }
    // Overlap efficiency: attention kernel time over wall time (1 = communication fully hidden).
    double kern = 0;
    for (int64_t i = mark; i < tl->n; i++)
      if (tl->ev[i].stream == STREAM_COMPUTE && tl->ev[i].layer == layer) kern += tl->ev[i].dur;
    double tt[3] = {tf, tb, kern};  // the slowest rank sets the layer's time
    if (comm_host_allreduce(c, tt, 3, MPI_DOUBLE, MPI_MAX, e)) fail(c, e);
    fwd_sum += tt[0], bwd_sum += tt[1];
    if (c->rank == 0)
      printf("  layer %d: fwd %.3f ms, bwd %.3f ms; attention kernels (busiest rank) %.3f ms; overlap efficiency %.3f\n",
             layer, 1e3 * tt[0], 1e3 * tt[1], 1e3 * tt[2], tt[2] / (tt[0] + tt[1]));
    // vs-online, adaspa-online, moba, token-topk: the pattern the last forward estimated, searched or selected
    // replaces the stand-in in pat, so the check, the prediction and the trace all see what ran (every rank holds
    // the same one)
    if (online && (dist_attn_pattern_used(da, pat, e) || same_on_every_rank(c, pat, layer, e))) fail(c, e);
    if (searched && c->rank == 0 && search_print(da, layer, e)) fail(c, e);
    if (c->rank == 0 && work_print(pl, pat, layer, e)) fail(c, e);
    lc_mark(&lc, LT_WORK);
    if (o_->predict && c->rank == 0) {
      double pf, pb;
      sim_attn_memory lm;
      if (predict_attention(pl, pat, layer, o_->predict_csv, &pf, &pb, e)) fail(c, e);
      if (predict_attention_memory(pl, pat, layer, &lm, e)) fail(c, e);
      double *to = &pmem.tensors, *from = &lm.tensors;
      for (int i = 0; i < 5; i++) to[i] = fmax(to[i], from[i]);  // the largest layer's items
      pmem.total = pmem.tensors + pmem.plan + pmem.workspace;
      printf("  layer %d: predicted (sim, %scluster %s) fwd %.3f ms bwd %.3f ms; error fwd %+.1f%% bwd %+.1f%% total %+.1f%%\n",
             layer, online ? "estimated pattern, " : "", pl->cluster.name, 1e3 * pf, 1e3 * pb, 100 * (pf - tt[0]) / tt[0],
             100 * (pb - tt[1]) / tt[1],
             100 * (pf + pb - tt[0] - tt[1]) / (tt[0] + tt[1]));
      char note[600];
      if (layer == 0) printf("  %s\n", cluster_calibration_note(&pl->cluster, note, sizeof note));
      if (layer == 0 && o_->cuda &&
          calib_bars_note(&pl->cluster, calib_bar_walk_parts(), calib_bar_walk_ws(), calib_bar_walk_pairs(), note,
                          sizeof note))
        printf("  %s\n", note);
    }
    lc_mark(&lc, LT_PREDICT);
    if (memory_after_layer(o_, da, &mem, e)) fail(c, e);
    dist_stats st = dist_attn_stats(da);
    int64_t cnt[3] = {st.bytes_sent, st.bytes_saved, st.shards_skipped};
    if (comm_host_allreduce(c, cnt, 3, MPI_INT64_T, MPI_SUM, e)) fail(c, e);
    sent += cnt[0], saved += cnt[1], skipped += cnt[2];
    lc_mark(&lc, LT_STATS);
    if ((o_->check || o_->digest) && o_->cuda && exec_dev_download(&dev, o, lse, dq, dk, dv, e)) fail(c, e);
    if (o_->digest) {
      uint64_t h = 0;
      if (outputs_digest(c, o, lse, dq, dk, dv, (size_t)(nl * H * d), (size_t)(nl * Hkv * d), (size_t)(nl * H), &h, e))
        fail(c, e);
      if (c->rank == 0) printf("  digest layer %d: %016llx\n", layer, (unsigned long long)h);
    }
    if (o_->check) {
      attn_errors er = {0};
      if (attn_check_layer(pl, pat, layer, o_->inputs, (uint64_t)o_->data_seed, o_->cuda, c, o, lse, dq, dk, dv, &er, e)) fail(c, e);
      if (c->rank == 0) {
        double w = fmax(fmax(fmax(er.o, er.lse), fmax(er.dq, er.dk)), er.dv);
        if (!(w <= worst)) worst = w;
        int ok = w <= o_->tol;
        check_failed |= !ok;
        printf("  check layer %d: max rel err O %.2e LSE %.2e dQ %.2e dK %.2e dV %.2e %s\n", layer, er.o, er.lse, er.dq,
               er.dk, er.dv, ok ? "ok" : "FAIL");
      }
    }
    lc_mark(&lc, LT_CHECK);
    dist_attn_free(da);
    lc_mark(&lc, LT_FREE);
    if (o_->layer_times) lc_print(c, &lc, layer, e);
  }
  memory_print(o_, pl, c, &mem, &pmem);
  if (c->rank == 0) {
    char lay[600], sched[128], tok[32];  // "striped:G": the spec keeps G apart, and a log line should say it
    if (pl->spec.fpdt_chunk > 0)  // FPDT runs in place of the schedule: say so
      snprintf(sched, sizeof sched, "fpdt:%s%s", sr_format_tokens(pl->spec.fpdt_chunk, tok, sizeof tok),
               pl->spec.fpdt_offload ? "+offload" : "");
    else
      snprintf(sched, sizeof sched, "%s", pl->spec.schedule);
    printf("attn %s | %s | %s: %d ranks, %s, seq %lld, %lld layer(s): fwd %.3f ms bwd %.3f ms per layer; "
           "sent %lld B, skipping saved %lld B (%lld receptions)",
           plan_spec_layout_flag(&pl->spec, lay, sizeof lay), sched, pl->spec.pattern, c->world, m->name,
           (long long)pl->layout.n_tokens,
           (long long)layers, 1e3 * fwd_sum / (double)layers, 1e3 * bwd_sum / (double)layers, (long long)sent,
           (long long)saved, (long long)skipped);
    if (o_->check) printf("; check worst %.2e (tol %.0e) %s", worst, o_->tol, check_failed ? "FAIL" : "ok");
    printf("\n");
    if (o_->trace_out) {  // an unwritable path is the flag's fault: exit 2 on every rank, no abort
      if (trace_out_write(o_, pl, pat, (int)layers, e)) check_failed = sr_error_report(e, "sparsering-exec attn") == 2 ? 2 : 3;
      else printf("  trace of the %s pattern written to %s\n", online ? "estimated" : "run's", o_->trace_out);
    }
    fflush(stdout);
  }
  if (comm_host_bcast(c, &check_failed, 1, MPI_INT, 0, e)) fail(c, e);
  exec_dev_free(&dev);
  free(pos), free(q), free(k), free(v), free(dout), free(o), free(dq), free(dk), free(dv), free(lse);
  return check_failed;
}

// Split a comma-separated list in place (at most max entries).
static int split_list(char *s, char **out, int max) {
  int n = 0;
  for (char *t = strtok(s, ","); t && n < max; t = strtok(NULL, ",")) out[n++] = t;
  return n;
}

static int cmd_attn(int argc, char **argv) {
  sr_error e = {0};
  cli_args a;
  const char *prog = "sparsering-exec attn";
  if (cli_parse(argc, argv, &attn_usage, &a, &e)) return sr_error_report(&e, prog);
  attn_opts o = {0};
  o.t_start = sr_now();
  o.layer_times = getenv("SR_LAYER_TIMES") && atoi(getenv("SR_LAYER_TIMES")) > 0;
  const char *backend = cli_get(&a, "backend", "cpu");
  o.cuda = strcmp(backend, "cuda") == 0;
  o.check = cli_has(&a, "check");
  o.predict_csv = cli_get(&a, "predict-csv", NULL);
  o.predict = cli_has(&a, "predict") || o.predict_csv;
  o.trace_out = cli_get(&a, "trace-out", NULL);
  o.digest = cli_has(&a, "digest");
  o.plan_bytes_only = cli_has(&a, "plan-bytes-only");
  if (attn_inputs_parse(cli_get(&a, "inputs", "random"), &o.inputs, &e) || exec_index_build(&a, &o.index_build, &e) ||
      exec_moba_gate(&a, o.cuda, &o.moba_gate, &e))
    return sr_error_report(&e, prog);
  const char *fmode = cli_get(&a, "fail-mode", "kill");
  o.fail_hang = strcmp(fmode, "hang") == 0;
  if (!o.fail_hang && strcmp(fmode, "kill") != 0) {
    sr_input_error(&e, NULL, "--fail-mode", "'%s': expected kill or hang", fmode);
    return sr_error_report(&e, prog);
  }
  if (!o.cuda && strcmp(backend, "cpu") != 0) {
    sr_input_error(&e, NULL, "--backend", "'%s': expected cpu or cuda", backend);
    return sr_error_report(&e, prog);
  }
  int64_t run;
  if (cli_get_int(&a, "layers", 1, 1, 1000, &o.layers, &e) ||
      cli_get_int(&a, "data-seed", 1, 0, INT64_MAX, &o.data_seed, &e) ||
      cli_get_int(&a, "fail-rank", -1, -1, 1 << 20, &o.fail_rank, &e) ||
      cli_get_int(&a, "fail-at-step", 0, 0, 1 << 20, &o.fail_step, &e) ||
      cli_get_int(&a, "repeat", 1, 1, 1000, &o.repeat, &e) || cli_get_int(&a, "run", 0, 0, 1 << 30, &run, &e) ||
      cli_get_num(&a, "tol", o.cuda ? 2e-2 : 1e-4, 0, 1, &o.tol, &e))
    return sr_error_report(&e, prog);
  o.run = run;
  char lay_s[512], sch_s[512], pat_s[2048];
  char *lays[16] = {NULL}, *schs[16] = {NULL}, *pats[32] = {NULL};
  snprintf(lay_s, sizeof lay_s, "%s", cli_get(&a, "layout", ""));
  snprintf(sch_s, sizeof sch_s, "%s", cli_get(&a, "schedule", ""));
  snprintf(pat_s, sizeof pat_s, "%s", cli_get(&a, "pattern", ""));
  int nlay = split_list(lay_s, lays, 16), nsch = split_list(sch_s, schs, 16), npat = split_list(pat_s, pats, 32);
  nlay = nlay ? nlay : 1, nsch = nsch ? nsch : 1, npat = npat ? npat : 1;  // NULL entries: the flag's default
  if (o.trace_out && nlay * nsch * npat > 1) {
    sr_input_error(&e, NULL, "--trace-out", "records one run: give one layout, schedule and pattern (not %d combinations)",
                   nlay * nsch * npat);
    return sr_error_report(&e, prog);
  }
  if (o.trace_out && trace_out_check(o.trace_out, &e)) return sr_error_report(&e, prog);  // before a long run

  comm c;
  if (comm_init(&c, o.cuda ? COMM_NCCL : COMM_CPU, &argc, &argv, &e)) {
    if (c.node_of) fail(&c, &e);
    return sr_error_report(&e, prog);
  }
  timeline tl;
  if (comm_barrier(&c, &e)) fail(&c, &e);
  timeline_init(&tl, (int)run);
  int failed = 0, code = 0;
  for (int i = 0; i < nlay && !code; i++)
    for (int j = 0; j < nsch && !code; j++)
      for (int k = 0; k < npat && !code; k++) {
        plan pl;
        pattern pat;
        // Input errors are the same on every rank (same flags, same files): rank 0 reports, all exit.
        if (exec_plan_load(&a, lays[i], schs[j], pats[k], &pl, &pat, &e)) {
          code = c.rank == 0 ? sr_error_report(&e, prog) : (e.code == SR_EINPUT ? 2 : 1);
          break;
        }
        if (pl.layout.world == c.world && dist_attn_check_plan(&pl, &e)) {  // the same on every rank: exit 2
          code = c.rank == 0 ? sr_error_report(&e, prog) : 2;
          pattern_free(&pat);
          plan_free(&pl);
          break;
        }
        if (pl.layout.world != c.world) {
          sr_input_error(&e, pl.spec.cluster, "nodes x gpus_per_node", "the plan is for %d ranks but mpirun started %d",
                         pl.layout.world, c.world);
          code = c.rank == 0 ? sr_error_report(&e, prog) : 2;
          pattern_free(&pat);
          plan_free(&pl);
          break;
        }
        int r = o.plan_bytes_only ? plan_bytes_only(&o, &c, &pl, &pat, &e) : run_plan(&o, &c, &pl, &pat, &tl, &e);
        if (r >= 2) code = r == 2 ? 2 : 1;
        failed |= r == 1;
        tl.run++;
        pattern_free(&pat);
        plan_free(&pl);
      }
  const char *csv = cli_get(&a, "csv", NULL), *trace = cli_get(&a, "trace", NULL);
  if (!code && (csv || trace) && timeline_write(&tl, &c, csv, trace, &e)) fail(&c, &e);
  timeline_free(&tl);
  dist_attn_builder_free();  // the GPU index builder's device state, before the device goes
  comm_free(&c);
  return code ? code : failed ? 1 : 0;
}

EXEC_COMMAND("attn", cmd_attn, "distributed attention forward+backward for a plan (--check against dense)", &attn_usage)
