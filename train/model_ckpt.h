// model_ckpt.h — safetensors files for the trainer: model weights under Hugging Face tensor names (so
// real checkpoints load and ours load elsewhere) and any float32 tensor set (optimizer moments).
//
// Format (huggingface/safetensors): 8-byte little-endian header length N, N bytes of JSON
// {"__metadata__": {str: str}, NAME: {"dtype", "shape", "data_offsets": [begin, end]}}, then the raw
// little-endian tensor bytes. Reading goes through the strict reader of traces/ (st_parse: every offset
// bounded, the tensors tiling the data exactly, no key given twice); a tensor must have exactly the shape
// asked for and every value must be finite.
#ifndef SR_MODEL_CKPT_H
#define SR_MODEL_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "train/model_cpu.h"
#include "plan/error.h"

// One float32 tensor to write.
typedef struct {
  const char *name;
  const float *data;
  int ndim;
  int64_t shape[2];
} ckpt_tensor;

// Write float32 tensors and string metadata (meta: n_meta key, value pairs, flattened) atomically
// (a temporary file beside path, then rename).
int ckpt_write_f32(const char *path, const ckpt_tensor *t, int n, const char *const *meta, int n_meta, sr_error *e);
// Write them to path itself, fsynced, streaming the data (no copy of it in memory), with the file's size
// and CRC32C in *bytes and *crc: for a checkpoint directory, whose rename is the commit. halfway (may be
// NULL) is called with ctx when half the data bytes are written (a fault-injection point).
int ckpt_write_f32_file(const char *path, const ckpt_tensor *t, int n, const char *const *meta, int n_meta,
                        uint64_t *bytes, uint32_t *crc, void (*halfway)(void *ctx), void *ctx, sr_error *e);

// An opened safetensors file (whole file in memory).
typedef struct ckpt_file ckpt_file;
// Read, validate and open a safetensors file.
int ckpt_open(const char *path, ckpt_file **out, sr_error *e);
// Validate and open a file already read (name is used in messages); f takes over bytes (malloc'd).
int ckpt_open_bytes(void *bytes, size_t n, const char *name, ckpt_file **out, sr_error *e);
// Release an opened file.
void ckpt_close(ckpt_file *f);
// True when the file holds a tensor of that name.
int ckpt_has(const ckpt_file *f, const char *name);
// Number of tensors in the file.
int ckpt_count(const ckpt_file *f);
// Read a tensor as float32 (F32, F64, BF16 and F16 stored types are converted). Its shape must be exactly
// shape[0..ndim) (a reversed matrix is refused, not transposed) and every value finite; errors name the
// file, the tensor and the first bad element.
int ckpt_read_f32(const ckpt_file *f, const char *name, int ndim, const int64_t *shape, float *out, sr_error *e);
// Read it only when its dtype is F32 (what our own checkpoints hold), with the checks of ckpt_read_f32.
int ckpt_read_f32_exact(const ckpt_file *f, const char *name, int ndim, const int64_t *shape, float *out, sr_error *e);
// Metadata value for a key, or NULL.
const char *ckpt_meta(const ckpt_file *f, const char *key);
// The file's name as messages give it.
const char *ckpt_name(const ckpt_file *f);

// The tensors of a float32 model under their Hugging Face names, for ckpt_write_f32 (t: m->num_tensors).
void model_weight_tensors(const model_cpu *m, ckpt_tensor *t);
// Save a float32 model's weights under Hugging Face names, with metadata pairs (may be NULL, 0).
int model_save_weights(const model_cpu *m, const char *path, const char *const *meta, int n_meta, sr_error *e);
// Load every tensor of a float32 model by name from an open file (lm_head.weight may be absent when
// embeddings are tied); exact: F32 only and no tensor the model lacks (our own checkpoints).
int model_read_weights(model_cpu *m, const ckpt_file *f, int exact, sr_error *e);
// Load every tensor of a float32 model by name (lm_head.weight may be absent when embeddings are tied).
int model_load_weights(model_cpu *m, const char *path, sr_error *e);

#endif
