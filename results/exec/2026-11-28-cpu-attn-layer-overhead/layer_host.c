// Times the host parts of one `attn` layer for one rank (not committed: a measuring aid).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "exec/exec_plan.h"
#include "kernels/attn_inputs.h"
#include "plan/parallel.h"
#include "plan/tiles.h"
#include "plan/util.h"
#include "sim/predict.h"

static double cpu_now(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static double w0, c0;
static void start(void) { w0 = sr_now(), c0 = cpu_now(); }
static void stop(const char *what) { printf("  %-40s wall %7.3f s  cpu %7.3f s\n", what, sr_now() - w0, cpu_now() - c0); fflush(stdout); }

static uint16_t to_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); u += 0x7fffu + ((u >> 16) & 1u); return (uint16_t)(u >> 16); }
typedef struct { const float *s; uint16_t *h; size_t n; } cv;
static int conv(void *ctx, int item, int th, sr_error *e) { cv *c = ctx; size_t i0 = (size_t)item << 22, i1 = i0 + (1u << 22) < c->n ? i0 + (1u << 22) : c->n; for (size_t i = i0; i < i1; i++) c->h[i] = to_bf16(c->s[i]); return 0; }

static const cli_flag hf[] = {{"layers-list", "L,..", NULL, ""}, {"rank", "R", "0", ""}, {"world", "W", "4", ""}, {"skip", "X", "", ""}, {NULL, NULL, NULL, NULL}};
static const cli_usage hu = {NULL, "", {plan_spec_flags, exec_plan_flags, hf, NULL}};

int main(int argc, char **argv) {
  cli_args a; sr_error e = {0};
  if (cli_parse(argc, argv, &hu, &a, &e)) { fprintf(stderr, "%s\n", e.msg); return 2; }
  plan pl; pattern pat;
  start();
  if (exec_plan_load(&a, NULL, NULL, NULL, &pl, &pat, &e)) { fprintf(stderr, "%s\n", e.msg); return 2; }
  stop("exec_plan_load (plan + all layers' pattern)");
  int rank = atoi(cli_get(&a, "rank", "0"));
  const char *skip = cli_get(&a, "skip", "");
  const model_config *m = &pl.model;
  int H = (int)m->num_heads, Hkv = (int)m->num_kv_heads, d = (int)m->head_dim, W = pl.layout.world;
  int64_t nl = pl.layout.rank_count[rank];
  int64_t *pos = malloc(8 * nl);
  layout_positions(&pl.layout, rank, pos);
  size_t qn = nl * H * d, kn = nl * Hkv * d;
  float *in[4]; for (int t = 0; t < 4; t++) in[t] = malloc(4 * (t == 1 || t == 2 ? kn : qn));
  char ls[256]; snprintf(ls, sizeof ls, "%s", cli_get(&a, "layers-list", "0"));
  printf("threads %d, rank %d of %d, %lld tokens a rank\n", sr_threads(), rank, W, (long long)nl);
  for (char *tok = strtok(ls, ","); tok; tok = strtok(NULL, ",")) {
    int layer = atoi(tok);
    printf("layer %d\n", layer);
    if (!strstr(skip, "fill")) {
      start();
      for (int t = 0; t < 4; t++) attn_inputs_fill(ATTN_INPUTS_RANDOM, 1, layer, t, pos, nl, pl.layout.n_tokens, H, Hkv, d, in[t], &e);
      stop("attn_inputs_fill x4 (random)");
      start();
      for (int t = 0; t < 4; t++) { size_t n = t == 1 || t == 2 ? kn : qn; uint16_t *h = malloc(2 * n); cv c = {in[t], h, n}; sr_parallel_for((int)((n + (1u << 22) - 1) >> 22), sr_threads(), conv, &c, &e); free(h); }
      stop("bf16 conversion x4 (exec_dev_upload's host part)");
      static uint16_t *st; if (!st) st = malloc(2 * qn);
      start();
      for (int t = 0; t < 4; t++) { size_t n = t == 1 || t == 2 ? kn : qn; cv c = {in[t], st, n}; sr_parallel_for((int)((n + (1u << 22) - 1) >> 22), sr_threads(), conv, &c, &e); }
      stop("bf16 conversion x4, one staging buffer");
    }
    start();
    work_count *wc = malloc(sizeof *wc * H * W * W);
    if (tiles_account_layer(&pat, layer, &pl.layout, wc, &e)) fprintf(stderr, "%s\n", e.msg);
    free(wc);
    stop("tiles_account_layer (work_print)");
    if (!strstr(skip, "predict")) {
      double pf, pb;
      start();
      if (predict_attention(&pl, &pat, layer, NULL, &pf, &pb, &e)) fprintf(stderr, "%s\n", e.msg);
      stop("predict_attention");
      sim_attn_memory lm;
      start();
      if (predict_attention_memory(&pl, &pat, layer, &lm, &e)) fprintf(stderr, "%s\n", e.msg);
      stop("predict_attention_memory");
      printf("  predicted fwd %.3f ms bwd %.3f ms\n", 1e3 * pf, 1e3 * pb);
    }
  }
  return 0;
}
