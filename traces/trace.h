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
#include "plan/model.h"
#include "plan/pattern.h"
#include "plan/synth.h"

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

// ---------------------------------------------------------------------------------------------
// trace schema (docs/traces.md)
//
// __metadata__ (all strings): format "sparsering-trace", version "1", model and its essential
// config fields (hidden_size, num_attention_heads, num_key_value_heads, head_dim, num_hidden_layers),
// seq_len, steps, layers, heads, pattern_kind (dense|window|vs|block|mixed), tile_size, block_size
// (block heads only), source (generator|executor|import), origin (pattern spec, run id or imported
// file) and seed. Tensors per step S and layer L, prefix "sS.lL.":
//   kind            U8  [heads]                 0 dense, 1 window, 2 vertical-slash, 3 block
//   window          I64 [heads, 2]              (sinks, window) of window heads; only when some head is one
//   vertical        I32 [heads, max_v]          sorted global key positions, padded with -1
//   vertical_count  I32 [heads]                 valid entries per head (0 for non-VS heads)
//   slash           I32 [heads, max_s]          sorted diagonal offsets q - k, padded with -1
//   slash_count     I32 [heads]                 (the four VS tensors only when some head is VS)
//   block_mask      U8  [heads, nb, ceil(nb/8)] bit c of row p at byte c/8, bit c%8 (LSB first);
//                                               nb = ceil(seq_len / block_size); only with block heads
//   scores          F32 [heads]                 optional per-head score when the source recorded one

#define TRACE_FORMAT "sparsering-trace"
#define TRACE_VERSION 1
enum { TRACE_KIND_DENSE = 0, TRACE_KIND_WINDOW = 1, TRACE_KIND_VS = 2, TRACE_KIND_BLOCK = 3 };

typedef struct {
  char model[128];                // model name
  int64_t hidden_size, num_heads, num_kv_heads, head_dim, num_layers;  // model essentials
  int64_t seq_len;                // tokens per sequence (positions are global, < seq_len)
  int steps, layers, heads;       // recorded training steps, layers, query heads
  char pattern_kind[16];          // dense | window | vs | block | mixed (derived when writing)
  int64_t tile_size;              // execution tile (TILE) the trace was planned for
  int64_t block_size;             // block size of block heads (0 when none)
  char source[16];                // generator | executor | import
  char origin[512];               // pattern spec, executor run id, or the imported file
  uint64_t seed;                  // generator seed (0 when not generated)
} trace_info;

// Fill the model fields of info from a model config.
void trace_info_set_model(trace_info *info, const model_config *m);

// A trace being written: steps are added one by one, then written atomically.
typedef struct {
  trace_info info;
  st_writer w;
  int kinds_seen;                 // bit k set when some head of kind k was written
} trace_writer;

// Start a trace (info->steps is counted by the writer; layers, heads and seq_len must be set).
int trace_writer_begin(trace_writer *t, const trace_info *info, sr_error *e);
// Append one step's pattern; scores ([layers * heads], may be NULL) are stored when given.
int trace_writer_add_step(trace_writer *t, const pattern *p, const float *scores, sr_error *e);
// Write the trace atomically to path.
int trace_writer_finish(trace_writer *t, const char *path, sr_error *e);
// Release a trace writer.
void trace_writer_free(trace_writer *t);

// A trace opened for reading: metadata validated, tensor names checked against the schema.
typedef struct {
  st_file f;
  trace_info info;
} trace_file;

// Open and validate a trace file (metadata and the presence of every step's tensors).
int trace_open(const char *path, trace_file *t, sr_error *e);
// The same from an in-memory image (bytes must outlive t); used by the fuzz target.
int trace_parse(const void *bytes, size_t n, const char *name, trace_file *t, sr_error *e);
// Read step `step` into a freshly allocated pattern, validating counts, order and ranges.
int trace_read_step(const trace_file *t, int step, pattern *out, sr_error *e);
// Per-head scores of a step into out[layers * heads]; *present = 0 (and out untouched) when not recorded.
int trace_read_scores(const trace_file *t, int step, float *out, int *present, sr_error *e);
// Release a trace.
void trace_close(trace_file *t);

// ---------------------------------------------------------------------------------------------
// statistics

typedef struct {
  int step, layer, head;
  int kind;               // TRACE_KIND_*
  double kept_pairs;      // exact kept causal (q, k) pairs
  double density;         // kept_pairs / (n (n + 1) / 2), the dense causal count
  int32_t n_vertical;     // VS heads: verticals kept (budget use)
  int32_t n_slash;        // VS heads: slashes kept
  int64_t n_blocks;       // block heads: causal blocks kept (c <= p)
  double jaccard_prev;    // |A & B| / |A | B| against the same head one step earlier (NAN at step 0
                          // or when the head changed kind in a way without an exact count)
} trace_head_stats;

// Exact kept causal pairs of a head over n tokens.
double trace_head_kept_pairs(const head_pattern *h, int64_t n);
// Exact kept causal pairs of the union of two heads, or -1 when their kinds admit no exact count.
double trace_head_union_pairs(const head_pattern *a, const head_pattern *b, int64_t n);
// Statistics of every (step, layer, head), in that order (malloc'd array of steps * layers * heads).
int trace_stats(const trace_file *t, trace_head_stats **out, int64_t *n_out, sr_error *e);

// Where a pattern's kept pairs sit, over its VS and window heads (dense and block heads have no columns or
// diagonals to place). A column v holds n - v causal pairs and a diagonal d holds n - d: that is its mass.
#define TRACE_LOCAL_OFFSET 128  // "local" diagonals: offsets below one tile
typedef struct {
  int heads;                // VS and window heads counted
  double vertical_pairs;    // mass of the columns (window heads: their sinks)
  double vertical_first[2]; // share of vertical_pairs on keys in the first 1% and the first 10% of the sequence
  double slash_pairs;       // mass of the diagonals (window heads: offsets [0, window)); pairs on both counted in both
  double slash_local;       // share of slash_pairs at offsets below TRACE_LOCAL_OFFSET
  double slash_q[3];        // offsets at or below which 50%, 90% and 99% of slash_pairs lie (tokens)
} trace_position_stats;

// Position statistics of one layer of p (layer -1: every layer).
int trace_positions(const pattern *p, int layer, trace_position_stats *out, sr_error *e);
// The same pooled over n_steps patterns of one length (a trace's steps: every step's heads as more heads).
int trace_positions_steps(const pattern *steps, int n_steps, int layer, trace_position_stats *out, sr_error *e);

// ---------------------------------------------------------------------------------------------
// MInference / MTraining head configs (import.c)

typedef struct {
  int layers, heads;
  int *kind;              // [layers * heads] TRACE_KIND_VS ("vertical_and_slash") or TRACE_KIND_WINDOW ("stream_llm")
  int64_t *a, *b;         // VS: vertical and slash budgets; window: sinks and window
  float *score;           // the config's per-head score
} minference_config;

// Load a config: a JSON list per layer of {"HEAD": [TYPE, A, B, SCORE]} (or a list in head order);
// when m != NULL its layers and heads must match.
int minference_load(const char *path, const model_config *m, minference_config *c, sr_error *e);
// The same from the file's text (path names it in messages).
int minference_parse(const char *text, const char *path, const model_config *m, minference_config *c, sr_error *e);
// Release a config.
void minference_free(minference_config *c);
// The pattern of step `step`: budgets exact (capped at n_tokens), indices synthesised from (seed, step).
int minference_pattern(const minference_config *c, int64_t n_tokens, uint64_t seed, int step, pattern *out,
                       sr_error *e);

// ---------------------------------------------------------------------------------------------
// generators fitted to a trace (fit.c; the generator is the planner's, plan/synth.h)

// Fit every (layer, head) of a trace over all its steps (a head's steps of another kind than step 0's are
// skipped): budgets and leading runs per token, quantiles of the other runs' starts, block row shares
// and column popularity.
int trace_fit(const trace_file *t, synth_fit *out, sr_error *e);
// The "vs-fit:PATH" pattern: the trace at PATH fitted, then drawn for model m at n_tokens (any length and
// shape), seeded and drifting by (seed, step) like the other generators.
int trace_fit_pattern(const char *path, const model_config *m, int64_t n_tokens, uint64_t seed, int step, pattern *out,
                      sr_error *e);

// ---------------------------------------------------------------------------------------------
// pattern sources

// Resolve a pattern source: "trace:PATH" reads recorded step `step` of that trace (checking its
// sequence length, layers and heads against the request), "vs-fit:PATH" draws the generator fitted to
// that trace (any length and model), anything else goes to the planner's pattern_from_spec.
int pattern_source_load(const char *spec, const model_config *m, int64_t n_tokens, uint64_t seed, int step,
                        pattern *out, sr_error *e);

#endif
