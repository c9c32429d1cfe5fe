// layout.c — token -> (rank, local offset) maps for contiguous, zigzag, striped and permutation
// layouts, stored as runs (see layout.h).
//
// The remainder rule (any N >= 1, W >= 1, G >= 1; nobody is asked for divisible sizes):
//
//   contiguous   rank r holds c_r = floor(N/W) + [r < N mod W] tokens, slices in rank order: the first
//                N mod W ranks hold one token more. Counts differ by at most one token.
//   zigzag       rank counts c_r as for contiguous. Rank r's tokens are cut into a front chunk of
//                ceil(c_r/2) tokens (chunk r of 2W) and a back chunk of floor(c_r/2) (chunk 2W-1-r);
//                chunks sit in the order 0, 1, ..., 2W-1. Counts differ by at most one token, and the
//                dense causal work sum_{t on r}(t+1) differs between ranks by at most N (one query row;
//                checked by brute force in tests/test_layout.c).
//   striped      G-token blocks, block b = [bG, min((b+1)G, N)) on rank b mod W; the last block holds
//                the N mod G leftover tokens. Counts differ by at most one block (G tokens).
//                When N < W*G the asked G would leave ranks empty, so the G actually used is
//                max(1, floor(N/W)) (`granularity`; the asked one stays in `granularity_asked`).
//   permutation  the file's order perm[0..N) is cut like contiguous: rank r holds perm[s_r .. s_r+c_r)
//                in that local order.
//
// Ranks hold zero tokens only when N < W (contiguous, zigzag, permutation: ranks N..W-1; striped with
// G = 1: the same ranks). They have no runs; schedules still pass other ranks' shards through them.
#include "plan/layout.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/json.h"
#include "plan/util.h"

// ---------------------------------------------------------------------------------------------
// building runs: ranks are filled in rank order, each rank's segments in local order; a segment
// that continues the previous one on the same rank is merged so runs stay maximal.

typedef struct {
  layout *l;
  int64_t cap;
  int cur_rank;
  int64_t cur_local;
} run_builder;

static int builder_add(run_builder *b, int rank, int64_t global, int64_t len) {
  layout *l = b->l;
  if (len <= 0) return 0;
  if (rank != b->cur_rank) {
    b->cur_rank = rank;
    b->cur_local = 0;
  }
  if (l->n_runs > 0) {
    layout_run *last = &l->runs[l->n_runs - 1];
    if (last->rank == rank && last->global + last->len == global) {
      last->len += len;
      b->cur_local += len;
      return 0;
    }
  }
  if (l->n_runs == b->cap) {
    int64_t cap = b->cap ? 2 * b->cap : 64;
    layout_run *r = realloc(l->runs, (size_t)cap * sizeof *r);
    if (!r) return -1;
    l->runs = r;
    b->cap = cap;
  }
  l->runs[l->n_runs++] = (layout_run){.global = global, .local = b->cur_local, .len = len, .rank = rank};
  b->cur_local += len;
  return 0;
}

typedef struct {
  int64_t global, index;
} run_key;

static int cmp_run_key(const void *a, const void *b) {
  int64_t ga = ((const run_key *)a)->global, gb = ((const run_key *)b)->global;
  return (ga > gb) - (ga < gb);
}

// Fill rank_count, rank_run_begin and by_global from the runs (which are in (rank, local) order).
static int finish_index(layout *l) {
  l->rank_run_begin = calloc((size_t)l->world + 1, sizeof *l->rank_run_begin);
  l->by_global = malloc((size_t)(l->n_runs > 0 ? l->n_runs : 1) * sizeof *l->by_global);
  if (!l->rank_run_begin || !l->by_global) return -1;
  run_key *keys = malloc((size_t)(l->n_runs > 0 ? l->n_runs : 1) * sizeof *keys);
  if (!keys) return -1;
  for (int64_t i = 0; i < l->n_runs; i++) {
    l->rank_count[l->runs[i].rank] += l->runs[i].len;
    l->rank_run_begin[l->runs[i].rank + 1]++;
    keys[i] = (run_key){.global = l->runs[i].global, .index = i};
  }
  for (int r = 0; r < l->world; r++) l->rank_run_begin[r + 1] += l->rank_run_begin[r];
  qsort(keys, (size_t)l->n_runs, sizeof *keys, cmp_run_key);
  for (int64_t i = 0; i < l->n_runs; i++) l->by_global[i] = keys[i].index;
  free(keys);
  return 0;
}

// Tokens of rank r under the contiguous rule.
static int64_t even_count(int64_t n, int world, int r) { return n / world + (r < n % world); }
// First token of rank r's slice under the contiguous rule.
static int64_t even_start(int64_t n, int world, int r) { return (n / world) * r + sr_min64(r, n % world); }

// ---------------------------------------------------------------------------------------------
// the kinds

static int build_contiguous(run_builder *b, int64_t n, int world) {
  for (int r = 0; r < world; r++)
    if (builder_add(b, r, even_start(n, world, r), even_count(n, world, r))) return -1;
  return 0;
}

static int build_zigzag(run_builder *b, int64_t n, int world) {
  // Front chunks fill the sequence from the start in rank order, back chunks from the end.
  int64_t front_start = 0, back_end = n;
  for (int r = 0; r < world; r++) {
    int64_t c = even_count(n, world, r), a = (c + 1) / 2, bk = c - a;
    if (builder_add(b, r, front_start, a)) return -1;
    if (builder_add(b, r, back_end - bk, bk)) return -1;
    front_start += a;
    back_end -= bk;
  }
  return 0;
}

static int build_striped(run_builder *b, int64_t n, int world, int64_t g) {
  int64_t blocks = sr_cdiv(n, g);
  for (int r = 0; r < world; r++)
    for (int64_t blk = r; blk < blocks; blk += world)
      if (builder_add(b, r, blk * g, sr_min64(g, n - blk * g))) return -1;
  return 0;
}

static int build_permutation(run_builder *b, int64_t n, int world, const int64_t *perm) {
  for (int r = 0; r < world; r++) {
    int64_t s = even_start(n, world, r), c = even_count(n, world, r);
    for (int64_t i = s; i < s + c; i++)
      if (builder_add(b, r, perm[i], 1)) return -1;
  }
  return 0;
}

// A permutation must name every token once: checked here so a bad file is an input error, not a
// corrupt layout.
static int check_permutation(const int64_t *perm, int64_t n, const char *file, sr_error *e) {
  unsigned char *seen = calloc((size_t)n, 1);
  if (!seen) return sr_internal_error(e, ENOMEM, "permutation of %lld tokens", (long long)n);
  for (int64_t i = 0; i < n; i++) {
    if (perm[i] < 0 || perm[i] >= n) {
      free(seen);
      char f[64];
      snprintf(f, sizeof f, "[%lld]", (long long)i);
      return sr_input_error(e, file, f, "token %lld is outside [0, %lld)", (long long)perm[i], (long long)n);
    }
    if (seen[perm[i]]++) {
      free(seen);
      char f[64];
      snprintf(f, sizeof f, "[%lld]", (long long)i);
      return sr_input_error(e, file, f, "token %lld appears twice (not a permutation)", (long long)perm[i]);
    }
  }
  free(seen);
  return SR_OK;
}

int layout_build(layout_kind kind, int64_t n_tokens, int world, int64_t granularity, const int64_t *perm,
                 layout *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (n_tokens < 1) return sr_input_error(e, NULL, "seq", "%lld tokens: need at least 1", (long long)n_tokens);
  if (world < 1) return sr_input_error(e, NULL, "world", "%d ranks: need at least 1", world);
  if (granularity < 1) return sr_input_error(e, NULL, "granularity", "%lld: need at least 1", (long long)granularity);
  if (kind == LAYOUT_PERMUTATION) {
    if (!perm) return sr_input_error(e, NULL, "layout", "permutation layout needs a permutation");
    int rc = check_permutation(perm, n_tokens, "permutation", e);
    if (rc) return rc;
  }
  out->kind = kind;
  out->n_tokens = n_tokens;
  out->world = world;
  out->granularity_asked = kind == LAYOUT_STRIPED ? granularity : 1;
  out->granularity = out->granularity_asked;
  if (kind == LAYOUT_STRIPED && n_tokens < (int64_t)world * granularity)
    out->granularity = sr_max64(1, n_tokens / world);
  out->rank_count = calloc((size_t)world, sizeof *out->rank_count);
  if (!out->rank_count) goto oom;
  run_builder b = {.l = out, .cur_rank = -1};
  int bad = 0;
  switch (kind) {
    case LAYOUT_CONTIGUOUS: bad = build_contiguous(&b, n_tokens, world); break;
    case LAYOUT_ZIGZAG: bad = build_zigzag(&b, n_tokens, world); break;
    case LAYOUT_STRIPED: bad = build_striped(&b, n_tokens, world, out->granularity); break;
    case LAYOUT_PERMUTATION: bad = build_permutation(&b, n_tokens, world, perm); break;
    default: layout_free(out); return sr_input_error(e, NULL, "layout", "unknown layout kind %d", (int)kind);
  }
  if (bad || finish_index(out)) goto oom;
  return SR_OK;
oom:
  layout_free(out);
  return sr_internal_error(e, ENOMEM, "layout of %lld tokens over %d ranks", (long long)n_tokens, world);
}

void layout_free(layout *l) {
  free(l->rank_count);
  free(l->runs);
  free(l->rank_run_begin);
  free(l->by_global);
  memset(l, 0, sizeof *l);
}

// ---------------------------------------------------------------------------------------------
// lookups

int layout_locate(const layout *l, int64_t t, int32_t *rank, int64_t *local) {
  if (t < 0 || t >= l->n_tokens) return -1;
  int64_t lo = 0, hi = l->n_runs - 1;  // last run whose global start <= t
  while (lo < hi) {
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (l->runs[l->by_global[mid]].global <= t) lo = mid;
    else hi = mid - 1;
  }
  const layout_run *run = &l->runs[l->by_global[lo]];
  *rank = run->rank;
  *local = run->local + (t - run->global);
  return 0;
}

int64_t layout_global(const layout *l, int rank, int64_t local) {
  if (rank < 0 || rank >= l->world || local < 0 || local >= l->rank_count[rank]) return -1;
  int64_t lo = l->rank_run_begin[rank], hi = l->rank_run_begin[rank + 1] - 1;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo + 1) / 2;
    if (l->runs[mid].local <= local) lo = mid;
    else hi = mid - 1;
  }
  return l->runs[lo].global + (local - l->runs[lo].local);
}

void layout_positions(const layout *l, int rank, int64_t *out) {
  for (int64_t i = l->rank_run_begin[rank]; i < l->rank_run_begin[rank + 1]; i++)
    for (int64_t k = 0; k < l->runs[i].len; k++) *out++ = l->runs[i].global + k;
}

// ---------------------------------------------------------------------------------------------
// names

const char *layout_kind_name(layout_kind kind) {
  switch (kind) {
    case LAYOUT_CONTIGUOUS: return "contiguous";
    case LAYOUT_ZIGZAG: return "zigzag";
    case LAYOUT_STRIPED: return "striped";
    case LAYOUT_PERMUTATION: return "permutation";
  }
  return "unknown";
}

const char *layout_permutation_path(const char *text) {
  const char *p = "permutation:";
  return text && strncmp(text, p, strlen(p)) == 0 && text[strlen(p)] ? text + strlen(p) : NULL;
}

static int parse_g(const char *s, int64_t *g) {
  if (!*s) return -1;
  for (const char *p = s; *p; p++)
    if (!isdigit((unsigned char)*p)) return -1;
  errno = 0;
  long long v = strtoll(s, NULL, 10);
  if (errno || v < 1 || v > (1LL << 40)) return -1;
  *g = v;
  return 0;
}

int layout_parse_kind(const char *text, layout_kind *kind, int64_t *g, sr_error *e) {
  if (!text) text = "";
  if (strcmp(text, "contiguous") == 0) *kind = LAYOUT_CONTIGUOUS;
  else if (strcmp(text, "zigzag") == 0) *kind = LAYOUT_ZIGZAG;
  else if (strcmp(text, "striped") == 0) *kind = LAYOUT_STRIPED;
  else if (strncmp(text, "striped:", 8) == 0 || (strncmp(text, "striped", 7) == 0 && isdigit((unsigned char)text[7]))) {
    int64_t v;
    if (parse_g(text + (text[7] == ':' ? 8 : 7), &v))
      return sr_input_error(e, NULL, "layout", "'%s': the striping granularity must be a whole number >= 1", text);
    *kind = LAYOUT_STRIPED;
    if (g) *g = v;
  } else if (layout_permutation_path(text)) *kind = LAYOUT_PERMUTATION;
  else
    return sr_input_error(e, NULL, "layout",
                          "unknown layout '%s' (expected contiguous, zigzag, striped, striped:G, permutation:PATH)",
                          text);
  return SR_OK;
}

// ---------------------------------------------------------------------------------------------
// permutation files: a JSON array of integers, or one integer per line

static int read_perm_lines(const char *text, const char *path, int64_t n, int64_t *perm, sr_error *e) {
  int64_t count = 0, line = 1;
  const char *p = text;
  while (*p) {
    while (*p == ' ' || *p == '\t' || *p == '\r') p++;
    if (*p == '\n') {
      p++, line++;
      continue;
    }
    if (!*p) break;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    char f[64];
    snprintf(f, sizeof f, "line %lld", (long long)line);
    if (end == p || errno) return sr_input_error(e, path, f, "expected an integer token index");
    p = end;
    while (*p == ' ' || *p == '\t' || *p == '\r') p++;
    if (*p && *p != '\n') return sr_input_error(e, path, f, "expected one integer per line");
    if (count >= n) return sr_input_error(e, path, f, "more than %lld entries (the sequence length)", (long long)n);
    perm[count++] = v;
  }
  if (count != n)
    return sr_input_error(e, path, NULL, "%lld entries, but the sequence has %lld tokens", (long long)count, (long long)n);
  return SR_OK;
}

static int read_perm_json(const char *text, const char *path, int64_t n, int64_t *perm, sr_error *e) {
  cJSON *root = NULL;
  int rc = json_parse_text(text, path, &root, e);
  if (rc) return rc;
  if (!cJSON_IsArray(root)) {
    cJSON_Delete(root);
    return sr_input_error(e, path, NULL, "expected a JSON array of token indices");
  }
  int64_t count = cJSON_GetArraySize(root), i = 0;
  if (count != n) {
    cJSON_Delete(root);
    return sr_input_error(e, path, NULL, "%lld entries, but the sequence has %lld tokens", (long long)count, (long long)n);
  }
  const cJSON *it;
  cJSON_ArrayForEach(it, root) {
    // bounded before the cast (a cast of 1e300 is undefined); the range itself is check_permutation's
    if (!cJSON_IsNumber(it) || !(fabs(it->valuedouble) < 9e15) || it->valuedouble != (double)(int64_t)it->valuedouble) {
      char f[64];
      snprintf(f, sizeof f, "[%lld]", (long long)i);
      cJSON_Delete(root);
      return sr_input_error(e, path, f, "expected an integer token index");
    }
    perm[i++] = (int64_t)it->valuedouble;
  }
  cJSON_Delete(root);
  return SR_OK;
}

int layout_parse_permutation(const char *text, const char *path, int64_t n_tokens, int world, layout *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  if (n_tokens < 1) return sr_input_error(e, NULL, "seq", "%lld tokens: need at least 1", (long long)n_tokens);
  int64_t *perm = malloc((size_t)n_tokens * sizeof *perm);
  if (!perm) return sr_internal_error(e, ENOMEM, "permutation of %lld tokens", (long long)n_tokens);
  const char *p = text;
  while (isspace((unsigned char)*p)) p++;
  int rc = *p == '[' ? read_perm_json(text, path, n_tokens, perm, e) : read_perm_lines(text, path, n_tokens, perm, e);
  if (!rc) rc = check_permutation(perm, n_tokens, path, e);
  if (!rc) rc = layout_build(LAYOUT_PERMUTATION, n_tokens, world, 1, perm, out, e);
  free(perm);
  return rc;
}

int layout_load_permutation(const char *path, int64_t n_tokens, int world, layout *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  char *text = NULL;
  int rc = sr_read_file(path, &text, NULL, e);
  if (rc) return rc;
  rc = layout_parse_permutation(text, path, n_tokens, world, out, e);
  free(text);
  return rc;
}
