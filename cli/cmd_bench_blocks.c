// cmd_bench_blocks.c — `sparsering bench-blocks`: how long the host takes to turn a layer of block masks
// (AdaSpa's search result: 16 heads of B x B blocks) into the executor's execution form on one rank, the
// part exec/online_adaspa_cuda.c runs between the search and the upload: the mask copied into a pattern,
// tiles_build, tiles_masks_build and tiles_transpose (the backward's). Each head keeps its diagonal blocks
// and a random, seeded share of the blocks below (mean density --density of the causal blocks), so every
// run times the same masks. --generic times the per-tile scan, the reference the block fast path replaces.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "plan/layout.h"
#include "plan/rng.h"
#include "plan/tiles.h"
#include "plan/tiles_internal.h"  // tiles_blocks_enabled: the reference switch (off: the per-tile scan)
#include "plan/util.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

// Head h's mask at density about dens * (0.5 + h / (H - 1)) of the causal blocks (mean dens), diagonal kept.
static void draw_mask(uint64_t *mask, int64_t nb, int64_t rw, int h, int H, double dens, uint32_t seed) {
  sr_mt r;
  sr_mt_seed(&r, seed * 7919u + (uint32_t)h + 1u);
  double d = dens * (H > 1 ? 0.5 + (double)h / (H - 1) : 1.0);
  memset(mask, 0, sizeof *mask * (size_t)(nb * rw));
  for (int64_t p = 0; p < nb; p++) {
    mask[p * rw + p / 64] |= 1ull << (p % 64);
    for (int64_t c = 0; c < p; c++)
      if (sr_mt_uniform(&r) < d) mask[p * rw + c / 64] |= 1ull << (c % 64);
  }
}

typedef struct {
  double copy, build, masks, transpose;
  int64_t tiles, partial;
} phase_ms;

// One conversion, as exec/online_adaspa_cuda.c runs it (the uploads aside).
static int convert(const uint64_t *masks_h, int64_t n, int H, int B, const layout *l, phase_ms *t, sr_error *e) {
  int64_t nb = sr_cdiv(n, B), rw = sr_cdiv(nb, 64);
  pattern p;
  double t0 = sr_now();
  if (pattern_alloc(&p, n, 1, H, e)) return e->code;
  int rc = SR_OK;
  for (int h = 0; h < H && !rc; h++) {
    head_pattern *hp = pattern_head(&p, 0, h);
    hp->kind = PATTERN_BLOCK, hp->block = B, hp->n_blocks = nb, hp->row_words = rw;
    if (!(hp->mask = malloc(sizeof(uint64_t) * (size_t)(nb * rw) + 8))) rc = sr_internal_error(e, 0, "out of memory");
    else memcpy(hp->mask, masks_h + h * nb * rw, sizeof(uint64_t) * (size_t)(nb * rw));
  }
  double t1 = sr_now();
  tile_index ti = {0};
  tile_index_t tt = {0};
  head_mask *hm = NULL;
  if (!rc) rc = tiles_build(&p, 0, l, 0, &ti, e);
  double t2 = sr_now();
  if (!rc) rc = tiles_masks_build_for(&p, 0, l, 0, &hm, e);
  double t3 = sr_now();
  if (!rc) rc = tiles_transpose(&ti, 0, l->rank_count[0], &tt, e);
  double t4 = sr_now();
  t->copy = 1e3 * (t1 - t0), t->build = 1e3 * (t2 - t1), t->masks = 1e3 * (t3 - t2), t->transpose = 1e3 * (t4 - t3);
  t->tiles = ti.n_tiles, t->partial = 0;
  for (int64_t x = 0; x < ti.n_tiles; x++) t->partial += ti.tile_kind[x] == TILE_PARTIAL;
  tiles_transpose_free(&tt);
  tiles_masks_free(hm, H);
  tiles_free(&ti);
  pattern_free(&p);
  return rc;
}

static int bench_case(int64_t n, int H, int B, double dens, int runs, sr_error *e) {
  int64_t nb = sr_cdiv(n, B), rw = sr_cdiv(nb, 64);
  uint64_t *masks = malloc(sizeof *masks * (size_t)(H * nb * rw));
  if (!masks) return sr_internal_error(e, 0, "out of memory");
  for (int h = 0; h < H; h++) draw_mask(masks + h * nb * rw, nb, rw, h, H, dens, 1);
  layout l;
  int rc = layout_build(LAYOUT_CONTIGUOUS, n, 1, 1, NULL, &l, e);
  double tot[16], copy[16], build[16], mk[16], tr[16];
  phase_ms t = {0};
  for (int r = 0; r < runs && !rc; r++) {
    rc = convert(masks, n, H, B, &l, &t, e);
    copy[r] = t.copy, build[r] = t.build, mk[r] = t.masks, tr[r] = t.transpose;
    tot[r] = t.copy + t.build + t.masks + t.transpose;
  }
  if (!rc) {
    double *all[5] = {tot, copy, build, mk, tr};
    for (int x = 0; x < 5; x++) qsort(all[x], (size_t)runs, sizeof(double), cmp_double);
    char nbuf[32];
    printf("  %5s tokens, B = %3d, %d heads: %8.2f ms (copy %6.2f, tiles_build %8.2f, tiles_masks_build %6.2f, "
           "tiles_transpose %6.2f); %lld tile entries, %lld partial\n",
           sr_format_tokens(n, nbuf, sizeof nbuf), B, H, tot[runs / 2], copy[runs / 2], build[runs / 2], mk[runs / 2],
           tr[runs / 2], (long long)t.tiles, (long long)t.partial);
    fflush(stdout);
  }
  layout_free(&l);
  free(masks);
  return rc;
}

static const cli_flag bench_blocks_flags[] = {
    {"seq", "N[,N]", "64K,128K", "tokens in the sequence (a list)"},
    {"block", "B[,B]", "128,64", "block sizes (a list)"},
    {"heads", "H", "16", "query heads"},
    {"density", "D", "0.1", "mean share of the causal blocks kept below the diagonal"},
    {"runs", "N", "3", "runs a case (the median is reported), 1 to 15"},
    {"generic", NULL, NULL, "time the per-tile scan (the reference) instead of the block fast path"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage bench_blocks_usage = {NULL, "sparsering bench-blocks --seq 128K --block 64 --generic",
                                             {bench_blocks_flags, NULL}};

// A comma-separated list of positive integers (token counts take K/M suffixes).
static int parse_list(const char *text, const char *flag, int tokens, int64_t *out, int *n, sr_error *e) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", text);
  *n = 0;
  for (char *save = NULL, *s = strtok_r(buf, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
    if (*n == 8) return sr_input_error(e, NULL, flag, "at most 8 values");
    int64_t v = 0;
    if (tokens) {
      if (sr_parse_tokens(s, flag, &v, e)) return e->code;
    } else {
      char *end;
      v = strtoll(s, &end, 10);
      if (*end || v < 1) return sr_input_error(e, NULL, flag, "'%s' is not a positive integer", s);
    }
    out[(*n)++] = v;
  }
  return *n ? SR_OK : sr_input_error(e, NULL, flag, "no value");
}

static int bench_blocks(const cli_args *a, sr_error *e) {
  int64_t seqs[8], blocks[8], heads = 16, runs = 3;
  int ns = 0, nbk = 0;
  double dens = 0.1;
  if (parse_list(cli_get(a, "seq", "64K,128K"), "--seq", 1, seqs, &ns, e) ||
      parse_list(cli_get(a, "block", "128,64"), "--block", 0, blocks, &nbk, e) ||
      cli_get_int(a, "heads", 16, 1, 1024, &heads, e) || cli_get_int(a, "runs", 3, 1, 15, &runs, e) ||
      cli_get_num(a, "density", 0.1, 0, 1, &dens, e))
    return e->code;
  int generic = cli_has(a, "generic");
  printf("bench-blocks: one rank, contiguous, %s path, median of %lld run(s), mean block density %.3f\n",
         generic ? "generic (per-tile scan)" : "block fast", (long long)runs, dens);
  tiles_blocks_enabled = !generic;
  int rc = SR_OK;
  for (int x = 0; x < ns && !rc; x++)
    for (int y = 0; y < nbk && !rc; y++) rc = bench_case(seqs[x], (int)heads, (int)blocks[y], dens, (int)runs, e);
  tiles_blocks_enabled = 1;
  return rc;
}

static int cmd_bench_blocks(int argc, char **argv) {
  cli_args a;
  sr_error e = {0};
  if (cli_parse(argc, argv, &bench_blocks_usage, &a, &e) || bench_blocks(&a, &e))
    return sr_error_report(&e, "sparsering bench-blocks");
  return 0;
}

CLI_COMMAND("bench-blocks", cmd_bench_blocks, "time the host's conversion of a layer's block masks to the execution form",
            &bench_blocks_usage)
