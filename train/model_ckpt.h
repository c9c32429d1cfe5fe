// model_ckpt.h — safetensors files for the trainer: model weights under Hugging Face tensor names (so
// real checkpoints load and ours load elsewhere) and any float32 tensor set (optimizer moments).
//
// Format (huggingface/safetensors): 8-byte little-endian header length N, N bytes of JSON
// {"__metadata__": {str: str}, NAME: {"dtype", "shape", "data_offsets": [begin, end]}}, then the raw
// little-endian tensor bytes. Files are written atomically (temporary file + rename).
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

// Write float32 tensors and string metadata (meta: n_meta key, value pairs, flattened) atomically.
int ckpt_write_f32(const char *path, const ckpt_tensor *t, int n, const char *const *meta, int n_meta, sr_error *e);

// An opened safetensors file (whole file in memory).
typedef struct ckpt_file ckpt_file;
// Open and validate a safetensors file (header JSON, offsets inside the file).
int ckpt_open(const char *path, ckpt_file **out, sr_error *e);
// Release an opened file.
void ckpt_close(ckpt_file *f);
// True when the file holds a tensor of that name.
int ckpt_has(const ckpt_file *f, const char *name);
// Read a tensor as float32 (F32, F64, BF16 and F16 stored types are converted); its element count must be numel.
int ckpt_read_f32(const ckpt_file *f, const char *name, int64_t numel, float *out, sr_error *e);
// Metadata value for a key, or NULL.
const char *ckpt_meta(const ckpt_file *f, const char *key);

// Save a float32 model's weights under Hugging Face names, with metadata pairs (may be NULL, 0).
int model_save_weights(const model_cpu *m, const char *path, const char *const *meta, int n_meta, sr_error *e);
// Load every tensor of a float32 model by name (lm_head.weight may be absent when embeddings are tied).
int model_load_weights(model_cpu *m, const char *path, sr_error *e);

#endif
