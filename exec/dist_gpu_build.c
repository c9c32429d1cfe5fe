// dist_gpu_build.c — a fixed vertical-slash layer's execution form built on the GPU (dist_internal.h): the
// layer's bit sets (its masks, cheap host work) go to the device, where kernels/vs_gpu.h converts them into
// the tile index and kernels/transpose_gpu.h transposes it for every source; both come back to the host as
// the plan's own (a->ti, the host transposes), so from there on the plan is what a host build makes and
// uploads (released, restored and held like one). The conversion gives tiles_build's arrays bit for bit
// (vs_gpu.h), in milliseconds where tiles_build and tiles_transpose take seconds of CPU a layer at 128K tokens.
// With plan.spec.fwd_runs the forward form is built there too (vs_gpu_runs_build, from the converted index on the
// device: tiles_runs_build's arrays bit for bit) and comes back as a->ti_fwd, so no plan waits on the host for it.
//
// One builder serves the process (plans are built in threads): its device state (the layout's tables, the
// conversion and transposition scratch and results) is made for one (layout, query rank, heads) and remade
// for another, used under a mutex on a stream of its own, and kept between builds until dist_attn_builder_free,
// or given back after a build that leaves the device short (dist_gpu_builder_keep): at 512K tokens on one rank,
// with its bars sorted, it held more than 20 GiB and kept it left the shared workspace no room (results/train/
// 2026-11-27-h200-mtraining-512k-offload-attempts); the bars counted into place instead, one transpose at a time and
// every array at its need, about 7 GiB by the simulator's model (sim/plan_cache.c). The next build remakes it (its
// layout tables take milliseconds).
//
// Lock order: the workspace's (exec/dist_workspace_cuda.c, ws_use) before the builder's (gb_mu). ws_attach holds
// ws_use exclusively when it gives the builder back (dist_attn_builder_free) or reads its bytes; nothing here takes
// ws_use while holding gb_mu (dist_gpu_build asks the workspace's growth before it locks gb_mu).
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "exec/dist_internal.h"
#include "exec/dist_workspace.h"
#include "plan/util.h"

// Room kept beyond the builder and the plan's own needs (allocator rounding, the bars' scratch the uploads add to
// the workspace's share, NCCL and cuBLAS growth).
#define BUILDER_MARGIN_BYTES (1LL << 30)

int dist_gpu_builder_keep(int64_t free_bytes, int64_t builder_bytes, int64_t need_bytes) {
  if (builder_bytes <= 0) return 1;  // nothing to give back
  // Kept, the builder must leave room for what the plan takes next and for a remake of itself (another layout's
  // builder, a larger one, is made beside the plans kept meanwhile).
  return free_bytes >= builder_bytes + sr_max64(need_bytes, 0) + BUILDER_MARGIN_BYTES;
}

dist_gpu_outcome dist_gpu_build_outcome(int rc, int out_of_memory, dist_index_build how) {
  if (rc == SR_OK) return DIST_GPU_BUILT;
  return out_of_memory && how != DIST_INDEX_GPU ? DIST_GPU_ON_HOST : DIST_GPU_FAILED;
}

int dist_gpu_oom_notice_first(void) {
  static atomic_int told;
  return atomic_exchange(&told, 1) == 0;
}

#if SR_HAVE_CUDA
#include <cuda_runtime.h>

#include "exec/dist_attn_cuda_state.h"
#include "kernels/transpose_gpu.h"
#include "kernels/vs_gpu.h"

static pthread_mutex_t gb_mu = PTHREAD_MUTEX_INITIALIZER;  // one build at a time; guards gb
static struct {
  int ready;
  uint64_t key;            // what the state is made for: layout_key of (layout, query rank, heads)
  vs_gpu_layout lay;
  vs_gpu_est bits;         // only heads, kv_heads, head_dim, n_tokens, words, vbits, sbits: the conversion's input
  vs_gpu_conv conv;
  vs_gpu_runs runs;        // the forward form's build (plan.spec.fwd_runs), made at its first use (runs_ready)
  int runs_ready;
  sa_gpu_transposer *tr;
  cudaStream_t st;
  int64_t bytes;           // device bytes the builder took, measured around its builds (one build at a time)
  int64_t built_bytes;     // bytes it held at the end of its last build, kept or given back since (0: none yet)
} gb;

// FNV-1a over the layout's runs, the query rank and the heads: equal keys, equal device tables.
static uint64_t layout_key(const layout *l, int q_rank, int heads) {
  uint64_t h = 1469598103934665603ull;
  int64_t head[5] = {l->n_tokens, l->world, l->n_runs, q_rank, heads};
  const unsigned char *p = (const unsigned char *)head;
  for (size_t i = 0; i < sizeof head; i++) h = (h ^ p[i]) * 1099511628211ull;
  p = (const unsigned char *)l->runs;
  for (size_t i = 0; i < (size_t)l->n_runs * sizeof *l->runs; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static void builder_free_locked(void) {
  if (!gb.ready) return;
  cudaStreamSynchronize(gb.st);
  vs_gpu_conv_free(&gb.conv);
  if (gb.runs_ready) vs_gpu_runs_free(&gb.runs);
  vs_gpu_layout_free(&gb.lay);
  cudaFree(gb.bits.vbits), cudaFree(gb.bits.sbits);
  sa_gpu_transposer_free(gb.tr);
  cudaStreamDestroy(gb.st);
  memset(&gb.lay, 0, sizeof gb.lay), memset(&gb.bits, 0, sizeof gb.bits), memset(&gb.conv, 0, sizeof gb.conv);
  memset(&gb.runs, 0, sizeof gb.runs);
  gb.tr = NULL, gb.ready = 0, gb.runs_ready = 0, gb.key = 0, gb.bytes = 0;
}

// The builder for this plan's layout, query rank and heads (lock held).
static int builder_ready(const struct dist_attn *a, sr_error *e) {
  uint64_t key = layout_key(a->glay, a->group, a->H);
  if (gb.ready && gb.key == key) return SR_OK;
  builder_free_locked();
  int64_t N = a->glay->n_tokens, words = sr_cdiv(N, 32);
  vs_gpu_est *b = &gb.bits;
  b->heads = a->H, b->kv_heads = a->Hkv, b->head_dim = a->d, b->n_tokens = N, b->words = words;
  CUDA_TRY(cudaStreamCreateWithFlags(&gb.st, cudaStreamNonBlocking));
  gb.ready = 1;  // from here builder_free_locked releases what exists
  CUDA_TRY(cudaMalloc((void **)&b->vbits, sizeof(uint32_t) * (size_t)(a->H * words)));
  CUDA_TRY(cudaMalloc((void **)&b->sbits, sizeof(uint32_t) * (size_t)(a->H * words)));
  // Sized for what the build brings to the host: the index's arrays at a layer's need, one transpose at a time
  // (downloaded before the next), without the bars' scratch (the plan's uploads bring their own).
  if (vs_gpu_layout_init(a->glay, &gb.lay, e) || vs_gpu_conv_init(&gb.conv, b, &gb.lay, a->group, e) ||
      sa_gpu_transposer_new_for_download(a->R, &gb.tr, e))
    return e->code;
  gb.conv.exact = 1;
  gb.key = key;
  return SR_OK;
}

// The heads' bit sets (a->masks, host) into the builder's contiguous device arrays [heads][words].
static int bits_upload(const struct dist_attn *a, sr_error *e) {
  size_t row = sizeof(uint32_t) * (size_t)gb.bits.words;
  for (int h = 0; h < a->H; h++) {
    CUDA_TRY(cudaMemcpyAsync(gb.bits.vbits + h * gb.bits.words, a->masks[h].vbits, row, cudaMemcpyHostToDevice, gb.st));
    CUDA_TRY(cudaMemcpyAsync(gb.bits.sbits + h * gb.bits.words, a->masks[h].sbits, row, cudaMemcpyHostToDevice, gb.st));
  }
  return SR_OK;
}

// The converted index or the forward form (device arrays, host scalars) into host arrays as tiles_build and
// tiles_runs_build allocate them (runs where the device index has them).
static int index_download(const struct dist_attn *a, const sa_gpu_index *g, tile_index *t, sr_error *e) {
  const tile_index *d = &g->d;
  memset(t, 0, sizeof *t);
  t->heads = d->heads, t->world = d->world, t->q_rank = d->q_rank, t->n_qtiles = d->n_qtiles;
  t->n_tiles = d->n_tiles, t->n_bars = d->n_bars;
  int64_t offs = (int64_t)d->heads * d->n_qtiles * (d->world + 1);
  t->tile_cnt = malloc(sizeof(int64_t) * (size_t)(offs + 1));
  t->bar_cnt = malloc(sizeof(int64_t) * (size_t)(offs + 1));
  t->tile_idx = malloc(sizeof(int32_t) * (size_t)(t->n_tiles + 1));
  t->tile_kind = malloc((size_t)(t->n_tiles + 1));
  t->bar_idx = malloc(sizeof(int32_t) * (size_t)(t->n_bars + 1));
  if (d->run_cnt) {
    t->n_runs = d->n_runs;
    t->run_cnt = malloc(sizeof(int64_t) * (size_t)(offs + 1));
    t->run_key = malloc(sizeof(int32_t) * (size_t)(t->n_runs + 1));
    t->run_len = malloc((size_t)(t->n_runs + 1));
  }
  if (!t->tile_cnt || !t->bar_cnt || !t->tile_idx || !t->tile_kind || !t->bar_idx ||
      (d->run_cnt && (!t->run_cnt || !t->run_key || !t->run_len)))
    return sr_internal_error(e, 0, "rank %d: out of memory for layer %d's tile index", a->c->rank, a->layer);
  CUDA_TRY(cudaMemcpyAsync(t->tile_cnt, d->tile_cnt, sizeof(int64_t) * (size_t)offs, cudaMemcpyDeviceToHost, gb.st));
  CUDA_TRY(cudaMemcpyAsync(t->bar_cnt, d->bar_cnt, sizeof(int64_t) * (size_t)offs, cudaMemcpyDeviceToHost, gb.st));
  if (t->n_tiles > 0) {
    CUDA_TRY(cudaMemcpyAsync(t->tile_idx, d->tile_idx, sizeof(int32_t) * (size_t)t->n_tiles, cudaMemcpyDeviceToHost, gb.st));
    CUDA_TRY(cudaMemcpyAsync(t->tile_kind, d->tile_kind, (size_t)t->n_tiles, cudaMemcpyDeviceToHost, gb.st));
  }
  if (t->n_bars > 0)
    CUDA_TRY(cudaMemcpyAsync(t->bar_idx, d->bar_idx, sizeof(int32_t) * (size_t)t->n_bars, cudaMemcpyDeviceToHost, gb.st));
  if (d->run_cnt) {
    CUDA_TRY(cudaMemcpyAsync(t->run_cnt, d->run_cnt, sizeof(int64_t) * (size_t)offs, cudaMemcpyDeviceToHost, gb.st));
  }
  if (d->run_cnt && t->n_runs > 0) {
    CUDA_TRY(cudaMemcpyAsync(t->run_key, d->run_key, sizeof(int32_t) * (size_t)t->n_runs, cudaMemcpyDeviceToHost, gb.st));
    CUDA_TRY(cudaMemcpyAsync(t->run_len, d->run_len, (size_t)t->n_runs, cudaMemcpyDeviceToHost, gb.st));
  }
  CUDA_TRY(cudaStreamSynchronize(gb.st));
  return SR_OK;
}

// plan.spec.fwd_runs: the forward form of the converted index, built on the device and brought to the host as
// a->ti_fwd (none where it has no runs, as the host build leaves it).
static int fwd_form_build(struct dist_attn *a, sr_error *e) {
  if (!gb.runs_ready) {
    if (vs_gpu_runs_init(&gb.runs, &gb.bits, &gb.lay, a->group, e)) {
      vs_gpu_runs_free(&gb.runs);  // what the failed init made
      return e->code;
    }
    gb.runs.exact = 1;
    gb.runs_ready = 1;
  }
  if (vs_gpu_runs_build(&gb.runs, &gb.conv.ix.d, &gb.bits, &gb.lay, gb.st, e)) return e->code;
  if (gb.runs.ix.d.n_runs == 0) return SR_OK;
  if (index_download(a, &gb.runs.ix, &a->ti_fwd, e)) {
    tiles_free(&a->ti_fwd);
    memset(&a->ti_fwd, 0, sizeof a->ti_fwd);
    return e->code;
  }
  a->ti_fwd_view = a->ti_fwd;  // every head (U = 1), as a->ti_view
  return SR_OK;
}

// Every source's transposed index with its bar chunks, built on the GPU from the converted index and brought to
// the host (s->tt_host, s->bc_host: what a release keeps, so uploads and restores take them from there).
static int transposes_download(struct dist_attn *a, sr_error *e) {
  cuda_state *s = a->cuda;
  s->tt_host = calloc((size_t)a->R, sizeof *s->tt_host);
  s->bc_host = calloc((size_t)a->R, sizeof *s->bc_host);
  if (!s->tt_host || !s->bc_host) return sr_internal_error(e, 0, "rank %d: out of memory for the transposes", a->c->rank);
  for (int g = 0; g < a->R; g++) {
    const sa_gpu_index_t *t;
    if (sa_gpu_transpose(gb.tr, &gb.conv.ix.d, g, rows_of(a, g), a->H, a->Hkv, gb.st, &t, e)) return e->code;
    // sa_gpu_index_t_download copies on the legacy stream, which does not wait for a non-blocking one
    CUDA_TRY(cudaStreamSynchronize(gb.st));
    if (sa_gpu_index_t_download(t, &s->tt_host[g], &s->bc_host[g], e)) return e->code;
  }
  return SR_OK;
}

// Device bytes the shared workspace grows by for this plan's shape (the bars' terms come with the uploads: the
// margin covers them). The plan's own copies (dist_attn_host_bytes, once built) are added to it.
static int64_t workspace_need(const struct dist_attn *a) {
  ws_shape sh;
  sr_error ignore = {0};  // a shape the set-up cannot make fails there, with its error
  return ws_shape_of(a->p, a->c->rank, a->rp, &sh, &ignore) ? 0 : ws_grow_bytes(&sh);
}

int dist_gpu_build(struct dist_attn *a, int *out_of_memory, sr_error *e) {
  *out_of_memory = 0;
  int64_t ws_need = workspace_need(a);  // before gb_mu (lock order above)
  pthread_mutex_lock(&gb_mu);
  // Only the builder allocates device memory in here (the plan's copies are uploaded after), so what the device
  // lost across the call is the builder's growth (when no other thread allocates meanwhile: the first plan's
  // build, which sizes the trainer's cache, runs alone).
  size_t free0 = 0, free1 = 0, total = 0;
  cudaMemGetInfo(&free0, &total);
  double t = sr_now();
  int rc = builder_ready(a, e);
  if (!rc) rc = bits_upload(a, e);
  if (!rc) dist_setup_mark(a, "GPU builder ready, bits queued", &t);
  if (!rc) rc = vs_gpu_convert(&gb.conv, &gb.bits, &gb.lay, gb.st, e);
  if (!rc) rc = index_download(a, &gb.conv.ix, &a->ti, e);
  if (!rc) dist_setup_mark(a, "index converted on the GPU and downloaded", &t);
  if (!rc && dist_fwd_form_wanted(a)) rc = fwd_form_build(a, e);
  if (!rc && dist_fwd_form_wanted(a)) dist_setup_mark(a, "forward form built on the GPU and downloaded", &t);
  if (!rc) rc = transposes_download(a, e);
  if (!rc) dist_setup_mark(a, "transposes built on the GPU and downloaded", &t);
  if (rc) {
    // The failed call's error is this thread's last one (a failed allocation is not sticky); taken here, so no
    // later kernel check reports it again.
    *out_of_memory = cudaGetLastError() == cudaErrorMemoryAllocation;
    builder_free_locked();  // a failed build leaves nothing half made behind
  } else if (cudaMemGetInfo(&free1, &total) == cudaSuccess) {
    if (free0 > free1) gb.bytes += (int64_t)(free0 - free1);
    gb.built_bytes = gb.bytes;
    if (!dist_gpu_builder_keep((int64_t)free1, gb.bytes, ws_need + dist_attn_host_bytes(a))) builder_free_locked();
  }
  pthread_mutex_unlock(&gb_mu);
  if (rc) return e->code ? e->code : SR_EINTERNAL;
  a->ti_view = a->ti;  // one group of one rank (U = 1): this rank computes every head
  return SR_OK;
}

int dist_gpu_build_supported(const struct dist_attn *a) {
  vs_layout_tables t;
  sr_error ignore = {0};
  if (a->R > 255 || (int64_t)a->H * sr_cdiv(a->n_q, TILE) >= (1 << 24)) return 0;  // vs_gpu_conv_init's limits
  if (vs_layout_tables_build(a->glay, &t, &ignore)) return 0;  // local order must follow global order
  vs_layout_tables_free(&t);
  return 1;
}

void dist_attn_builder_free(void) {
  pthread_mutex_lock(&gb_mu);
  builder_free_locked();
  pthread_mutex_unlock(&gb_mu);
}

int64_t dist_attn_builder_bytes(void) {
  pthread_mutex_lock(&gb_mu);
  int64_t b = gb.ready ? gb.bytes : 0;
  pthread_mutex_unlock(&gb_mu);
  return b;
}

int64_t dist_attn_builder_built_bytes(void) {
  pthread_mutex_lock(&gb_mu);
  int64_t b = gb.built_bytes;
  pthread_mutex_unlock(&gb_mu);
  return b;
}

#else  // no CUDA in this build: nothing is built on a GPU

int dist_gpu_build(struct dist_attn *a, int *out_of_memory, sr_error *e) {
  *out_of_memory = 0;
  return sr_input_error(e, NULL, "--backend", "cuda: this build has no CUDA (nvcc was not found at build time)");
}
int dist_gpu_build_supported(const struct dist_attn *a) { return 0; }
void dist_attn_builder_free(void) {}
int64_t dist_attn_builder_bytes(void) { return 0; }
int64_t dist_attn_builder_built_bytes(void) { return 0; }

#endif
