// train_attn.h — the trainer's attention plans: one distributed attention (exec/dist_attn.h) per layer,
// and the model_attention / model_cuda_attention callbacks that route a layer's attention through it.
//
// A plan holds its tile indices, masks and positions; on the GPU its scratch (KV shards, accumulators, the
// running O: ~25 KB a local token for Qwen2.5-3B) is one workspace shared by every plan of the process
// (exec/dist_workspace.h), so each further plan costs only its indices. Layers with one pattern (dense) share
// one plan, the others are kept as memory allows (`cap`), and a layer whose plan was dropped rebuilds it
// when it comes. The kept plans are built before the first step in threads; with
// `prefetch` > 0, threads also build the next layers' plans ahead of use (the order of use is known: layers
// up in the forward, down in the backward), dropping the kept plan whose next use is farthest.
// With the host cache (train_attn_host_cache, `--attn-host-cache`), a dropped plan only releases its device
// copies (dist_attn_device_release) and waits in host memory, up to a cap, to be restored by an upload when its
// layer comes (or ahead of use) instead of being rebuilt; over the cap, the held plan used farthest ahead goes.
#ifndef SR_TRAIN_ATTN_H
#define SR_TRAIN_ATTN_H

#include <pthread.h>
#include <stdint.h>

#include "exec/comm.h"
#include "exec/dist_attn.h"
#include "plan/gating.h"
#include "train/train_online.h"
#include "train/train_recall.h"
#include "plan/error.h"
#include "plan/pattern.h"
#include "plan/plan.h"

typedef struct {
  const plan *p;
  pattern *pat;        // the plan's pattern; the CPU backend's online estimate writes into it
  comm *c;
  dist_backend be;
  int layers;
  int shared;          // every layer runs the same pattern: one plan serves them all
  int cap, n;          // plans kept at most, slots in use (the slot arrays hold one per layer)
  int fit;             // GPU without a fixed cap: after the first build keep as many as free memory holds
  double plan_gib;     // device memory the first build took for itself (beyond the shared workspace)
  int64_t plan_bytes_max;  // device bytes the largest plan built keeps for itself (dist_attn_device_bytes)
  int64_t shared_bytes;    // device bytes of the shared attention workspace (largest seen)
  dist_attn **slot;
  int *slot_layer;     // -1: empty
  char *slot_building; // a prefetch thread is building it
  int64_t *slot_used, clock;
  int64_t built;       // plans built so far (before the first step, on demand and ahead)
  int64_t built_gpu;   // of which with their tile index built on the GPU (dist_attn_index_on_gpu)
  dist_index_build index_build;  // where the tile indices are built (set before train_attn_prebuild; default AUTO)
  int moba_gate;                 // moba: EXEC_GATE_HOST, _GPU or _AUTO (dist_attn_moba_gate_gpu; set like index_build)
  // plan waits: uses of a plan that was not ready when its layer came (built then, restored, or still being built
  // ahead), and the seconds the layers spent getting their plans (every use, waits and evictions included)
  int64_t waits;
  double get_s;
  // host cache: plans dropped from the device held in host memory (device copies released)
  int host_cache;
  int64_t host_cap, host_bytes, mem_available;  // bytes: the cap, held now, MemAvailable when the cap was set
  dist_attn **held;    // [layers] the held plan of each layer (NULL: none)
  int64_t *held_bytes; // [layers] its dist_attn_host_bytes
  int64_t restored;    // plans restored from host memory instead of built
  int64_t host_dropped;  // held plans freed to stay under the cap
  double restore_s;    // the restores' time (summed over threads)
  int64_t on_demand;   // of which built when their layer came (after the first step began)
  double on_demand_s;  // their build seconds (wall time of the thread that needed them)
  double build_s;      // their build time (summed over threads)
  // building ahead
  int prefetch, threads, device, stop;
  int last_layer, pos;  // the current use: its layer and its place in the order of use (0 .. 2 layers - 1)
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t *tid;
  int n_tid;
  int *queue, q_head, q_len;  // slots to build, in order
  // vs-online on the CPU backend: each forward re-estimates the layer's pattern from its q and k (one
  // rank); on CUDA the executor's dist_attn estimates inside every forward itself (online_vs_cuda.c).
  // Gated patterns (moba, token-topk) likewise: the gate selects from q and k (plan/gating.h) on the CPU,
  // inside dist_attn on CUDA (moba; online_gate_cuda.c). adaspa-online's mask is searched inside dist_attn on
  // either backend (online: the pattern is chosen at run time; online_cpu: by the trainer on the CPU).
  int online, online_cpu;
  int gated;
  online_vs ov;
  gating_opts gate;
  const int64_t *positions;
  int64_t estimates;
  double estimate_s;
  attn_recall *recall;  // `--eval-recall`: measured after each forward while armed (NULL: off)
  // adaspa-online (either backend): each plan searches its mask inside its forwards (exec/dist_attn.h), at the
  // step (and sample of it) and with the flags set here (train_attn_search_at)
  int64_t search_step, search_sample;
  int search_flags;
} train_attn;

// Prepare the plans of plan p (pattern pat) for this rank: cache K plans (0: every layer, or as many as fit
// on the GPU), build `prefetch` layers ahead with `threads` threads (0: no building ahead), positions: this
// rank's global token positions (the CPU online estimate reads them). Nothing is built yet.
int train_attn_init(train_attn *b, const plan *p, pattern *pat, comm *c, int cuda, int cache, int prefetch,
                    int threads, const int64_t *positions, sr_error *e);
// Hold the plans that do not fit on the device in host memory instead of freeing them, up to cap_gib GiB
// (< 0: half of /proc/meminfo's MemAvailable, shared by the ranks of this node). A no-op for a shared plan and for
// vs-online (plans follow each estimate). Before train_attn_prebuild.
int train_attn_host_cache(train_attn *b, double cap_gib, sr_error *e);
// Build the next `depth` layers' plans ahead of use from now on, when not every layer's plan is kept and nothing
// is built ahead yet (after train_attn_prebuild: the CUDA trainer's default, whose builds take milliseconds).
int train_attn_prefetch_auto(train_attn *b, int depth, sr_error *e);
// Plans built when their layer came so far, and their build seconds (under the lock: build threads may run).
void train_attn_on_demand(train_attn *b, int64_t *built, double *seconds);
// Plans held in host memory now.
int train_attn_held(const train_attn *b);
// Plan waits so far and the seconds spent getting plans (under the lock: build threads may run).
void train_attn_waits(train_attn *b, int64_t *waits, double *seconds);
// Device bytes the plans kept now hold for themselves (dist_attn_device_bytes; 0 on the CPU backend).
int64_t train_attn_kept_bytes(train_attn *b);
// Build layer 0's plan before train_attn_prebuild: on the GPU it measures what a plan takes for itself and sizes
// the cache from the memory left (unless given a cap).
int train_attn_prebuild_first(train_attn *b, sr_error *e);
// Device bytes the plans not built yet would take to keep every layer's, by the first plan's measure (0: one
// shared plan, or no measure).
double train_attn_plans_need(const train_attn *b);
// Plans the cache keeps (pure): `have` kept already (at least 1), and as many more as the device's free GiB hold
// after a 3 GiB reserve and builder_gib (what the GPU index builder takes again at each build, having given its
// state back) at 1.25 x plan_gib each (plan_gib <= 0: every layer). At most `layers`, at least `have`.
int train_attn_fit_cap(int layers, int have, double free_gib, double plan_gib, double builder_gib);
// Size the cache again from the device memory free now (something else took some since the first plan), by the
// first plan's measure; a no-op unless the cache is sized by memory (CUDA, no fixed cap).
int train_attn_refit(train_attn *b, sr_error *e);
// Build the plans that will be kept (layer 0 first: it sizes the cache on the GPU), before the first step; when
// every layer's plan is kept, the GPU index builder's device state is freed after (no build will need it).
int train_attn_prebuild(train_attn *b, sr_error *e);
// The plan of `layer`, built now if it is not kept.
int train_attn_get(train_attn *b, int layer, dist_attn **out, sr_error *e);
// adaspa-online: the step the coming forwards belong to and their DIST_SEARCH_* flags (dist_attn_search_step).
void train_attn_search_at(train_attn *b, int64_t step, int flags);
// The same for sample `sample` of the step (dist_attn_search_sample): each sample of a batch is new inputs.
void train_attn_search_sample_at(train_attn *b, int64_t step, int64_t sample, int flags);
// adaspa-online: the search counters of the plans kept now, summed (recall_search: mean over them; recall_reused:
// over the measured forwards); SR_OK with zeros for other patterns.
int train_attn_search_stats(const train_attn *b, dist_search_stats *out, sr_error *e);
// CUDA vs-online, adaspa-online: write the patterns the kept plans last ran into b->pat (density, trace).
int train_attn_read_patterns(train_attn *b, sr_error *e);
// Stop the threads and free every plan.
void train_attn_free(train_attn *b);

// The model's attention callbacks (ctx: a train_attn): host float32 (model_attention) ...
int train_attn_fwd(void *ctx, int layer, int64_t T, const float *q, const float *k, const float *v, float *o, float *lse,
                   sr_error *e);
int train_attn_bwd(void *ctx, int layer, int64_t T, const float *q, const float *k, const float *v, const float *o,
                   const float *lse, const float *dout, float *dq, float *dk, float *dv, sr_error *e);
// ... the CPU online estimate hook (model_attention.estimate; a gated pattern's selection too) ...
int train_attn_estimate(void *ctx, int layer, int64_t T, const float *q, const float *k, sr_error *e);
// ... and device bf16 (model_cuda_attention).
int train_attn_fwd_dev(void *ctx, int layer, int64_t T, const void *q, const void *k, const void *v, void *o, float *lse,
                       sr_error *e);
int train_attn_bwd_dev(void *ctx, int layer, int64_t T, const void *q, const void *k, const void *v, const void *o,
                       const float *lse, const void *dout, float *dq, float *dk, float *dv, sr_error *e);

#endif
