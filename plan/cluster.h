// cluster.h — on what it is trained: nodes, GPUs, links. Units: GB/s = 1e9 B/s per direction,
// latency in microseconds, memory in GiB, peak in TFLOP/s (dense bf16), efficiencies as fractions.
#ifndef SR_CLUSTER_H
#define SR_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "plan/error.h"

typedef struct {
  char name[64];            // "A100-SXM4-40GB"
  double peak_tflops;       // dense bf16 tensor-core peak
  double fp64_tflops;       // FP64 vector (CUDA-core) peak: the online pattern estimator scores in float64
  double fp8_tflops;        // dense FP8 tensor-core peak (token top-k's indexer); the bf16 peak where there is none
  double hbm_gbps;          // HBM bandwidth
  double mem_gib;           // device memory
  // Achieved fraction of peak, per kind of work (calibration overwrites these).
  double eff_gemm;
  // The GEMMs' rate held over seconds of back-to-back work, under the board's power limit (what a training step's
  // GEMMs see; calibrate times it, exec/calib_kernels.c); 0 = not measured: sim/cost.c, cost_gemm_step, then takes
  // COST_GEMM_SUSTAINED of eff_gemm.
  double eff_gemm_sustained;
  // A training step's attention calls against the calibration's short ones: the rate a dense causal layer-shaped
  // call (forward + backward) holds over seconds back to back over its rate in a few short calls, a ratio <= 1 that
  // scales every attention efficiency in a training step (calibrate times it, exec/calib_layer.c; sim/cost.c,
  // cost_attn_held, says why); not of peak. 0 = not measured: cost_attn_held takes COST_ATTN_SUSTAINED (sim/cost.h).
  double eff_attn_sustained;
  double eff_attn_fwd_full, eff_attn_fwd_partial, eff_attn_fwd_bar;
  double eff_attn_bwd_full, eff_attn_bwd_partial, eff_attn_bwd_bar;
  double eff_mem;           // achieved fraction of HBM bandwidth for memory-bound ops
  double comm_slowdown;     // compute runs this much slower while a comm kernel shares the SMs (1 = none)
  // Ring step costs beyond the kernel's work (sim/cost.c, cost_ring_step; 0 = not modelled): per step of a
  // rank with work, a fixed time (launch, waiting on the received shard's event) and a time per (query
  // tile, head) cell the step's kernel runs (its prologue and epilogue, the forward's LSE merge into the
  // running fp32 output). [0] forward, [1] backward. Fitted by sparsering-exec calibrate (exec/calib_ring.c).
  double ring_step_us[2];
  double ring_cell_us[2];
  double adaspa_search_ratio;  // AdaSpa's LSE-cached block search as a share of one dense attention forward over
                               // the same keys (0: AdaSpa's reported 0.5; scripts/gpu/adaspa_run.sh measures it)
  // The backward's bar kernel (kernels/sparse_attn_bwd.cu, sa_bwd_dkdv_kernel with BAR) runs one CTA per chunk of up
  // to 64 bar keys of one head (kernels/bar_chunks.c), which walks the union of its keys' query tiles 64 rows at a
  // time: the microseconds one CTA spends on one such 64-row chunk (sim/cost.h, cost_bar_walk; 0 = not modelled).
  // Fitted by sparsering-exec calibrate from its bar backward points (exec/calib_walk.c).
  double bar_walk_us;
  // Which walk the backward's bar kernel of the binary runs (sim/cost.h, cost_bar_walk): the most parts it cuts a
  // chunk's walk into, 1 for the whole walk a CTA (kernels before 34159d3, sa_bwd_variant 0-2) and 16 for the split
  // walk (kernels/sparse_attn_bwd_bars.cu, variant 3, BB_MAX_PARTS); 0 = not said: a call lasts at least one whole
  // walk (the floor as it was before, the same bits). Not written by sparsering-exec calibrate: the split walk's rule
  // is not borne out by the kept runs of those kernels (docs/sim.md, "The bars' backward in waves"); repredict's
  // manifests name the whole walk of the runs that had it (--bars-walk whole).
  int bar_walk_parts;
  // 1 where the binary's bars run on the warp-specialized backward kernel (kernels/sparse_attn_bwd_ws.cu,
  // sa_bwd_ws_bars_kernel, backward variants 4 and 5, 5 the default): one CTA an SM (its ~200 KiB of shared
  // memory), the bars' dQ in the same kernel, so no separate dQ pass is charged (sim/cost.h, cost_bar_slots and
  // cost_bar_waves). 0: the mma.sync bar kernels (variants 0-3). Written by calibrate; `--bars-walk ws` in repredict.
  int bar_walk_ws;
  // 1 where that kernel runs the bars in pairs of compute chunks (kernels/sparse_attn_bwd_ws.cu, sa_bwd_ws_pair_kernel,
  // backward variant 5): a head's chunks pair up from its first, one CTA a pair walking the ascending union of both
  // chunks' query tiles once, a lone last chunk a CTA of its own (sim/cost.c, cost_bar_waves). Only with bar_walk_ws 1;
  // 0 (absent): one CTA a chunk (variant 4), the same bits as before. Written by calibrate for a binary whose default
  // backward is variant 5; `--bars-walk pair` in repredict.
  int bar_walk_pairs;
  // What each (query tile, head) walk of an attention kernel call costs beyond its tiles' work (the Q tile's load,
  // the epilogue that normalises and writes the row block): microseconds of the whole GPU's time per walk, so a
  // call of c walks pays c x attn_walk_us. [0] forward, [1] backward; 0 = not modelled (sim/cost.h,
  // cost_attn_walks). Fitted by sparsering-exec calibrate over calls shaped like a layer's (exec/calib_layer.c).
  double attn_walk_us[2];
  // The L2 cache in MiB (the datasheets' "MB": A100 40, H100 and H200 50; sparsering-exec calibrate reads the
  // device's); 0 = not given. With attn_l2 it decides which kernel calls' FULL tiles run slower (sim/cost.h,
  // cost_attn_l2).
  double l2_mb;
  // How much longer a FULL tile takes in a kernel call whose keys' K and V (one KV head, bf16) outgrow the L2
  // cache, as a fraction of its time at the FULL efficiency: [0] forward, [1] backward; 0 = not modelled. Fitted by
  // sparsering-exec calibrate over calls shaped like a layer's (exec/calib_layer.c) where some outgrow the L2.
  double attn_l2[2];
} gpu_desc;

typedef struct {
  double gbps;              // per direction per GPU (intra) / per NIC (inter) / per GPU (host link)
  double latency_us;
} link_desc;

typedef struct {
  char name[128];
  char path[512];
  char description[256];    // free text from the file ("" when none)
  int nodes;
  int gpus_per_node;
  gpu_desc gpu;
  link_desc intra;          // NVLink/NVSwitch, per GPU per direction
  int nics_per_node;
  link_desc nic;            // one NIC's bandwidth per direction and the network latency
  link_desc host;           // PCIe host<->device per GPU
  double host_mem_gib;      // per node
  // Where the efficiencies come from (the file's "calibration": {"measured": bool, "source": text}):
  // measured on this GPU by sparsering-exec calibrate, or derived (guesses); reports say which.
  int calibrated;
  char calibration[384];
} cluster_desc;

// Load a shipped cluster by name (models/clusters/<name>.json) or a path; validates every field,
// reports unknown fields, rejects impossible values (file, field, reason).
int cluster_load(const char *name_or_path, cluster_desc *c, sr_error *e);
// Fill a cluster from JSON text (file names the source in messages).
int cluster_from_json_text(const char *text, const char *file, cluster_desc *c, sr_error *e);
// Serialise a cluster in the file format above (every field explicit, stable order), e.g. for a
// calibration run writing measured efficiencies. Returns a malloc'd string, or NULL when memory runs out.
char *cluster_to_json(const cluster_desc *c);
// Total GPUs (= ranks).
static inline int cluster_world(const cluster_desc *c) { return c->nodes * c->gpus_per_node; }
// Node of a rank (ranks are numbered node-major).
static inline int cluster_node_of(const cluster_desc *c, int rank) { return rank / c->gpus_per_node; }
// Inter-node bandwidth available to one GPU: nics_per_node * nic.gbps / gpus_per_node.
double cluster_inter_gbps_per_gpu(const cluster_desc *c);
// The line reports print about the efficiencies: "calibrated: SOURCE" or "uncalibrated: efficiencies
// from SOURCE" (the file's path when it records no source). Returns buf.
const char *cluster_calibration_note(const cluster_desc *c, char *buf, size_t size);

#endif
