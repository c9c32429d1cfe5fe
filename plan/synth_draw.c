// synth_draw.c — the hot loops of a vertical-slash head's draw (synth.c), each giving what a plain loop gives:
//   - the candidates of its vertical groups (draw_group_verticals), each from two outputs of the group's MT19937
//     stream, floor(n u^3) three times in four, else floor(n u): most of a draw at millions of tokens was this
//     arithmetic, so where the CPU has AVX2 eight are made at once from sixteen outputs of the stream's current
//     round (the same tempering, the same double operations in the same order: a / 2^32 is exact, and so is a
//     product by 2^-32; the same truncation);
//   - a sorted draw's structural indices (its window or sinks) and its marks read back in order.
#include <string.h>

#include "plan/synth_internal.h"
#include "plan/util.h"

// A vertical from outputs a, b of the stream: floor(n u^3) three times in four, else floor(n u), clamped to [0, n).
// Both are computed and one kept (a mispredicted branch cost more than the arithmetic).
static inline int64_t vertical_of(uint32_t a, uint32_t b, int64_t n) {
  // u is sr_mt_uniform's a / 2^32; b / 2^32 < 0.75 (both exact in a double) is b < 3 * 2^30
  double u = a / 4294967296.0, nu = (double)n * u;
  int64_t cubic = (int64_t)(nu * u * u), linear = (int64_t)nu, x = b < 3221225472u ? cubic : linear;
  return x >= n ? n - 1 : x < 0 ? 0 : x;
}

// Candidate j from the stream's next two outputs, its marks' word fetched.
static inline void one_vertical(sr_mt *r, int64_t n, int32_t *x, int64_t j, const uint64_t *bits) {
  uint32_t a = sr_mt_next(r), b = sr_mt_next(r);
  x[j] = (int32_t)vertical_of(a, b, n);
  __builtin_prefetch(&bits[x[j] >> 6]);
}

static void verticals_plain(sr_mt *r, int64_t n, int32_t *x, int64_t m, const uint64_t *bits) {
  for (int64_t j = 0; j < m; j++) one_vertical(r, n, x, j, bits);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

// Four candidates from four (a, b) pairs (a4, b4: the tempered outputs).
__attribute__((target("avx2"))) static inline __m128i four_verticals(__m128i a4, __m128i b4, __m256d nd, __m128i top) {
  const __m128i sign = _mm_set1_epi32((int)0x80000000u);
  // (double)a for an unsigned a: the signed value of a - 2^31, plus 2^31 (exact)
  __m256d ad = _mm256_add_pd(_mm256_cvtepi32_pd(_mm_xor_si128(a4, sign)), _mm256_set1_pd(2147483648.0));
  __m256d u = _mm256_mul_pd(ad, _mm256_set1_pd(0x1p-32)), nu = _mm256_mul_pd(nd, u);
  __m128i cubic = _mm256_cvttpd_epi32(_mm256_mul_pd(_mm256_mul_pd(nu, u), u)), linear = _mm256_cvttpd_epi32(nu);
  // b < 3 * 2^30 unsigned is (b - 2^31) < 2^30 signed
  __m128i lt = _mm_cmpgt_epi32(_mm_set1_epi32(0x40000000), _mm_xor_si128(b4, sign));
  __m128i v = _mm_blendv_epi8(linear, cubic, lt);
  return _mm_max_epi32(_mm_min_epi32(v, top), _mm_setzero_si128());
}

__attribute__((target("avx2"))) static inline __m256i temper8(__m256i k) {
  k = _mm256_xor_si256(k, _mm256_srli_epi32(k, 11));
  k = _mm256_xor_si256(k, _mm256_and_si256(_mm256_slli_epi32(k, 7), _mm256_set1_epi32((int)0x9d2c5680u)));
  k = _mm256_xor_si256(k, _mm256_and_si256(_mm256_slli_epi32(k, 15), _mm256_set1_epi32((int)0xefc60000u)));
  return _mm256_xor_si256(k, _mm256_srli_epi32(k, 18));
}

// Eight words of the twist (SR_MT_MIX) from their own, their successors' and their partners' words.
__attribute__((target("avx2"))) static inline __m256i mix8(__m256i a, __m256i b, __m256i c) {
  __m256i y = _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32((int)0x80000000u)),
                              _mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff)));
  __m256i odd = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_and_si256(b, _mm256_set1_epi32(1)));  // b & 1: all ones
  return _mm256_xor_si256(_mm256_xor_si256(c, _mm256_srli_epi32(y, 1)),
                          _mm256_and_si256(odd, _mm256_set1_epi32((int)0x9908b0dfu)));
}

// sr_mt_twist_words eight words at a time: word k reads words k + 1 (not yet twisted, also when among the eight: they
// are loaded before the eight are stored) and k + M, or past N - M the word k + M - N twisted 227 words before (in an
// earlier eight), so the eight are each the scalar loop's word.
__attribute__((target("avx2"))) static void twist_words_avx2(uint32_t *mt, int a, int b) {
  int k = a;
  for (; k + 8 <= b && k + 8 <= SR_MT_N - SR_MT_M; k += 8)
    _mm256_storeu_si256((__m256i *)(mt + k), mix8(_mm256_loadu_si256((const __m256i *)(mt + k)),
                                                  _mm256_loadu_si256((const __m256i *)(mt + k + 1)),
                                                  _mm256_loadu_si256((const __m256i *)(mt + k + SR_MT_M))));
  for (; k < b && k < SR_MT_N - SR_MT_M; k++) mt[k] = SR_MT_MIX(mt[k], mt[k + 1], mt[k + SR_MT_M]);
  for (; k + 8 <= b && k + 8 <= SR_MT_N - 1; k += 8)
    _mm256_storeu_si256((__m256i *)(mt + k), mix8(_mm256_loadu_si256((const __m256i *)(mt + k)),
                                                  _mm256_loadu_si256((const __m256i *)(mt + k + 1)),
                                                  _mm256_loadu_si256((const __m256i *)(mt + k + SR_MT_M - SR_MT_N))));
  sr_mt_twist_words(mt, k, b);  // the last few
}

// sr_mt_refill with the twist eight words at a time.
__attribute__((target("avx2"))) static void refill_avx2(sr_mt *r) { sr_mt_refill_by(r, twist_words_avx2); }

__attribute__((target("avx2"))) static void verticals_avx2(sr_mt *r, int64_t n, int32_t *x, int64_t m,
                                                           const uint64_t *bits) {
  const __m256i even_odd = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256d nd = _mm256_set1_pd((double)n);
  const __m128i top = _mm_set1_epi32((int32_t)(n - 1));
  int64_t j = 0;
  while (j < m) {
    // The first round after seeding makes its outputs on demand; made now, they are the same words. A round's end
    // twists the next (sr_mt_next's refill, eight words at a time).
    while ((r->mti + 16 > r->ready && r->ready < SR_MT_N) || r->mti == SR_MT_N) refill_avx2(r);
    if (j + 8 > m || r->mti + 16 > r->ready) {  // the chunk's last few, or a pair across two rounds
      one_vertical(r, n, x, j++, bits);
      continue;
    }
    __m256i w0 = temper8(_mm256_loadu_si256((const __m256i *)(r->mt + r->mti)));
    __m256i w1 = temper8(_mm256_loadu_si256((const __m256i *)(r->mt + r->mti + 8)));
    r->mti += 16;
    w0 = _mm256_permutevar8x32_epi32(w0, even_odd);  // a0 a1 a2 a3 | b0 b1 b2 b3
    w1 = _mm256_permutevar8x32_epi32(w1, even_odd);
    _mm_storeu_si128((__m128i *)(x + j),
                     four_verticals(_mm256_castsi256_si128(w0), _mm256_extracti128_si256(w0, 1), nd, top));
    _mm_storeu_si128((__m128i *)(x + j + 4),
                     four_verticals(_mm256_castsi256_si128(w1), _mm256_extracti128_si256(w1, 1), nd, top));
    for (int k = 0; k < 8; k++) __builtin_prefetch(&bits[x[j + k] >> 6]);
    j += 8;
  }
}
#endif

void synth_verticals(sr_mt *r, int64_t n, int32_t *x, int64_t m, const uint64_t *bits) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (sr_isa() >= SR_ISA_AVX2 && n <= INT32_MAX) {
    verticals_avx2(r, n, x, m, bits);
    return;
  }
#endif
  verticals_plain(r, n, x, m, bits);
}

void synth_iota(int32_t *out, int64_t n) {
  typedef int32_t i32x4 __attribute__((vector_size(16)));  // GCC and Clang vector extension
  i32x4 v = {0, 1, 2, 3}, four = {4, 4, 4, 4};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4, v += four) memcpy(out + i, &v, sizeof v);
  for (; i < n; i++) out[i] = (int32_t)i;
}

// A word's bits four at a time, written whether set or not (the writes past its last set bit are overwritten by the
// next word's), where out has room for them: the loop's exit no longer mispredicts about once a word.
static void take_bits_plain(uint64_t *bits, int64_t w0, int64_t words, int64_t n_struct, int32_t *out, int64_t count) {
  int64_t k = n_struct;
  for (int64_t w = w0; w < words && k < count; w++) {
    uint64_t x = bits[w];
    if (w == w0) x &= ~0ull << (n_struct & 63);
    if (!x) continue;
    bits[w] = 0;
    // the word's set bits (a SWAR count: without -mpopcnt the builtin is a call into libgcc)
    uint64_t p = x - ((x >> 1) & 0x5555555555555555ull);
    p = (p & 0x3333333333333333ull) + ((p >> 2) & 0x3333333333333333ull);
    int64_t base = w * 64, end = k + (int64_t)((((p + (p >> 4)) & 0x0f0f0f0f0f0f0f0full) * 0x0101010101010101ull) >> 56);
    while (k + 4 <= count && k < end) {
      for (int b = 0; b < 4; b++, x &= x - 1) out[k + b] = (int32_t)(base + (x ? __builtin_ctzll(x) : 0));
      k += 4;
    }
    for (k = k < end ? k : end; x; x &= x - 1) out[k++] = (int32_t)(base + __builtin_ctzll(x));
    k = end;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// The same a word at a time without a branch on its bits (a third of the words hold any at 4M tokens, at random: the
// test mispredicted about every third word): the set bits' positions compressed into bytes (AVX-512 VBMI2), widened
// and written sixteen at a time, as many as the word holds (a masked store: nothing past them, nor past count).
__attribute__((target("avx512f,avx512bw,avx512vbmi2,popcnt"))) static void take_bits_vbmi2(uint64_t *bits, int64_t w0,
                                                                                              int64_t words,
                                                                                              int64_t n_struct,
                                                                                              int32_t *out, int64_t count) {
  const __m512i iota = _mm512_set_epi8(63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43,
                                       42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22,
                                       21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  int64_t k = n_struct;
  for (int64_t w = w0; w < words && k < count; w++) {
    uint64_t x = bits[w];
    if (w == w0) x &= ~0ull << (n_struct & 63);
    bits[w] = 0;
    int n = (int)_mm_popcnt_u64(x);
    __m512i at = _mm512_maskz_compress_epi8(x, iota), base = _mm512_set1_epi32((int32_t)(w * 64));
    _mm512_mask_storeu_epi32(out + k, (__mmask16)((1u << (n < 16 ? n : 16)) - 1),
                             _mm512_add_epi32(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(at)), base));
    for (int j = 1; 16 * j < n; j++) {  // more than sixteen: the next sixteen bytes
      int left = n - 16 * j;
      __m128i b = j == 1 ? _mm512_extracti32x4_epi32(at, 1) : j == 2 ? _mm512_extracti32x4_epi32(at, 2)
                                                                     : _mm512_extracti32x4_epi32(at, 3);
      _mm512_mask_storeu_epi32(out + k + 16 * j, (__mmask16)((1u << (left < 16 ? left : 16)) - 1),
                               _mm512_add_epi32(_mm512_cvtepu8_epi32(b), base));
    }
    k += n;
  }
}
#endif

void synth_take_bits(uint64_t *bits, int64_t w0, int64_t words, int64_t n_struct, int32_t *out, int64_t count) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (sr_isa() >= SR_ISA_AVX512 && __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("popcnt") && words <= INT32_MAX / 64) {
    take_bits_vbmi2(bits, w0, words, n_struct, out, count);
    return;
  }
#endif
  take_bits_plain(bits, w0, words, n_struct, out, count);
}
