// transpose_gpu.h — the backward's transposed index built on the GPU from a tile index already in device
// memory (the vs-online forward's execution form): per source rank, the same arrays tiles_transpose
// (plan/tiles.h) and sa_bar_chunks_build give on the host, bit for bit, in device memory ready for sa_bwd,
// without copying the index to the host.
#ifndef SR_TRANSPOSE_GPU_H
#define SR_TRANSPOSE_GPU_H

#include <stdint.h>

#include "kernels/sparse_attn.h"
#include "plan/error.h"

#ifdef __cplusplus
extern "C" {
#endif

// Device work buffers and the results (one per source rank, or one for all: _new_for_download), kept between calls
// and grown as needed.
typedef struct sa_gpu_transposer sa_gpu_transposer;

// A transposer for indices with `sources` source ranks: a result kept for each source (with the bars' scratch, so it
// serves sa_bwd as it is), every buffer grown with a quarter to spare (calls come every pass).
int sa_gpu_transposer_new(int sources, sa_gpu_transposer **out, sr_error *e);
// A transposer whose results go to the host (sa_gpu_index_t_download) before the next call, as the GPU index builder
// (exec/dist_gpu_build.c) takes them: one result serves every source (valid until the next call, whichever source),
// without the bars' scratch, and every buffer allocated at its call's need, no more.
int sa_gpu_transposer_new_for_download(int sources, sa_gpu_transposer **out, sr_error *e);
// Release it and every result.
void sa_gpu_transposer_free(sa_gpu_transposer *t);
// Transpose source `src` (n_src_tokens keys) of d (device arrays, host scalars: heads, world, n_qtiles) for a
// model of heads / kv_heads, on `stream` (cudaStream_t); syncs it a few times for sizes. *out then points at
// the result (owned by t, valid until the next call for src, or any call for_download). Same entries as
// tiles_transpose followed by sa_gpu_index_t_upload (the bar scratch is left uninitialised there too; for_download has
// none).
int sa_gpu_transpose(sa_gpu_transposer *t, const tile_index *d, int src, int64_t n_src_tokens, int32_t heads,
                     int32_t kv_heads, void *stream, const sa_gpu_index_t **out, sr_error *e);
// Copy a device transposed index to host memory (tiles_transpose_free and sa_bar_chunks_free release it): for tests
// and releases; a compact copy's bar_q_idx is expanded on the host.
int sa_gpu_index_t_download(const sa_gpu_index_t *g, tile_index_t *tt, sa_bar_chunks *bc, sr_error *e);

#ifdef __cplusplus
}
#endif

#endif
