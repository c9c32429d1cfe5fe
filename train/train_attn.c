// train_attn.c — the trainer's attention plans (train_attn.h): a cache of per-layer dist_attn plans, built
// before the first step in threads, on demand, or ahead of use by prefetch threads.
#include "train/train_attn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec_plan.h"
#include "plan/pattern_spec.h"
#include "plan/util.h"
#if SR_HAVE_CUDA
#include "train/model_cuda.h"
#endif

// Sizing the cache by memory (GPU, no fixed cap): each plan kept beyond the first is counted at 1.25 x the first
// plan's own bytes (layers' sparse indices differ in size), and 3 GiB stay free for NCCL, cuBLAS and the allocator.
#define PLAN_GROWTH 1.25
#define PLAN_RESERVE_GIB 3.0

// ---- the order of use ------------------------------------------------------------------------

// A step uses the layers up (forward) then down (backward; a recomputed forward and its backward are one
// use): place k of the cycle of 2 L uses.
static int order_at(const train_attn *b, int k) {
  int L = b->layers;
  k %= 2 * L;
  return k < L ? k : 2 * L - 1 - k;
}

// Uses from the current one until `layer` is used again (2 L + 1 when never).
static int next_use(const train_attn *b, int layer) {
  for (int k = 1; k <= 2 * b->layers; k++)
    if (order_at(b, b->pos + k) == layer) return k;
  return 2 * b->layers + 1;
}

// A call for `layer`: a new use unless it continues the current one (the backward of the last forward).
static void advance(train_attn *b, int layer) {
  if (layer == b->last_layer) return;
  int k = next_use(b, layer);
  if (k <= 2 * b->layers) b->pos = (b->pos + k) % (2 * b->layers);
  b->last_layer = layer;
}

static int find(const train_attn *b, int key) {
  for (int i = 0; i < b->n; i++)
    if (b->slot_layer[i] == key) return i;
  return -1;
}

// ---- building ---------------------------------------------------------------------------------

// The plan of `key`: restored from host memory when it is held there, else built. Called without the lock (the
// held plan is taken under it, so no other thread sees it); *restored says which.
static int obtain(train_attn *b, int key, dist_attn **out, int *restored, sr_error *e) {
  dist_attn *d = NULL;
  pthread_mutex_lock(&b->mu);
  if (b->held && b->held[key]) {
    d = b->held[key], b->held[key] = NULL;
    b->host_bytes -= b->held_bytes[key];
  }
  pthread_mutex_unlock(&b->mu);
  *restored = d != NULL;
  *out = NULL;
  if (!d) {
    int rc = dist_attn_create_with(b->p, b->pat, key, b->c, b->be, b->index_build, out, e);
    if (!rc && b->moba_gate != EXEC_GATE_HOST && (rc = dist_attn_moba_gate_gpu(*out, b->moba_gate == EXEC_GATE_GPU, e)))
      dist_attn_free(*out), *out = NULL;
    return rc;
  }
  int rc = dist_attn_device_restore(d, e);
  if (rc) dist_attn_free(d);
  else *out = d;
  return rc;
}

// Count a plan d obtained in dt seconds (lock held).
static void count(train_attn *b, const dist_attn *d, int restored, double dt) {
  if (restored) b->restored++, b->restore_s += dt;
  else b->built++, b->build_s += dt, b->built_gpu += d && dist_attn_index_on_gpu(d);
}

// Bytes the process's attention scratch holds: the shared workspace and the GPU index builder (0 while it has given
// its state back: dist_gpu_build.c does when a build leaves the device short).
static int64_t shared_now(void) { return dist_attn_shared_bytes() + dist_attn_builder_bytes(); }

int train_attn_fit_cap(int layers, int have, double free_gib, double plan_gib, double builder_gib) {
  int least = (int)sr_max64(1, have);
  if (plan_gib <= 0) return (int)sr_max64(least, layers);
  // The plans still to come are built beside the kept ones, each build making the builder's state again, so its
  // bytes stay free (once every layer's plan is kept it is freed for good, when the cap is every layer anyway).
  // Counting it only where the plans would not all fit otherwise would keep every plan in some cases, but the
  // later of their builds would find no room for the builder and build on the host (seconds a plan at 512K).
  double room = free_gib - PLAN_RESERVE_GIB - fmax(builder_gib, 0);
  double more = fmin(fmax(floor(room / (PLAN_GROWTH * plan_gib)), 0), layers);  // in range before the cast
  return (int)sr_max64(least, sr_min64(layers, have + (int64_t)more));
}

#if SR_HAVE_CUDA
// GiB the GPU index builder takes again at its next build beyond what it holds now (its state given back).
static double builder_again_gib(void) {
  return (double)sr_max64(0, dist_attn_builder_built_bytes() - dist_attn_builder_bytes()) / (1 << 30);
}
#endif

// Device bytes of a plan just built, for the report (any thread; the lock is not held).
static void note_bytes(train_attn *b, const dist_attn *d) {
  int64_t plan_bytes = 0, need = 0, shared = d ? shared_now() : 0;
  if (d) dist_attn_device_bytes(d, &plan_bytes, &need);
  pthread_mutex_lock(&b->mu);
  b->plan_bytes_max = sr_max64(b->plan_bytes_max, plan_bytes);
  b->shared_bytes = sr_max64(b->shared_bytes, shared);
  pthread_mutex_unlock(&b->mu);
}

// dist_attn_create for `key` into slot i, timed; on the GPU the first build sizes the cache. Called without
// the lock: slot i is marked as building, so no other thread touches it.
static int build(train_attn *b, int i, int key, sr_error *e) {
  double t0 = sr_now(), gib = 0;
  int cap = 0, rc = SR_OK;
#if SR_HAVE_CUDA
  pthread_mutex_lock(&b->mu);
  int first = b->fit && b->built == 0;
  pthread_mutex_unlock(&b->mu);
  double used0 = 0, used1 = 0, total = 0;
  int64_t shared0 = shared_now();
  if (first && (rc = model_cuda_memory(&used0, &total, e))) return rc;
#endif
  dist_attn *d = NULL;
  int restored = 0;
  rc = obtain(b, key, &d, &restored, e);
  double dt = sr_now() - t0;
#if SR_HAVE_CUDA
  if (!rc && first && !restored && !(rc = model_cuda_memory(&used1, &total, e))) {
    // Every buffer of the model exists already, and so does the attention scratch every plan shares (the
    // first plan made it; the layers of one model share its shape). What the first plan took beyond that
    // is its own (indices, masks, positions; allocator rounding included, so never less than the bytes it
    // asked for). Keep 3 GiB for NCCL, cuBLAS and the allocator, and count each further plan at 1.25 x
    // the first (layers' sparse indices differ in size). The GPU index builder's state is in both used1 and
    // shared_now when it kept it, in neither when it gave it back; then a later build takes it again, which
    // train_attn_fit_cap leaves room for.
    int64_t own = 0, need = 0;
    dist_attn_device_bytes(d, &own, &need);
    double grown = (double)(shared_now() - shared0) / (1 << 30);
    gib = fmax(used1 - used0 - grown, (double)own / (1 << 30));
    cap = train_attn_fit_cap(b->layers, 1, total - used1, gib, builder_again_gib());
  }
#endif
  if (rc && d) {
    dist_attn_free(d);
    d = NULL;
  }
  note_bytes(b, d);
  pthread_mutex_lock(&b->mu);
  count(b, d, restored, dt);
  if (cap > 0) b->cap = cap, b->plan_gib = gib;
  b->slot[i] = d;
  b->slot_layer[i] = rc ? -1 : key;
  b->slot_used[i] = ++b->clock;
  pthread_mutex_unlock(&b->mu);
  return rc;
}

// With the host cache: keep the plan of `layer`, just dropped from the device, in host memory (lock held);
// 0 when it is not kept (no host cache, or its device copies could not be released). Over the cap, the held
// plan whose next use is farthest is freed (it may be this one).
static int hold(train_attn *b, int layer, dist_attn *d) {
  if (!b->host_cache || !d || layer < 0) return 0;
  sr_error ignore = {0};
  if (dist_attn_device_release(d, &ignore)) return 0;  // its layer builds it again, as without the cache
  int64_t bytes = dist_attn_host_bytes(d);
  b->held[layer] = d, b->held_bytes[layer] = bytes, b->host_bytes += bytes;
  while (b->host_bytes > b->host_cap) {
    int far = -1, far_u = -1;
    for (int l = 0; l < b->layers; l++)
      if (b->held[l] && next_use(b, l) > far_u) far_u = next_use(b, l), far = l;
    dist_attn_free(b->held[far]);
    b->host_bytes -= b->held_bytes[far];
    b->held[far] = NULL;
    b->host_dropped++;
  }
  return 1;
}

static void evict(train_attn *b, int i) {
  // on the GPU both wait for the work queued so far (dist_attn_cuda_release, dist_attn_device_release)
  if (!hold(b, b->slot_layer[i], b->slot[i])) dist_attn_free(b->slot[i]);
  b->slot[i] = NULL;
  b->slot_layer[i] = -1;
  b->slot_used[i] = 0;
}

// A slot for a plan needed `need` uses from now (0: now), not holding `keep`: a free one, else the kept plan
// used least recently (no prefetch) or the one next used farthest away, only if farther than `need`.
// -1 when every candidate is being built or is needed sooner.
static int claim(train_attn *b, int keep, int need) {
  if (b->n < b->cap) {
    int i = b->n++;
    b->slot_layer[i] = -1;
    return i;
  }
  int victim = -1, far = need;
  for (int i = 0; i < b->n; i++) {
    if (b->slot_building[i] || b->slot_layer[i] == keep) continue;
    if (b->slot_layer[i] < 0) return i;
    if (!b->prefetch) {
      if (victim < 0 || b->slot_used[i] < b->slot_used[victim]) victim = i;
      continue;
    }
    int u = next_use(b, b->slot_layer[i]);
    if (u > far) far = u, victim = i;
  }
  if (victim >= 0) evict(b, victim);
  return victim;
}

// Queue builds for the next `prefetch` layers after the current use that are not kept (lock held).
static void prefetch_after(train_attn *b, int cur) {
  int seen = 0;
  for (int k = 1; k <= 2 * b->layers && seen < b->prefetch; k++) {
    int x = order_at(b, b->pos + k);
    if (x == cur) continue;
    seen++;
    if (find(b, x) >= 0) continue;
    int i = claim(b, cur, k);
    if (i < 0) return;
    b->slot_layer[i] = x;
    b->slot_building[i] = 1;
    b->queue[(b->q_head + b->q_len++) % b->layers] = i;
    pthread_cond_broadcast(&b->cv);
  }
}

static void *prefetch_worker(void *arg) {
  train_attn *b = arg;
#if SR_HAVE_CUDA
  sr_error ignore = {0};
  if (b->device >= 0) model_cuda_set_device(b->device, &ignore);  // new threads start on device 0
#endif
  pthread_mutex_lock(&b->mu);
  for (;;) {
    while (!b->stop && b->q_len == 0) pthread_cond_wait(&b->cv, &b->mu);
    if (b->stop) break;
    int i = b->queue[b->q_head];
    b->q_head = (b->q_head + 1) % b->layers, b->q_len--;
    int layer = b->slot_layer[i];
    pthread_mutex_unlock(&b->mu);
    // a failed build leaves the slot empty: the layer's use then builds it and reports the error
    sr_error e = {0};
    dist_attn *d = NULL;
    double t0 = sr_now();
    int restored = 0;
    int rc = obtain(b, layer, &d, &restored, &e);
    if (!rc) note_bytes(b, d);
    pthread_mutex_lock(&b->mu);
    count(b, rc ? NULL : d, restored, sr_now() - t0);
    b->slot[i] = rc ? NULL : d;
    if (rc) b->slot_layer[i] = -1;
    b->slot_used[i] = ++b->clock;
    b->slot_building[i] = 0;
    pthread_cond_broadcast(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

// ---- the cache --------------------------------------------------------------------------------

// The building-ahead threads (b->prefetch > 0); none started: no building ahead.
static int start_builders(train_attn *b, sr_error *e) {
  b->tid = calloc((size_t)b->threads, sizeof *b->tid);
  if (!b->tid) return sr_internal_error(e, 0, "train: out of memory");
  for (; b->n_tid < b->threads; b->n_tid++)
    if (pthread_create(&b->tid[b->n_tid], NULL, prefetch_worker, b) != 0) break;
  if (b->n_tid == 0) b->prefetch = 0;
  return SR_OK;
}

int train_attn_init(train_attn *b, const plan *p, pattern *pat, comm *c, int cuda, int cache, int prefetch,
                    int threads, const int64_t *positions, sr_error *e) {
  memset(b, 0, sizeof *b);
  b->p = p;
  b->pat = pat;
  b->c = c;
  b->be = cuda ? DIST_CUDA : DIST_CPU;
  b->layers = (int)p->model.num_layers;
  b->shared = strcmp(p->spec.pattern, "dense") == 0 || p->spec.pattern[0] == 0;
  b->gated = pattern_spec_estimation(p->spec.pattern) == PATTERN_GATED;
  b->online = pattern_spec_at_run_time(p->spec.pattern);  // vs-online, gated, adaspa-online
  // the trainer estimates or gates on the CPU itself; adaspa-online searches inside dist_attn on either backend
  b->online_cpu = (pattern_spec_estimation(p->spec.pattern) == PATTERN_ONLINE || b->gated) && !cuda;
  b->positions = positions;
  b->cap = b->shared ? 1 : cache > 0 ? (int)sr_min64(cache, b->layers) : b->layers;
  b->fit = cuda && !b->shared && cache == 0;
  // building ahead reads the pattern while the online estimate rewrites it: not both
  b->prefetch = b->shared || b->online ? 0 : prefetch;
  b->threads = threads > 0 ? threads : 1;
  b->device = -1;
  b->last_layer = -1;
  b->pos = 2 * b->layers - 1;  // the first use is the first forward's layer 0
  if (b->online_cpu) {
    // the estimate needs every key next to the last queries: with more ranks it would take the three
    // combining passes of plan/pattern_estimate.h over the comm backend, which the CPU trainer does not run
    if (c->world != 1)
      return sr_input_error(e, NULL, "--pattern", "%s: online estimation trains on one rank (the job has %d)",
                            p->spec.pattern, c->world);
    if (b->gated ? pattern_spec_gating_opts(p->spec.pattern, &b->gate, e) : online_vs_from_spec(&b->ov, p->spec.pattern, e))
      return e->code;
  }
  size_t L = (size_t)b->layers;
  b->slot = calloc(L, sizeof *b->slot);
  b->slot_layer = malloc(L * sizeof *b->slot_layer);
  b->slot_building = calloc(L, 1);
  b->slot_used = calloc(L, sizeof *b->slot_used);
  b->queue = calloc(L, sizeof *b->queue);
  if (!b->slot || !b->slot_layer || !b->slot_building || !b->slot_used || !b->queue)
    return sr_internal_error(e, 0, "train: out of memory");
  for (size_t i = 0; i < L; i++) b->slot_layer[i] = -1;
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
#if SR_HAVE_CUDA
  if (cuda) {
    int rc = model_cuda_get_device(&b->device, e);
    if (rc) return rc;
  }
#endif
  return b->prefetch > 0 ? start_builders(b, e) : SR_OK;
}

int train_attn_prefetch_auto(train_attn *b, int depth, sr_error *e) {
  if (b->prefetch || b->shared || b->online || b->cap >= b->layers || depth <= 0) return SR_OK;
  pthread_mutex_lock(&b->mu);
  b->prefetch = depth;
  pthread_mutex_unlock(&b->mu);
  return start_builders(b, e);
}

void train_attn_free(train_attn *b) {
  dist_attn_builder_free();
  if (b->slot) {
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < b->n_tid; i++) pthread_join(b->tid[i], NULL);
    for (int i = 0; i < b->n; i++) dist_attn_free(b->slot[i]);
    for (int l = 0; b->held && l < b->layers; l++) dist_attn_free(b->held[l]);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
  }
  free(b->tid);
  free(b->slot);
  free(b->slot_layer);
  free(b->slot_building);
  free(b->slot_used);
  free(b->queue);
  free(b->held);
  free(b->held_bytes);
  memset(b, 0, sizeof *b);
}

int train_attn_get(train_attn *b, int layer, dist_attn **out, sr_error *e) {
  int key = b->shared ? 0 : layer, rc = SR_OK, i, waited = 0;
  double t0 = sr_now();
  pthread_mutex_lock(&b->mu);
  if (b->prefetch || b->host_cache) advance(b, key);  // the host cache's cap frees by next use
  for (;; waited = 1) {
    i = find(b, key);
    if (i >= 0 && !b->slot_building[i]) {
      b->slot_used[i] = ++b->clock;
      *out = b->slot[i];
      break;
    }
    if (i < 0 && (i = claim(b, key, 0)) >= 0) {  // not kept (or its prefetch failed): build it here
      waited = 1;
      b->slot_building[i] = 1;
      int fresh = !b->held || !b->held[key];
      if (fresh) b->on_demand++;  // else restored (counted apart)
      pthread_mutex_unlock(&b->mu);
      double t0 = sr_now();
      rc = build(b, i, key, e);
      pthread_mutex_lock(&b->mu);
      if (fresh) b->on_demand_s += sr_now() - t0;
      b->slot_building[i] = 0;
      pthread_cond_broadcast(&b->cv);
      *out = b->slot[i];
      break;
    }
    pthread_cond_wait(&b->cv, &b->mu);  // being built ahead, or every slot is
  }
  if (!rc && b->prefetch) prefetch_after(b, key);
  b->waits += waited;
  b->get_s += sr_now() - t0;
  pthread_mutex_unlock(&b->mu);
  return rc;
}

void train_attn_waits(train_attn *b, int64_t *waits, double *seconds) {
  pthread_mutex_lock(&b->mu);
  *waits = b->waits, *seconds = b->get_s;
  pthread_mutex_unlock(&b->mu);
}

int64_t train_attn_kept_bytes(train_attn *b) {
  int64_t total = 0;
  pthread_mutex_lock(&b->mu);
  for (int i = 0; i < b->n; i++)
    if (b->slot[i] && !b->slot_building[i]) {
      int64_t own = 0, need = 0;
      dist_attn_device_bytes(b->slot[i], &own, &need);
      total += own;
    }
  pthread_mutex_unlock(&b->mu);
  return total;
}

// MemAvailable of /proc/meminfo in bytes (0: not there).
static int64_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  long long kib = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
  fclose(f);
  return (int64_t)kib * 1024;
}

int train_attn_host_cache(train_attn *b, double cap_gib, sr_error *e) {
  if (b->shared || b->online) return SR_OK;
  b->mem_available = mem_available();
  if (cap_gib < 0) {
    if (b->mem_available <= 0)
      return sr_input_error(e, "/proc/meminfo", "MemAvailable", "not found: give the host cache's cap (--attn-host-gib)");
    // Half of what is free, split between the ranks of this node (each holds its own plans): the rest is the
    // model's host side, MPI and the page cache.
    int64_t ranks = sr_max64(1, sr_min64(b->c->world, b->p->cluster.gpus_per_node));
    b->host_cap = b->mem_available / 2 / ranks;
  } else {
    b->host_cap = (int64_t)(cap_gib * (double)(1 << 30));
  }
  dist_attn **held = calloc((size_t)b->layers, sizeof *held);
  int64_t *held_bytes = calloc((size_t)b->layers, sizeof *held_bytes);
  if (!held || !held_bytes) {
    free(held), free(held_bytes);
    return sr_internal_error(e, 0, "train: out of memory");
  }
  pthread_mutex_lock(&b->mu);  // the building-ahead threads may have started
  b->held = held, b->held_bytes = held_bytes, b->host_cache = 1;
  pthread_mutex_unlock(&b->mu);
  return SR_OK;
}

void train_attn_on_demand(train_attn *b, int64_t *built, double *seconds) {
  pthread_mutex_lock(&b->mu);
  *built = b->on_demand, *seconds = b->on_demand_s;
  pthread_mutex_unlock(&b->mu);
}

int train_attn_held(const train_attn *b) {
  int n = 0;
  for (int l = 0; b->held && l < b->layers; l++) n += b->held[l] != NULL;
  return n;
}

int train_attn_prebuild_first(train_attn *b, sr_error *e) {
  if (b->online_cpu) return SR_OK;  // its plans follow each sample's estimate
  dist_attn *first;
  int rc = train_attn_get(b, 0, &first, e);  // slot 0; on the GPU it sizes the cache
  b->on_demand = 0, b->on_demand_s = 0, b->waits = 0, b->get_s = 0;  // the steps' figures start after the prebuild
  return rc;
}

double train_attn_plans_need(const train_attn *b) {
  if (b->shared || b->plan_gib <= 0) return 0;
  return (double)(b->layers - b->n) * PLAN_GROWTH * b->plan_gib * (double)(1 << 30);
}

int train_attn_refit(train_attn *b, sr_error *e) {
#if SR_HAVE_CUDA
  if (!b->fit || b->plan_gib <= 0) return SR_OK;
  double used = 0, total = 0;
  int rc = model_cuda_memory(&used, &total, e);
  if (rc) return rc;
  double again = builder_again_gib();
  pthread_mutex_lock(&b->mu);
  b->cap = train_attn_fit_cap(b->layers, b->n, total - used, b->plan_gib, again);
  pthread_mutex_unlock(&b->mu);
#endif
  return SR_OK;
}

int train_attn_prebuild(train_attn *b, sr_error *e) {
  if (b->online_cpu) return SR_OK;  // its plans follow each sample's estimate
  dist_attn *first;
  int rc = train_attn_get(b, 0, &first, e);  // slot 0; on the GPU it sizes the cache
  b->on_demand = 0, b->on_demand_s = 0, b->waits = 0, b->get_s = 0;  // the steps' figures start after the prebuild
  int n = (int)sr_min64(b->cap, b->layers);
  if (!rc && (b->shared || n >= b->layers) && n <= 1) dist_attn_builder_free();  // every layer's plan is kept
  if (rc || n <= 1) return rc;
  // Layers 1 .. n-1 into slots 1 .. n-1, in threads: a layer's tile index is seconds of CPU work at 128K
  // tokens a rank (measured: 2-36 s for Qwen2.5-3B's vs-topp layers at 128K-256K on the 2-core container).
  pthread_mutex_lock(&b->mu);
  for (int l = 1; l < n; l++) {
    // layer 0's use above queued its next layers already when building ahead: queued twice, the second build
    // would replace (and leak) the first
    if (l < b->n && b->slot_layer[l] == l) continue;
    b->slot_layer[l] = l;
    b->slot_building[l] = 1;
    b->queue[(b->q_head + b->q_len++) % b->layers] = l;
  }
  b->n = n;
  int own = b->n_tid == 0;  // no prefetch threads: start some for this
  if (own && (b->tid = calloc((size_t)b->threads, sizeof *b->tid)) != NULL)
    for (; b->n_tid < b->threads && b->n_tid < n - 1; b->n_tid++)
      if (pthread_create(&b->tid[b->n_tid], NULL, prefetch_worker, b) != 0) break;
  pthread_cond_broadcast(&b->cv);
  while (b->n_tid == 0 && b->q_len > 0) {  // no thread could start: build them here, one by one
    int i = b->queue[b->q_head];
    b->q_head = (b->q_head + 1) % b->layers, b->q_len--;
    pthread_mutex_unlock(&b->mu);
    sr_error ignore = {0};
    build(b, i, i, &ignore);  // a failure leaves the slot empty: reported below
    pthread_mutex_lock(&b->mu);
    b->slot_building[i] = 0;
  }
  for (int l = 1; l < n; l++)
    while (b->slot_building[l]) pthread_cond_wait(&b->cv, &b->mu);
  if (own && b->n_tid > 0) {  // stop the build threads again (no building ahead)
    b->stop = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < b->n_tid; i++) pthread_join(b->tid[i], NULL);
    pthread_mutex_lock(&b->mu);
    b->stop = 0, b->n_tid = 0;
  }
  if (own) {
    free(b->tid);
    b->tid = NULL;
  }
  pthread_mutex_unlock(&b->mu);
  for (int l = 1; l < n && !rc; l++)  // a failed build: again here, for its error
    if (!b->slot[l]) rc = build(b, l, l, e);
  b->waits = 0, b->get_s = 0;
  if (!rc && n >= b->layers) dist_attn_builder_free();  // every layer's plan is kept: no build will come
  return rc;
}

int train_attn_read_patterns(train_attn *b, sr_error *e) {
  for (int i = 0; b->online && !b->online_cpu && i < b->n; i++)
    if (b->slot[i] && b->slot_layer[i] >= 0) {
      int rc = dist_attn_pattern_used(b->slot[i], b->pat, e);
      if (rc) return rc;
    }
  return SR_OK;
}

void train_attn_search_at(train_attn *b, int64_t step, int flags) { train_attn_search_sample_at(b, step, 0, flags); }
void train_attn_search_sample_at(train_attn *b, int64_t step, int64_t sample, int flags) {
  b->search_step = step, b->search_sample = sample, b->search_flags = flags;
}

int train_attn_search_stats(const train_attn *b, dist_search_stats *out, sr_error *e) {
  memset(out, 0, sizeof *out);
  out->recall_reused = -1;
  if (pattern_spec_estimation(b->p->spec.pattern) != PATTERN_SEARCHED) return SR_OK;
  int plans = 0;
  double reused = 0;
  for (int i = 0; i < b->n; i++) {
    if (!b->slot[i] || b->slot_layer[i] < 0) continue;
    dist_search_stats s;
    int rc = dist_attn_search_stats(b->slot[i], &s, e);
    if (rc) return rc;
    out->searches += s.searches, out->reuses += s.reuses, out->dense_passes += s.dense_passes;
    out->recall_search += s.recall_search, out->sparsity_mean += s.sparsity_mean;
    out->dense_s += s.dense_s, out->search_s += s.search_s, out->index_s += s.index_s;
    out->table_searches += s.table_searches;
    if (s.reused_measured > 0) reused += s.recall_reused * (double)s.reused_measured, out->reused_measured += s.reused_measured;
    plans++;
  }
  if (plans > 0) out->recall_search /= plans, out->sparsity_mean /= plans;
  if (out->reused_measured > 0) out->recall_reused = reused / (double)out->reused_measured;
  return SR_OK;
}

// ---- the model's callbacks --------------------------------------------------------------------

int train_attn_estimate(void *ctx, int layer, int64_t T, const float *q, const float *k, sr_error *e) {
  train_attn *b = ctx;
  const model_config *m = &b->p->model;
  double t0 = sr_now();
  int H = (int)m->num_heads, Hkv = (int)m->num_kv_heads, d = (int)m->head_dim, rc;
  if (b->gated && b->gate.kind == PATTERN_MOBA) {
    moba_shape s = {H, Hkv, d, b->pat->n_tokens, b->gate.block, b->gate.topk};
    rc = moba_select(&s, q, k, b->positions, T, b->pat, layer, e);
  } else if (b->gated) {
    tokens_shape s = {H, Hkv, d, b->pat->n_tokens, b->gate.topk, b->gate.ih, b->gate.id};
    rc = tokens_select(&s, q, k, b->positions, T, b->pat, layer, e);
  } else {
    rc = online_vs_estimate(&b->ov, q, k, b->positions, T, H, Hkv, d, b->pat, layer, e);
  }
  pthread_mutex_lock(&b->mu);
  int i = find(b, layer);  // its plan was built from the old pattern
  if (i >= 0) evict(b, i);
  pthread_mutex_unlock(&b->mu);
  b->estimates++;
  b->estimate_s += sr_now() - t0;
  return rc;
}

// The recall probe after a forward, on the pattern that forward ran (vs-online on CUDA: read back first)
static int probe(train_attn *b, dist_attn *a, int layer, const void *q, const void *k, sr_error *e) {
  if (!b->recall || b->recall->lo > b->recall->hi) return SR_OK;
  int rc = b->online && !b->online_cpu ? dist_attn_pattern_used(a, b->pat, e) : SR_OK;
  return rc ? rc : attn_recall_layer(b->recall, layer, q, k, b->pat, e);
}

int train_attn_fwd(void *ctx, int layer, int64_t T, const float *q, const float *k, const float *v, float *o, float *lse,
                   sr_error *e) {
  train_attn *b = ctx;
  dist_attn *a;
  int rc = train_attn_get(ctx, layer, &a, e);
  if (!rc) dist_attn_search_sample(a, b->search_step, b->search_sample, b->search_flags);  // adaspa-online only
  if (!rc) rc = dist_attn_fwd(a, q, k, v, o, lse, e);
  return rc ? rc : probe(ctx, a, layer, q, k, e);
}

int train_attn_bwd(void *ctx, int layer, int64_t T, const float *q, const float *k, const float *v, const float *o,
                   const float *lse, const float *dout, float *dq, float *dk, float *dv, sr_error *e) {
  dist_attn *a;
  int rc = train_attn_get(ctx, layer, &a, e);
  return rc ? rc : dist_attn_bwd(a, q, k, v, o, lse, dout, dq, dk, dv, e);
}

int train_attn_fwd_dev(void *ctx, int layer, int64_t T, const void *q, const void *k, const void *v, void *o, float *lse,
                       sr_error *e) {
  train_attn *b = ctx;
  dist_attn *a;
  int rc = train_attn_get(ctx, layer, &a, e);
  if (!rc) dist_attn_search_sample(a, b->search_step, b->search_sample, b->search_flags);  // adaspa-online only
  if (!rc) rc = dist_attn_fwd(a, q, k, v, o, lse, e);
  return rc ? rc : probe(ctx, a, layer, q, k, e);
}

int train_attn_bwd_dev(void *ctx, int layer, int64_t T, const void *q, const void *k, const void *v, const void *o,
                       const float *lse, const void *dout, float *dq, float *dk, float *dv, sr_error *e) {
  dist_attn *a;
  int rc = train_attn_get(ctx, layer, &a, e);
  return rc ? rc : dist_attn_bwd(a, q, k, v, o, lse, dout, dq, dk, dv, e);
}
