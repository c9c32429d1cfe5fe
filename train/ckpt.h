// ckpt.h — training checkpoints that can be neither lost nor silently corrupted.
//
// A checkpoint is one directory, ROOT/step-N (N the optimizer steps taken, at least 9 digits):
//   model.safetensors                      the weights under Hugging Face names, float32 (rank 0)
//   optimizer-RRRRR-of-WWWWW.safetensors   rank R's ZeRO-1 slice [lo, hi) of the flat parameter vector:
//                                          tensors exp_avg and exp_avg_sq (AdamW's moments), float32
//   MANIFEST.json                          written last: format, version, step, adam_step, seed, model,
//                                          num_params, world, and every file's name, size and CRC32C
//                                          (and each slice's lo, hi)
// A save writes every file into ROOT/.step-N.partial (each rank its slice, rank 0 the weights), fsyncs
// them, checks each file's size and checksum as written against what its rank reported, writes and fsyncs
// the manifest and commits the directory by one rename to ROOT/step-N. Only after that rename are the
// other checkpoints of ROOT removed, so at every instant of a save ROOT holds a complete checkpoint, and
// a crash leaves at most a .partial directory the next save clears.
//
// Reading trusts nothing: the manifest's every field is checked for type and range (no key twice), each
// file's size and CRC32C must match the manifest, its header must parse strictly with exactly the tensors,
// dtypes (F32) and shapes expected, its metadata must repeat the manifest's step, optimizer step, seed and
// model, and every value must be finite (second moments also >= 0). Every failure is an input error naming
// the file and what is wrong.
#ifndef SR_CKPT_H
#define SR_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "plan/error.h"
#include "train/model_cpu.h"
#include "train/model_ckpt.h"

#define CKPT_MANIFEST "MANIFEST.json"
#define CKPT_FORMAT "sparsering-checkpoint"
#define CKPT_VERSION 1

// One file of a checkpoint.
typedef struct {
  char name[64];
  uint64_t bytes;   // file size
  uint32_t crc32c;  // of the whole file (plan/checksum.h)
  int64_t lo, hi;   // an optimizer slice: its parameters [lo, hi); the weights: 0, 0
} ckpt_entry;

// What MANIFEST.json says.
typedef struct {
  int64_t step, adam_step;  // optimizer steps taken; AdamW's own count (bias correction)
  uint64_t seed;            // the run's seed (samples and initial weights)
  int64_t num_params;
  char model[128];          // the model's name
  int world;                // ranks that wrote optimizer slices
  ckpt_entry *files;        // world + 1: model.safetensors, then the slices by rank
} ckpt_manifest;

// ---- writing (train/train_ckpt.c runs the collective save) -------------------------------------

// The slice [lo, hi) of rank `rank` of `world` over num_params parameters (ZeRO-1's split).
void ckpt_slice_range(int64_t num_params, int world, int rank, int64_t *lo, int64_t *hi);
// An empty manifest of world ranks with the files' names and slices filled in; free with ckpt_manifest_free.
int ckpt_manifest_init(ckpt_manifest *mf, int64_t step, int64_t adam_step, uint64_t seed, int64_t num_params,
                       const char *model, int world, sr_error *e);
// Release a manifest's file list.
void ckpt_manifest_free(ckpt_manifest *mf);
// Where the save of step `step` stages its files: ROOT/.step-N.partial.
void ckpt_stage_path(const char *root, int64_t step, char *stage, size_t size);
// Rank 0: create ROOT (when missing) and an empty ROOT/.step-N.partial (removing what a crashed save left).
int ckpt_stage(const char *root, int64_t step, char *stage, size_t size, sr_error *e);
// Write rank's moment slices m and v (hi - lo floats each) into the staging directory; its size and
// CRC32C go to mf->files[1 + rank].
int ckpt_write_slice(const char *stage, ckpt_manifest *mf, int rank, const float *m, const float *v, sr_error *e);
// Rank 0: write the weights into the staging directory; size and CRC32C to mf->files[0].
int ckpt_write_model(const char *stage, ckpt_manifest *mf, const model_cpu *model, sr_error *e);
// Rank 0, every file written: read each back against its size and checksum in mf (so a rank's file that
// did not reach this directory is caught here), write the manifest, commit the directory as ROOT/step-N
// by one rename (through plan/util.h's commit gate), then remove every other checkpoint of ROOT.
int ckpt_commit(const char *root, const char *stage, const ckpt_manifest *mf, sr_error *e);

// ---- reading ----------------------------------------------------------------------------------

// The checkpoint path names: itself when it holds MANIFEST.json, else its newest step-N directory.
int ckpt_locate(const char *path, char *dir, size_t size, sr_error *e);
// Read and validate DIR/MANIFEST.json (fields, ranges, file names, the slices tiling the parameters).
int ckpt_manifest_read(const char *dir, ckpt_manifest *mf, sr_error *e);
// The same from the manifest's text (file names it in messages).
int ckpt_manifest_parse(const char *text, const char *file, ckpt_manifest *mf, sr_error *e);
// Load the weights into model: the file verified against the manifest, every tensor exactly as the model
// has it, every value finite.
int ckpt_load_model(const char *dir, const ckpt_manifest *mf, model_cpu *model, sr_error *e);
// Load the moments of parameters [lo, hi) into m and v from the slices that hold them (any world size
// wrote them), each slice file verified against the manifest; m finite, v finite and >= 0.
int ckpt_load_moments(const char *dir, const ckpt_manifest *mf, int64_t lo, int64_t hi, float *m, float *v,
                      sr_error *e);

// ---- fault injection (tests) -------------------------------------------------------------------

// The stages of a save, in order, where SR_CKPT_FAULT=STAGE:STEP[:RANK] kills the process with SIGKILL
// (as kill -9 would) during the save of step STEP, on rank RANK (any rank when absent):
//   staged     the staging directory exists, nothing is written in it
//   slice      this rank's optimizer slice is written
//   half       half of model.safetensors' tensor data is written
//   model      model.safetensors is written
//   manifest   MANIFEST.json is written, the directory not yet renamed
//   committed  the directory is renamed into place, the older checkpoints not yet removed
//   pruned     the older checkpoints are removed
void ckpt_fault_point(const char *stage, int64_t step, int rank);

#endif
