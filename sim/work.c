// work.c — per-layer attention work from the planner's exact tile accounting (see work.h).
#include "sim/work.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "plan/parallel.h"
#include "plan/util.h"

// ---------------------------------------------------------------------------------------------
// store: interned heads (one copy of each distinct head) and count entries keyed by a layout and a list
// of interned heads (one head: its counts; a layer's heads: their sum). Entries are never evicted, so
// counts handed out stay valid until work_store_close.

#define STORE_BUCKETS 4096

typedef struct interned {
  struct interned *next;
  uint64_t hash;
  head_pattern head;   // a copy; its arrays live with the entry
  int32_t id;
} interned;

typedef struct count_entry {
  struct count_entry *next;
  uint64_t hash;
  layout_kind kind;
  int64_t n_tokens, granularity;
  int world;
  int is_layer;        // a layer's sum (work_layer) rather than one head's counts (work_head)
  int n_ids;
  int32_t *ids;        // [n_ids] interned heads, in head order
  work_count *counts;  // [world * world]
  double pairs;        // a layer's kept pairs (its counts' cells hold none)
} count_entry;

// Hashing a VS head reads all its indices (thousands), and every simulation looks up every head again:
// a small table remembers the hash of a head by its address and array pointers. A stale memo (a head
// changed in place) can only make a lookup miss, never return wrong counts: lookups compare contents.
#define STORE_MEMO 4096

typedef struct {
  const head_pattern *h;
  const void *vertical, *slash, *mask;
  int32_t n_vertical, n_slash;
  int kind;
  uint64_t hash;
} head_memo;

struct work_store {
  pthread_mutex_t mu;  // simulations on several threads share a store (the tuner's points)
  interned *head_bucket[STORE_BUCKETS];
  count_entry *bucket[STORE_BUCKETS];
  int64_t max_bytes, bytes, entries, heads;
  head_memo memo[STORE_MEMO];
};

int work_store_open(int64_t max_bytes, work_store **out, sr_error *e) {
  *out = calloc(1, sizeof **out);
  if (!*out) return sr_internal_error(e, 0, "work: out of memory for the accounting store");
  (*out)->max_bytes = max_bytes;
  pthread_mutex_init(&(*out)->mu, NULL);
  return SR_OK;
}

static void head_copy_free(head_pattern *h) {
  free(h->vertical);
  free(h->slash);
  free(h->mask);
}

void work_store_close(work_store *s) {
  if (!s) return;
  for (int b = 0; b < STORE_BUCKETS; b++) {
    for (count_entry *x = s->bucket[b], *nx; x; x = nx) {
      nx = x->next;
      free(x->ids);
      free(x->counts);
      free(x);
    }
    for (interned *x = s->head_bucket[b], *nx; x; x = nx) {
      nx = x->next;
      head_copy_free(&x->head);
      free(x);
    }
  }
  pthread_mutex_destroy(&s->mu);
  free(s);
}

int64_t work_store_entries(const work_store *s) { return s ? s->entries : 0; }
int64_t work_store_bytes(const work_store *s) { return s ? s->bytes : 0; }
int64_t work_store_heads(const work_store *s) { return s ? s->heads : 0; }

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
    case PATTERN_TOKENS:  // stand-ins only are interned (intern): their draws follow from these
      k = mix(mix(mix(mix(mix(mix(k, (uint64_t)h->block), (uint64_t)h->topk), (uint64_t)h->tok_window), h->gen_key),
                  (uint64_t)h->gen_step),
              (uint64_t)(h->gen_rho * 1e6));
      break;
  }
  return k;
}

static uint64_t memo_hash(work_store *s, const head_pattern *h) {
  head_memo *m = &s->memo[((uintptr_t)h / sizeof *h) % STORE_MEMO];
  const void *v = h->kind == PATTERN_VS ? (const void *)h->vertical : NULL, *sl = h->kind == PATTERN_VS ? (const void *)h->slash : NULL;
  const void *mk = h->kind == PATTERN_BLOCK ? (const void *)h->mask : NULL;
  if (!(m->h == h && m->kind == (int)h->kind && m->vertical == v && m->slash == sl && m->mask == mk &&
        m->n_vertical == h->n_vertical && m->n_slash == h->n_slash))
    *m = (head_memo){h, v, sl, mk, h->n_vertical, h->n_slash, (int)h->kind, head_hash(h)};
  return m->hash;
}

static void *dup_or_null(const void *p, size_t n, int *fail) {
  if (!p || n == 0) return NULL;
  void *q = malloc(n);
  if (!q) *fail = 1;
  else memcpy(q, p, n);
  return q;
}

// The id of head h in the store, copying it in when new; -1 when the store is full or h is a selection from the
// data (nothing is cached).
static int32_t intern(work_store *s, const head_pattern *h) {
  // selections from the data (the executor's) are not stored: they change every forward pass; a stand-in holds
  // no arrays (its hash is cheap, and the memo would not see its draws' key change)
  int gated = h->kind == PATTERN_MOBA || h->kind == PATTERN_TOKENS;
  if (gated && !h->gen_key) return -1;
  uint64_t hash = gated ? head_hash(h) : memo_hash(s, h);
  for (interned *x = s->head_bucket[hash % STORE_BUCKETS]; x; x = x->next)
    if (x->hash == hash && pattern_heads_equal(&x->head, h)) return x->id;
  size_t nv = h->kind == PATTERN_VS ? (size_t)h->n_vertical * 4 : 0, ns = h->kind == PATTERN_VS ? (size_t)h->n_slash * 4 : 0;
  size_t nm = h->kind == PATTERN_BLOCK ? (size_t)(h->n_blocks * h->row_words) * 8 : 0;
  int64_t need = (int64_t)(sizeof(interned) + nv + ns + nm);
  if (s->bytes + need > s->max_bytes) return -1;
  interned *x = calloc(1, sizeof *x);
  if (!x) return -1;
  int fail = 0;
  x->hash = hash;
  x->head = *h;
  x->head.vertical = dup_or_null(h->vertical, nv, &fail);
  x->head.slash = dup_or_null(h->slash, ns, &fail);
  x->head.mask = dup_or_null(h->mask, nm, &fail);
  if (fail) {
    head_copy_free(&x->head);
    free(x);
    return -1;
  }
  x->id = (int32_t)s->heads++;
  x->next = s->head_bucket[hash % STORE_BUCKETS];
  s->head_bucket[hash % STORE_BUCKETS] = x;
  s->bytes += need;
  return x->id;
}

static uint64_t key_hash(const layout *l, int is_layer, const int32_t *ids, int n_ids) {
  uint64_t k = mix(mix(mix(mix(mix(0, (uint64_t)l->kind), (uint64_t)l->n_tokens), (uint64_t)l->world),
                       (uint64_t)l->granularity), (uint64_t)is_layer);
  for (int i = 0; i < n_ids; i++) k = mix(k, (uint64_t)ids[i]);
  return k;
}

static const count_entry *store_find(const work_store *s, const layout *l, int is_layer, const int32_t *ids, int n_ids,
                                     uint64_t hash) {
  for (const count_entry *x = s->bucket[hash % STORE_BUCKETS]; x; x = x->next)
    if (x->hash == hash && x->kind == l->kind && x->n_tokens == l->n_tokens && x->world == l->world &&
        x->granularity == l->granularity && x->is_layer == is_layer && x->n_ids == n_ids &&
        !memcmp(x->ids, ids, (size_t)n_ids * sizeof *ids))
      return x;
  return NULL;
}

// Copy counts (and a layer's kept pairs) into the store; a full store or a failed allocation just leaves them out.
static void store_add(work_store *s, const layout *l, int is_layer, const int32_t *ids, int n_ids, uint64_t hash,
                      const work_count *counts, double pairs) {
  if (store_find(s, l, is_layer, ids, n_ids, hash)) return;  // another thread stored the same counts meanwhile
  size_t nc = (size_t)l->world * (size_t)l->world * sizeof *counts;
  int64_t need = (int64_t)(sizeof(count_entry) + nc + (size_t)n_ids * sizeof *ids);
  if (s->bytes + need > s->max_bytes) return;
  count_entry *x = calloc(1, sizeof *x);
  if (!x) return;
  int fail = 0;
  x->hash = hash;
  x->kind = l->kind;
  x->n_tokens = l->n_tokens;
  x->world = l->world;
  x->granularity = l->granularity;
  x->is_layer = is_layer;
  x->n_ids = n_ids;
  x->ids = dup_or_null(ids, (size_t)n_ids * sizeof *ids, &fail);
  x->counts = dup_or_null(counts, nc, &fail);
  x->pairs = pairs;
  if (fail || !x->counts) {
    free(x->ids);
    free(x->counts);
    free(x);
    return;
  }
  x->next = s->bucket[hash % STORE_BUCKETS];
  s->bucket[hash % STORE_BUCKETS] = x;
  s->bytes += need;
  s->entries++;
}

// The store when it may serve this layout.
static work_store *usable_store(const work_cache *c) {
  return c->store && c->l->kind != LAYOUT_PERMUTATION && c->l->kind != LAYOUT_BALANCED ? c->store : NULL;
}

// ---------------------------------------------------------------------------------------------
// per-run cache

int work_cache_init(work_cache *c, const layout *l, sr_error *e) {
  work_store *store = c->store;
  memset(c, 0, sizeof c[0]);
  c->store = store;
  c->l = l;
  c->world = l->world;
  c->threads = sr_threads();
  size_t n = (size_t)l->world * (size_t)l->world;
  c->acct = calloc((size_t)c->threads, sizeof *c->acct);
  c->part = calloc((size_t)c->threads, sizeof *c->part);
  c->scratch = calloc((size_t)c->threads, sizeof *c->scratch);
  int fail = !c->acct || !c->part || !c->scratch;
  for (int i = 0; i < WORK_CACHE && !fail; i++) fail = !(c->val[i] = malloc(n * sizeof *c->val[i]));
  if (fail) {
    work_cache_free(c);
    return sr_internal_error(e, 0, "work: out of memory for %d ranks", l->world);
  }
  return SR_OK;
}

void work_cache_free(work_cache *c) {
  for (int t = 0; t < c->threads; t++) {
    if (c->acct) tiles_accounter_close(c->acct[t]);
    if (c->part) free(c->part[t]);
    if (c->scratch) free(c->scratch[t]);
  }
  free(c->acct);
  free(c->part);
  free(c->scratch);
  for (int i = 0; i < WORK_CACHE; i++) free(c->val[i]);
  work_store *store = c->store;
  memset(c, 0, sizeof c[0]);
  c->store = store;
}

// Thread t's accounter and, when `arrays`, its partial sums and scratch, made on first use.
static int thread_state(work_cache *c, int t, int arrays, sr_error *e) {
  size_t n = (size_t)c->world * (size_t)c->world;
  if (!c->acct[t]) {
    int rc = tiles_accounter_open(c->l, &c->acct[t], e);
    if (rc) return rc;
  }
  if (arrays && !c->part[t] && !(c->part[t] = calloc(n, sizeof *c->part[t])))
    return sr_internal_error(e, 0, "work: out of memory for %d ranks", c->world);
  if (arrays && !c->scratch[t] && !(c->scratch[t] = malloc(n * sizeof *c->scratch[t])))
    return sr_internal_error(e, 0, "work: out of memory for %d ranks", c->world);
  return SR_OK;
}

// One head's counts into out (zeroed first), on thread t's accounter.
static int account_one(work_cache *c, int t, const head_pattern *h, work_count *out, sr_error *e) {
  int rc = thread_state(c, t, 0, e);
  if (rc) return rc;
  memset(out, 0, (size_t)c->world * c->world * sizeof *out);
  return tiles_account_head_add(c->acct[t], h, out, e);
}

int work_head(work_cache *c, const pattern *pat, int layer, int head, const work_count **out, sr_error *e) {
  const head_pattern *h = pattern_head(pat, layer, head);
  for (int i = 0; i < c->n_cached; i++)
    if (c->key[i] && pattern_heads_equal(c->key[i], h)) {
      *out = c->val[i];
      return SR_OK;
    }
  // The store's counts never move, so they are handed out directly (no slot of this cache is used).
  work_store *st = usable_store(c);
  int32_t id = -1;
  uint64_t hash = 0;
  if (st) {
    pthread_mutex_lock(&st->mu);
    id = intern(st, h);
    hash = id >= 0 ? key_hash(c->l, 0, &id, 1) : 0;
    const count_entry *hit = id >= 0 ? store_find(st, c->l, 0, &id, 1, hash) : NULL;
    *out = hit ? hit->counts : NULL;
    pthread_mutex_unlock(&st->mu);
    if (*out) return SR_OK;
  }
  int slot = c->n_cached < WORK_CACHE ? c->n_cached++ : (c->next++ % WORK_CACHE);
  c->key[slot] = NULL;
  double t0 = sr_now();
  int rc = account_one(c, 0, h, c->val[slot], e);
  c->wall_s += sr_now() - t0;
  if (rc) return rc;
  c->key[slot] = h;
  *out = c->val[slot];
  if (id >= 0) {
    pthread_mutex_lock(&st->mu);
    store_add(st, c->l, 0, &id, 1, hash, c->val[slot], 0);
    pthread_mutex_unlock(&st->mu);
  }
  return SR_OK;
}

void work_add(work_count *a, const work_count *b) {
  a->full += b->full;
  a->partial += b->partial;
  a->bars += b->bars;
  a->pairs += b->pairs;
  a->runs += b->runs;
}

// Identical heads (every head of a dense or windowed layer) are accounted once and added times their
// count: summing W^2 cells per head dominated whole simulations at W = 1024.
static void add_scaled(work_count *agg, const work_count *w, int64_t n, double k) {
  for (int64_t i = 0; i < n; i++) {
    agg[i].full += (int64_t)k * w[i].full;
    agg[i].partial += (int64_t)k * w[i].partial;
    agg[i].bars += (int64_t)k * w[i].bars;
    agg[i].pairs += k * w[i].pairs;
    agg[i].runs += (int64_t)k * w[i].runs;
  }
}

// The distinct heads of a layer (by content: a layer has few heads, so pairwise is fine) and how often each occurs:
// head[0 .. n), mult[0 .. n) of room for the layer's heads. Identical heads (every head of a dense or windowed layer)
// are accounted once.
static int distinct_heads(const pattern *pat, int layer, const head_pattern **head, int *mult) {
  int n = 0;
  for (int h = 0; h < pat->heads; h++) {
    const head_pattern *hp = pattern_head(pat, layer, h);
    int k = 0;
    while (k < n && !pattern_heads_equal(head[k], hp)) k++;
    if (k == n) {
      head[n] = hp;
      mult[n++] = 0;
    }
    mult[k]++;
  }
  return n;
}

// The kept pairs of agg's cells (heads counted per cell) added to *pairs, which leave the cells: integers below 2^53,
// so exact in any order.
static void pairs_out_of_cells(work_count *agg, int64_t n, double *pairs) {
  for (int64_t i = 0; i < n; i++) {
    *pairs += agg[i].pairs;
    agg[i].pairs = 0;
  }
}

// A layer's entry in the store: *ids (the interned heads, NULL when the store cannot keep the layer) and *hash set;
// returns 1 with agg and *pairs filled when the store holds the layer.
static int layer_lookup(work_cache *c, const pattern *pat, int layer, work_count *agg, double *pairs, int32_t **ids,
                        uint64_t *hash) {
  work_store *st = usable_store(c);
  int H = pat->heads;
  *ids = st ? malloc((size_t)H * sizeof **ids) : NULL;
  *hash = 0;
  if (!*ids) return 0;
  const count_entry *hit = NULL;
  pthread_mutex_lock(&st->mu);
  for (int h = 0; h < H && *ids; h++)
    if (((*ids)[h] = intern(st, pattern_head(pat, layer, h))) < 0) {
      free(*ids);
      *ids = NULL;  // the store is full: account as without it
    }
  if (*ids) {
    *hash = key_hash(c->l, 1, *ids, H);
    if ((hit = store_find(st, c->l, 1, *ids, H, *hash))) {
      memcpy(agg, hit->counts, (size_t)c->world * c->world * sizeof *agg);
      *pairs = hit->pairs;
    }
  }
  pthread_mutex_unlock(&st->mu);
  return hit != NULL;
}

static void layer_store(work_cache *c, int n_heads, const int32_t *ids, uint64_t hash, const work_count *agg,
                        double pairs) {
  work_store *st = usable_store(c);
  if (!st || !ids) return;
  pthread_mutex_lock(&st->mu);
  store_add(st, c->l, 1, ids, n_heads, hash, agg, pairs);
  pthread_mutex_unlock(&st->mu);
}

// ---------------------------------------------------------------------------------------------
// one layer, its heads over threads

typedef struct {
  work_cache *c;
  const head_pattern **head;  // [n] distinct heads
  int *mult;                  // [n]
  int n;
  int64_t *pairs;             // [threads] kept pairs each thread's accounter counted in total, times their heads' counts
} layer_job;

static int layer_item(void *ctx, int i, int t, sr_error *e) {
  layer_job *j = ctx;
  work_cache *c = j->c;
  int rc = thread_state(c, t, 1, e);
  if (rc) return rc;
  // A thread's heads leave their sums by residue pending in its accounter, folded into part[t] once
  // (work_layer) instead of once a head; a repeated head is accounted on its own, so those are folded first.
  if (j->mult[i] == 1) {
    rc = tiles_account_head_add_pending(c->acct[t], j->head[i], c->part[t], e);
    j->pairs[t] += tiles_accounter_take_pairs(c->acct[t]);
    return rc;
  }
  tiles_accounter_fold(c->acct[t], c->part[t]);
  if ((rc = account_one(c, t, j->head[i], c->scratch[t], e))) return rc;
  j->pairs[t] += j->mult[i] * tiles_accounter_take_pairs(c->acct[t]);
  add_scaled(c->part[t], c->scratch[t], (int64_t)c->world * c->world, j->mult[i]);
  return SR_OK;
}

// Threads worth starting: each costs tens of microseconds, a small layer's heads less.
static int threads_for(const work_cache *c, int n_distinct) {
  double work = (double)n_distinct * (double)c->l->n_tokens;
  return work >= (double)(1 << 20) ? c->threads : 1;
}

int work_layer(work_cache *c, const pattern *pat, int layer, work_count *agg, double *pairs, sr_error *e) {
  int64_t n = (int64_t)c->world * c->world;
  int H = pat->heads, rc = SR_OK;
  int32_t *ids = NULL;
  uint64_t hash = 0;
  *pairs = 0;
  if (layer_lookup(c, pat, layer, agg, pairs, &ids, &hash)) {
    free(ids);
    return SR_OK;
  }
  layer_job j = {c, malloc((size_t)H * sizeof *j.head), malloc((size_t)H * sizeof *j.mult), 0,
                 calloc((size_t)c->threads, sizeof *j.pairs)};
  if (!j.head || !j.mult || !j.pairs) {
    rc = sr_internal_error(e, 0, "work: out of memory");
    goto out;
  }
  j.n = distinct_heads(pat, layer, j.head, j.mult);
  double t0 = sr_now();
  int threads = threads_for(c, j.n);
  for (int t = 0; t < threads && !rc; t++)
    if (!(rc = thread_state(c, t, 1, e))) tiles_accounter_pairs_per_cell(c->acct[t], 0);  // only their sum is needed
  if (!rc) rc = sr_parallel_for(j.n, threads, layer_item, &j, e);
  memset(agg, 0, (size_t)n * sizeof *agg);
  for (int t = 0; t < threads; t++) {
    if (!c->part[t]) continue;
    tiles_accounter_fold(c->acct[t], c->part[t]);
    if (c->acct[t]) tiles_accounter_pairs_per_cell(c->acct[t], 1);
    if (!rc)
      for (int64_t i = 0; i < n; i++) work_add(&agg[i], &c->part[t][i]);
    memset(c->part[t], 0, (size_t)n * sizeof *c->part[t]);
  }
  for (int t = 0; t < threads; t++) *pairs += (double)j.pairs[t];
  pairs_out_of_cells(agg, n, pairs);
  c->wall_s += sr_now() - t0;
  if (!rc) layer_store(c, H, ids, hash, agg, *pairs);
out:
  free(j.head);
  free(j.mult);
  free(j.pairs);
  free(ids);
  return rc;
}

// ---------------------------------------------------------------------------------------------
// several layers, a layer a thread

// Layer `layer` on thread t alone: its heads added in order to t's accounter, their sums by residue folded once,
// straight into agg.
static int layer_on_thread(work_cache *c, int t, const pattern *pat, int layer, work_count *agg, double *pairs,
                           sr_error *e) {
  int64_t n = (int64_t)c->world * c->world;
  int H = pat->heads, rc = SR_OK;
  int32_t *ids = NULL;
  uint64_t hash = 0;
  *pairs = 0;
  if (layer_lookup(c, pat, layer, agg, pairs, &ids, &hash)) {
    free(ids);
    return SR_OK;
  }
  const head_pattern **head = malloc((size_t)H * sizeof *head);
  int *mult = malloc((size_t)H * sizeof *mult);
  if (!head || !mult) rc = sr_internal_error(e, 0, "work: out of memory");
  if (!rc) rc = thread_state(c, t, 0, e);
  int64_t total = 0;  // kept pairs counted in total
  memset(agg, 0, (size_t)n * sizeof *agg);
  int cell_pairs = 1;
  if (!rc) {
    int n_distinct = distinct_heads(pat, layer, head, mult);
    tiles_accounter_take_cell_pairs(c->acct[t]);  // from this layer's heads on
    tiles_accounter_pairs_per_cell(c->acct[t], 0);  // only their sum is needed
    for (int i = 0; i < n_distinct && !rc; i++) {
      if (mult[i] == 1) {
        rc = tiles_account_head_add_pending(c->acct[t], head[i], agg, e);
        total += tiles_accounter_take_pairs(c->acct[t]);
        continue;
      }
      tiles_accounter_fold(c->acct[t], agg);  // a repeated head is accounted on its own, then added times its count
      if (!c->scratch[t] && !(c->scratch[t] = malloc((size_t)n * sizeof *c->scratch[t]))) {
        rc = sr_internal_error(e, 0, "work: out of memory for %d ranks", c->world);
        break;
      }
      if ((rc = account_one(c, t, head[i], c->scratch[t], e))) break;
      total += mult[i] * tiles_accounter_take_pairs(c->acct[t]);
      add_scaled(agg, c->scratch[t], n, mult[i]);
    }
    tiles_accounter_fold(c->acct[t], agg);
    tiles_accounter_pairs_per_cell(c->acct[t], 1);
    cell_pairs = tiles_accounter_take_cell_pairs(c->acct[t]);
  }
  *pairs = (double)total;
  if (cell_pairs) pairs_out_of_cells(agg, n, pairs);  // else every cell's is 0 (work_layer_end)
  if (!rc) layer_store(c, H, ids, hash, agg, *pairs);
  free(head);
  free(mult);
  free(ids);
  return rc;
}

int work_layer_on(work_cache *c, int t, const pattern *pat, int layer, work_count *agg, double *pairs, sr_error *e) {
  return layer_on_thread(c, t, pat, layer, agg, pairs, e);
}

int work_layer_begin(work_cache *c, int t, work_count *agg, sr_error *e) {
  int rc = thread_state(c, t, 0, e);
  if (rc) return rc;
  memset(agg, 0, (size_t)c->world * c->world * sizeof *agg);
  tiles_accounter_take_cell_pairs(c->acct[t]);  // from this layer's heads on
  tiles_accounter_pairs_per_cell(c->acct[t], 0);  // only their sum is needed
  return SR_OK;
}

int work_layer_head(work_cache *c, int t, const head_pattern *h, work_count *agg, double *pairs, sr_error *e) {
  int rc = tiles_account_head_add_pending(c->acct[t], h, agg, e);
  *pairs += (double)tiles_accounter_take_pairs(c->acct[t]);
  return rc;
}

void work_layer_end(work_cache *c, int t, work_count *agg, double *pairs) {
  tiles_accounter_fold(c->acct[t], agg);
  tiles_accounter_pairs_per_cell(c->acct[t], 1);
  // Heads that counted their pairs in total left every cell's at 0: W^2 cells not read again (42 MB at 1024 ranks).
  if (tiles_accounter_take_cell_pairs(c->acct[t])) pairs_out_of_cells(agg, (int64_t)c->world * c->world, pairs);
}

typedef struct {
  work_cache *c;
  const pattern *pat;
  const int *layers;
  work_count *const *agg;
  double *pairs;
} layers_job;

static int layers_item(void *ctx, int i, int t, sr_error *e) {
  layers_job *j = ctx;
  return layer_on_thread(j->c, t, j->pat, j->layers[i], j->agg[i], &j->pairs[i], e);
}

int work_layers(work_cache *c, const pattern *pat, const int *layers, int count, work_count *const *agg, double *pairs,
                sr_error *e) {
  if (count == 1) return work_layer(c, pat, layers[0], agg[0], pairs, e);
  double t0 = sr_now();
  layers_job j = {c, pat, layers, agg, pairs};
  int threads = c->threads < count ? c->threads : count;
  int rc = sr_parallel_for(count, threads, layers_item, &j, e);
  c->wall_s += sr_now() - t0;
  return rc;
}
