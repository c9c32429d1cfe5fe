// work.c — per-layer attention work from tiles_account_layer (see work.h).
#include "sim/work.h"

#include <stdlib.h>
#include <string.h>

#include "plan/util.h"

// ---------------------------------------------------------------------------------------------
// store: a hash table of (layout key, copied head) -> counts [W * W]; entries are never evicted, so
// counts handed out stay valid until work_store_close.

#define STORE_BUCKETS 4096

typedef struct store_entry {
  struct store_entry *next;
  uint64_t hash;
  layout_kind kind;
  int64_t n_tokens, granularity;
  int world;
  head_pattern head;   // a copy; its arrays live with the entry
  work_count *counts;  // [world * world]
} store_entry;

// Hashing a VS head reads all its indices (thousands), and every simulation looks up every head again:
// a small table remembers the hash of a head by its address and array pointers. A stale memo (a head
// changed in place) can only make a lookup miss, never return wrong counts: store_find compares contents.
#define STORE_MEMO 4096

typedef struct {
  const head_pattern *h;
  const void *vertical, *slash, *mask;
  int32_t n_vertical, n_slash;
  int kind;
  uint64_t hash;
} head_memo;

struct work_store {
  store_entry *bucket[STORE_BUCKETS];
  int64_t max_bytes, bytes, entries;
  head_memo memo[STORE_MEMO];
};

int work_store_open(int64_t max_bytes, work_store **out, sr_error *e) {
  *out = calloc(1, sizeof **out);
  if (!*out) return sr_internal_error(e, 0, "work: out of memory for the accounting store");
  (*out)->max_bytes = max_bytes;
  return SR_OK;
}

static void entry_free(store_entry *s) {
  free(s->head.vertical);
  free(s->head.slash);
  free(s->head.mask);
  free(s->counts);
  free(s);
}

void work_store_close(work_store *s) {
  if (!s) return;
  for (int b = 0; b < STORE_BUCKETS; b++)
    for (store_entry *x = s->bucket[b], *nx; x; x = nx) {
      nx = x->next;
      entry_free(x);
    }
  free(s);
}

int64_t work_store_entries(const work_store *s) { return s ? s->entries : 0; }
int64_t work_store_bytes(const work_store *s) { return s ? s->bytes : 0; }

// splitmix64's finaliser (Steele et al. 2014) mixes each word into the running hash.
static uint64_t mix(uint64_t h, uint64_t v) {
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Hash of exactly what pattern_heads_equal compares.
static uint64_t head_hash(const head_pattern *h) {
  uint64_t k = mix(0, (uint64_t)h->kind);
  switch (h->kind) {
    case PATTERN_DENSE: break;
    case PATTERN_WINDOW: k = mix(mix(k, (uint64_t)h->sinks), (uint64_t)h->window); break;
    case PATTERN_VS:
      k = mix(mix(k, (uint64_t)h->n_vertical), (uint64_t)h->n_slash);
      for (int32_t i = 0; i < h->n_vertical; i++) k = mix(k, (uint32_t)h->vertical[i]);
      for (int32_t i = 0; i < h->n_slash; i++) k = mix(k, (uint32_t)h->slash[i]);
      break;
    case PATTERN_BLOCK:
      k = mix(mix(mix(k, (uint64_t)h->block), (uint64_t)h->n_blocks), (uint64_t)h->row_words);
      for (int64_t i = 0; i < h->n_blocks * h->row_words; i++) k = mix(k, h->mask[i]);
      break;
    case PATTERN_MOBA:
    case PATTERN_TOKENS:  // stand-ins only are stored (store_add): their draws follow from these
      k = mix(mix(mix(mix(mix(mix(k, (uint64_t)h->block), (uint64_t)h->topk), (uint64_t)h->tok_window), h->gen_key),
                  (uint64_t)h->gen_step),
              (uint64_t)(h->gen_rho * 1e6));
      break;
  }
  return k;
}

// The head's hash (memoised) combined with the layout key.
static uint64_t store_hash(work_store *s, const layout *l, const head_pattern *h) {
  head_memo *m = &s->memo[((uintptr_t)h / sizeof *h) % STORE_MEMO];
  const void *v = h->kind == PATTERN_VS ? (const void *)h->vertical : NULL, *sl = h->kind == PATTERN_VS ? (const void *)h->slash : NULL;
  const void *mk = h->kind == PATTERN_BLOCK ? (const void *)h->mask : NULL;
  if (!(m->h == h && m->kind == (int)h->kind && m->vertical == v && m->slash == sl && m->mask == mk &&
        m->n_vertical == h->n_vertical && m->n_slash == h->n_slash))
    *m = (head_memo){h, v, sl, mk, h->n_vertical, h->n_slash, (int)h->kind, head_hash(h)};
  uint64_t k = mix(mix(mix(mix(0, (uint64_t)l->kind), (uint64_t)l->n_tokens), (uint64_t)l->world), (uint64_t)l->granularity);
  return mix(k, m->hash);
}

static const work_count *store_find(const work_store *s, const layout *l, const head_pattern *h, uint64_t hash) {
  for (const store_entry *x = s->bucket[hash % STORE_BUCKETS]; x; x = x->next)
    if (x->hash == hash && x->kind == l->kind && x->n_tokens == l->n_tokens && x->world == l->world &&
        x->granularity == l->granularity && pattern_heads_equal(&x->head, h))
      return x->counts;
  return NULL;
}

static void *dup_or_null(const void *p, size_t n, int *fail) {
  if (!p || n == 0) return NULL;
  void *q = malloc(n);
  if (!q) *fail = 1;
  else memcpy(q, p, n);
  return q;
}

// Copy counts into the store; a full store or a failed allocation just leaves it out.
static void store_add(work_store *s, const layout *l, const head_pattern *h, uint64_t hash, const work_count *counts) {
  // selections from the data (the executor's) are not stored: they change every forward pass
  if ((h->kind == PATTERN_MOBA || h->kind == PATTERN_TOKENS) && !h->gen_key) return;
  size_t nc = (size_t)l->world * (size_t)l->world * sizeof *counts;
  size_t nv = h->kind == PATTERN_VS ? (size_t)h->n_vertical * 4 : 0, ns = h->kind == PATTERN_VS ? (size_t)h->n_slash * 4 : 0;
  size_t nm = h->kind == PATTERN_BLOCK ? (size_t)(h->n_blocks * h->row_words) * 8 : 0;
  int64_t need = (int64_t)(sizeof(store_entry) + nc + nv + ns + nm);
  if (s->bytes + need > s->max_bytes) return;
  store_entry *x = calloc(1, sizeof *x);
  if (!x) return;
  int fail = 0;
  x->hash = hash;
  x->kind = l->kind;
  x->n_tokens = l->n_tokens;
  x->world = l->world;
  x->granularity = l->granularity;
  x->head = *h;
  x->head.vertical = dup_or_null(h->vertical, nv, &fail);
  x->head.slash = dup_or_null(h->slash, ns, &fail);
  x->head.mask = dup_or_null(h->mask, nm, &fail);
  x->counts = dup_or_null(counts, nc, &fail);
  if (fail || !x->counts) {
    entry_free(x);
    return;
  }
  x->next = s->bucket[hash % STORE_BUCKETS];
  s->bucket[hash % STORE_BUCKETS] = x;
  s->bytes += need;
  s->entries++;
}

// ---------------------------------------------------------------------------------------------
// per-run cache

int work_cache_init(work_cache *c, const layout *l, sr_error *e) {
  work_store *store = c->store;
  memset(c, 0, sizeof c[0]);
  c->store = store;
  c->l = l;
  c->world = l->world;
  size_t n = (size_t)l->world * (size_t)l->world;
  c->scratch = malloc(n * sizeof *c->scratch);
  for (int i = 0; i < WORK_CACHE; i++) c->val[i] = malloc(n * sizeof *c->val[i]);
  for (int i = 0; i < WORK_CACHE; i++)
    if (!c->val[i] || !c->scratch) {
      work_cache_free(c);
      return sr_internal_error(e, 0, "work: out of memory for %d ranks", l->world);
    }
  return SR_OK;
}

void work_cache_free(work_cache *c) {
  free(c->scratch);
  for (int i = 0; i < WORK_CACHE; i++) free(c->val[i]);
  work_store *store = c->store;
  memset(c, 0, sizeof c[0]);
  c->store = store;
}

int work_head(work_cache *c, const pattern *pat, int layer, int head, const work_count **out, sr_error *e) {
  const head_pattern *h = pattern_head(pat, layer, head);
  for (int i = 0; i < c->n_cached; i++)
    if (c->key[i] && pattern_heads_equal(c->key[i], h)) {
      *out = c->val[i];
      return SR_OK;
    }
  // The store's counts never move, so they are handed out directly (no slot of this cache is used).
  work_store *st = c->store && c->l->kind != LAYOUT_PERMUTATION ? c->store : NULL;
  uint64_t hash = st ? store_hash(st, c->l, h) : 0;
  if (st && (*out = store_find(st, c->l, h, hash))) return SR_OK;
  // Account this head alone: a one-layer, one-head view of the pattern.
  pattern view = {pat->n_tokens, 1, 1, (head_pattern *)h};
  int slot = c->n_cached < WORK_CACHE ? c->n_cached++ : (c->next++ % WORK_CACHE);
  c->key[slot] = NULL;
  double t0 = sr_now();
  int rc = tiles_account_layer(&view, 0, c->l, c->val[slot], e);
  c->wall_s += sr_now() - t0;
  if (rc) return rc;
  c->key[slot] = h;
  *out = c->val[slot];
  if (st) store_add(st, c->l, h, hash, c->val[slot]);
  return SR_OK;
}

void work_add(work_count *a, const work_count *b) {
  a->full += b->full;
  a->partial += b->partial;
  a->bars += b->bars;
  a->pairs += b->pairs;
  a->runs += b->runs;
}

// Runs of identical heads (every head of a dense or windowed layer) are added once, times their count:
// summing W^2 cells per head dominated whole simulations at W = 1024.
static void add_scaled(work_count *agg, const work_count *w, int64_t n, double k) {
  for (int64_t i = 0; i < n; i++) {
    agg[i].full += (int64_t)k * w[i].full;
    agg[i].partial += (int64_t)k * w[i].partial;
    agg[i].bars += (int64_t)k * w[i].bars;
    agg[i].pairs += k * w[i].pairs;
    agg[i].runs += (int64_t)k * w[i].runs;
  }
}

int work_layer(work_cache *c, const pattern *pat, int layer, work_count *agg, sr_error *e) {
  int64_t n = (int64_t)c->world * c->world;
  memset(agg, 0, (size_t)n * sizeof *agg);
  const work_count *run = NULL;
  const head_pattern *run_head = NULL;
  int mult = 0;
  for (int h = 0; h < pat->heads; h++) {
    const head_pattern *hp = pattern_head(pat, layer, h);
    if (run && pattern_heads_equal(run_head, hp)) {
      mult++;
      continue;
    }
    // Flush before work_head: a miss may evict the slot `run` points into.
    if (run) add_scaled(agg, run, n, mult);
    int rc = work_head(c, pat, layer, h, &run, e);
    if (rc) return rc;
    run_head = hp;
    mult = 1;
  }
  if (run) add_scaled(agg, run, n, mult);
  return SR_OK;
}
