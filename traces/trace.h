// trace.h — attention traces: the safetensors container (read, validate, write) and the trace schema
// on top of it (per-step sparse attention patterns with their provenance), plus the "trace:PATH"
// pattern source the simulator and the executor use.
//
// Container (https://github.com/huggingface/safetensors, format section): 8-byte little-endian header
// length N, N bytes of UTF-8 JSON {"__metadata__": {string: string}, NAME: {"dtype", "shape",
// "data_offsets": [begin, end]}}, then the raw little-endian tensor bytes; offsets count from the
// byte after the header, and the tensors tile the data section exactly (no gap, no overlap).
// The reader trusts nothing: every size is checked against the bytes actually present before use.
#ifndef SR_TRACE_H
#define SR_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "plan/error.h"

// ---------------------------------------------------------------------------------------------
// safetensors container

typedef enum {
  ST_BOOL, ST_U8, ST_I8, ST_U16, ST_I16, ST_F16, ST_BF16, ST_U32, ST_I32, ST_F32,
  ST_U64, ST_I64, ST_F64, ST_F8_E4M3, ST_F8_E5M2, ST_N_DTYPES
} st_dtype;

#define ST_MAX_DIMS 8                       // more dimensions than any trace tensor needs
#define ST_MAX_HEADER ((uint64_t)100000000)  // the reference implementation's header cap (100 MB)

typedef struct {
  char *name;                 // tensor name (owned)
  st_dtype dtype;
  int ndim;
  int64_t shape[ST_MAX_DIMS];
  int64_t numel;              // product of shape (1 for a scalar)
  uint64_t begin, end;        // data_offsets, relative to the data section
  const uint8_t *data;        // the tensor's bytes (little-endian, possibly unaligned)
} st_tensor;

typedef struct {
  char name[512];             // file name used in messages
  uint8_t *owned;             // whole-file buffer when read from disk (freed by st_close)
  int n_meta;
  char **meta_key, **meta_val;  // __metadata__ entries, sorted by key
  int n_tensors;
  st_tensor *tensors;         // sorted by name
} st_file;

// Name of a dtype as written in the header ("I32").
const char *st_dtype_name(st_dtype d);
// Bytes per element of a dtype.
int st_dtype_size(st_dtype d);

// Parse and validate a safetensors image held in memory (not copied: bytes must outlive f).
int st_parse(const void *bytes, size_t n, const char *name, st_file *f, sr_error *e);
// Read and validate a safetensors file; the header length is bounded by the file size before any allocation.
int st_read(const char *path, st_file *f, sr_error *e);
// Release everything st_parse / st_read allocated.
void st_close(st_file *f);
// Tensor by name, or NULL.
const st_tensor *st_find(const st_file *f, const char *name);
// Metadata value by key, or NULL.
const char *st_meta(const st_file *f, const char *key);
// Tensor by name with the expected dtype and shape (shape entries < 0 match any size); input error naming it otherwise.
int st_expect(const st_file *f, const char *name, st_dtype dtype, int ndim, const int64_t *shape,
              const st_tensor **out, sr_error *e);

// Element i of a tensor, decoded from little-endian (the caller keeps i < numel).
int32_t st_get_i32(const st_tensor *t, int64_t i);
int64_t st_get_i64(const st_tensor *t, int64_t i);
float st_get_f32(const st_tensor *t, int64_t i);
static inline uint8_t st_get_u8(const st_tensor *t, int64_t i) { return t->data[i]; }

// A file being built: metadata and tensors are copied in, then serialised in insertion order.
typedef struct {
  int n_meta, cap_meta;
  char **meta_key, **meta_val;
  int n_tensors, cap_tensors;
  st_tensor *tensors;         // data owned (malloc'd little-endian copies)
  uint64_t data_bytes;        // running size of the data section
} st_writer;

// Start an empty writer.
void st_writer_init(st_writer *w);
// Add (or replace) a __metadata__ entry.
int st_writer_meta(st_writer *w, const char *key, const char *value, sr_error *e);
// Add a tensor; data holds numel elements in host order (copied and stored little-endian). Names must be unique.
int st_writer_add(st_writer *w, const char *name, st_dtype dtype, int ndim, const int64_t *shape, const void *data,
                  sr_error *e);
// Serialise to a malloc'd image (header padded with spaces to a multiple of 8 so data is aligned).
int st_writer_to_bytes(const st_writer *w, uint8_t **out, size_t *n, sr_error *e);
// Serialise and write atomically (temporary file, then rename).
int st_writer_write(const st_writer *w, const char *path, sr_error *e);
// Release a writer.
void st_writer_free(st_writer *w);

#endif
