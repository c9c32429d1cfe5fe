// forms.c — the budget mix's forward forms counted on the CPU (layer 0 of vs-preset:qwen2.5-3b, seed 1, one rank,
// contiguous layout, as bin/sparsering-bench-attn --mix builds them): kept pairs by entry kind, the work of the
// tile and runs forms (entries and the warp-specialized kernel's 128-key chunks), how full the runs are, how many
// 16-row warps keep nothing, and what smaller runs or runs per 64-row warpgroup would compute.
// Build from the repository root after `make`:
//   mpicc -O2 -I. -D_GNU_SOURCE -o /tmp/forms results/kernels/2026-11-27-mix-fwd-windowed-cpu/forms.c
//     build/release/libsparsering.a -lcjson -lgsl -lgslcblas -lm -lpthread && /tmp/forms 131072
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/sa_mask.h"
#include "plan/head_mask_bits.h"
#include "plan/layout.h"
#include "plan/model.h"
#include "plan/pattern_spec.h"
#include "plan/tiles.h"

static int64_t popc(uint64_t x) { return __builtin_popcountll(x); }

// Kept elements of rows [q0, q0 + nr) x keys [k0, k0 + nk) (consecutive positions) of VS head m; rowsk[r] counts
// the row words of the first 64 keys when given.
static int64_t kept_block(const head_mask *m, int64_t q0, int nr, int64_t k0, int nk, uint64_t *need) {
  int64_t s = 0;
  for (int w = 0; w < nk; w += 64) {
    int n = nk - w < 64 ? nk - w : 64;
    uint64_t vert = sa_bits64(m->vbits, m->n_tokens, k0 + w), valid = n == 64 ? ~0ull : (1ull << n) - 1;
    for (int r = 0; r < nr; r++) {
      uint64_t x = sa_vs_row64(m, vert, q0 + r, k0 + w) & valid;
      s += popc(x);
      if (need && w == 0) need[r] = x;
    }
  }
  return s;
}

static int greedy(uint64_t need, int L) {
  int n = 0;
  for (int c = 0; c < 64;)
    if ((need >> c) & 1) n++, c += L;
    else c++;
  return n;
}

int main(int argc, char **argv) {
  int64_t n = argc > 1 ? atoll(argv[1]) : 131072;
  sr_error e = {0};
  model_config m;
  pattern pat;
  layout lay;
  tile_index ti, tr;
  head_mask *masks;
  if (model_load("qwen2.5-3b", &m, &e) || pattern_from_spec("vs-preset:qwen2.5-3b", &m, n, 1, 0, &pat, &e) ||
      layout_build(LAYOUT_CONTIGUOUS, n, 1, 1, NULL, &lay, &e) || tiles_build(&pat, 0, &lay, 0, &ti, &e) ||
      tiles_masks_build(&pat, 0, &masks, &e) || tiles_runs_build(&ti, masks, &lay, &tr, &e))
    return fprintf(stderr, "%s\n", e.msg), 1;
  int H = ti.heads;
  int64_t nq = ti.n_qtiles;
  double kf = 0, kp = 0, kb = 0, kr = 0, krb = 0, nf = 0, np = 0, nb = 0, ck_t = 0, ck_r = 0, nr_ = 0, nrb = 0;
  double rchunks = 0, lowrun = 0, warp_t = 0, warp_te = 0, warp_r = 0, warp_re = 0, g32 = 0, g16 = 0, c32 = 0, c16 = 0, split = 0;
  static uint8_t n0[1 << 22], n1[1 << 22];
  for (int h = 0; h < H; h++)
    for (int64_t i = 0; i < nq; i++) {
      int64_t c = (int64_t)h * nq + i, q0 = i * TILE;
      int nr = (int)(n - q0 < TILE ? n - q0 : TILE);
      for (int64_t x = ti.tile_cnt[2 * c]; x < ti.tile_cnt[2 * c + 1]; x++) {
        int64_t k0 = (int64_t)ti.tile_idx[x] * TILE;
        int nk = (int)(n - k0 < TILE ? n - k0 : TILE);
        if (ti.tile_kind[x] == TILE_FULL) {
          kf += kept_block(&masks[h], q0, nr, k0, nk, NULL), nf++;
          continue;
        }
        uint64_t a[128] = {0}, b[128] = {0};
        kp += kept_block(&masks[h], q0, nr, k0, 64, a), np++;
        if (nk > 64) kp += kept_block(&masks[h], q0, nr, k0 + 64, nk - 64, b);
        for (int w = 0; w < 8; w++) {
          uint64_t any = 0;
          for (int r = 16 * w; r < 16 * w + 16 && r < nr; r++) any |= a[r] | b[r];
          warp_t++, warp_te += !any;
        }
      }
      for (int64_t x = ti.bar_cnt[2 * c]; x < ti.bar_cnt[2 * c + 1]; x++)
        for (int r = 0; r < nr; r++) kb += sa_mask_keeps(&masks[h], q0 + r, ti.bar_idx[x]);
      int64_t bars = ti.bar_cnt[2 * c + 1] - ti.bar_cnt[2 * c];
      nb += bars, ck_t += (ti.tile_cnt[2 * c + 1] - ti.tile_cnt[2 * c]) + (bars + 127) / 128;
      int64_t ra = tr.run_cnt[2 * c], rb = tr.run_cnt[2 * c + 1], nbb = tr.bar_cnt[2 * c + 1] - tr.bar_cnt[2 * c];
      for (int64_t x = tr.bar_cnt[2 * c]; x < tr.bar_cnt[2 * c + 1]; x++)
        for (int r = 0; r < nr; r++) krb += sa_mask_keeps(&masks[h], q0 + r, tr.bar_idx[x]);
      nr_ += rb - ra, nrb += nbb, rchunks += (rb - ra + 1) / 2;
      ck_r += (tr.tile_cnt[2 * c + 1] - tr.tile_cnt[2 * c]) + (rb - ra + 1) / 2 + (nbb + 127) / 128;
      if (ra == rb) continue;
      int64_t lo = tr.run_key[ra], hi = tr.run_key[rb - 1] + tr.run_len[rb - 1];
      memset(n0, 0, (size_t)(hi - lo)), memset(n1, 0, (size_t)(hi - lo));
      double cg32 = 0, cg16 = 0;
      for (int64_t x = ra; x < rb; x += 2) {
        uint64_t any[8] = {0};
        for (int y = 0; y < 2 && x + y < rb; y++) {
          uint64_t w[128] = {0}, need = 0, h0 = 0, h1 = 0;
          int64_t k0 = tr.run_key[x + y];
          int len = tr.run_len[x + y];
          int64_t kk = kept_block(&masks[h], q0, nr, k0, len, w);
          kr += kk, lowrun += kk < 1024;
          for (int r = 0; r < nr; r++) need |= w[r], any[r / 16] |= w[r], *(r < 64 ? &h0 : &h1) |= w[r];
          for (int j = 0; j < len; j++) n0[k0 + j - lo] |= (h0 >> j) & 1, n1[k0 + j - lo] |= (h1 >> j) & 1;
          int a32 = greedy(need, 32), a16 = greedy(need, 16);
          g32 += a32, g16 += a16, cg32 += a32, cg16 += a16;
        }
        for (int w = 0; w < 8; w++) warp_r++, warp_re += !any[w];
      }
      c32 += (int64_t)((cg32 + 3) / 4), c16 += (int64_t)((cg16 + 7) / 8);
      int r0 = 0, r1 = 0;
      for (int64_t k = lo; k < hi;)
        if (n0[k - lo]) r0++, k += 64;
        else k++;
      for (int64_t k = lo; k < hi;)
        if (n1[k - lo]) r1++, k += 64;
        else k++;
      split += r0 > r1 ? r0 : r1;
    }
  double kept = kf + kp + kb, causal = (double)H * n * (n + 1) / 2;
  printf("kept pairs %.4g (%.2f%% of causal): FULL tiles %.4g, PARTIAL tiles %.4g, bars %.4g\n", kept, 100 * kept / causal, kf, kp, kb);
  printf("tile form: FULL %.0f, PARTIAL %.0f, bars %.0f; entries compute %.4g (%.3fx kept), 128-key chunks %.0f (%.3fx)\n",
         nf, np, nb, (nf + np) * 16384 + nb * 128, ((nf + np) * 16384 + nb * 128) / kept, ck_t, ck_t * 16384 / kept);
  printf("runs form: FULL %.0f, runs %.0f, bars %.0f; kept in runs %.4g (computed %.3fx that), bars %.4g; entries compute %.4g (%.3fx kept),"
         " 128-key chunks %.0f (%.3fx)\n", nf, nr_, nrb, kr, nr_ * 8192 / kr, krb, nf * 16384 + nr_ * 8192 + nrb * 128,
         (nf * 16384 + nr_ * 8192 + nrb * 128) / kept, ck_r, ck_r * 16384 / kept);
  printf("runs keeping < 1/8 of their elements: %.1f%%; 16-row warps keeping nothing: %.1f%% of a partial tile's, %.1f%% of a run chunk's\n",
         100 * lowrun / nr_, 100 * warp_te / warp_t, 100 * warp_re / warp_r);
  printf("smaller runs: 32-key %.0f (%.0f chunks of 4), 16-key %.0f (%.0f chunks of 8), against %.0f run chunks;"
         " runs per 64-row warpgroup: %.0f chunks of 64 keys (%.4g elements, against %.4g)\n",
         g32, c32, g16, c16, rchunks, split, split * 8192, nr_ * 8192);
  return 0;
}
