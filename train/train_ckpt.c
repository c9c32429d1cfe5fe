// train_ckpt.c — the trainer's checkpoints over its ranks: the collective save (every rank writes its ZeRO-1
// slice, rank 0 the weights and the commit) and the validated resume, on the directory format of ckpt.h.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plan/util.h"
#include "train/ckpt.h"
#include "train/model_ckpt.h"
#include "train/train.h"
#if SR_HAVE_CUDA
#include "train/model_cuda.h"
#endif

// Every rank's outcome of one phase, so all ranks go on or all stop with the same status and message: the
// first failing rank's error code and text (sent to every rank, so whichever rank's abort wins, the job
// prints what was wrong).
static int agree(trainer *t, int rc, const char *what, sr_error *e) {
  int W = t->comm.world, R = t->comm.rank;
  if (W == 1) return rc;
  double *codes = calloc((size_t)W, sizeof *codes);
  if (!codes) return sr_internal_error(e, 0, "trainer: out of memory");
  codes[R] = rc;
  sr_error ce = {0};
  int crc = t->comm.allreduce_f64(t->comm.ctx, codes, W, &ce);
  int first = -1;
  for (int r = 0; r < W && first < 0 && !crc; r++)
    if (codes[r] != 0) first = r;
  int code = first >= 0 ? (int)codes[first] : SR_OK;
  free(codes);
  if (crc) {
    *e = ce;
    return crc;
  }
  if (first < 0) return SR_OK;
  // the first failing rank's message, one byte a double, summed with every other rank's zeros (the host
  // collective: the float32 ones take device buffers on the CUDA backend)
  enum { LEN = sizeof e->msg };
  double *bytes = calloc(LEN, sizeof *bytes);
  char text[LEN] = "";
  if (bytes && R == first)
    for (int i = 0; i < LEN && e->msg[i]; i++) bytes[i] = (unsigned char)e->msg[i];
  if (bytes && t->comm.allreduce_f64(t->comm.ctx, bytes, LEN, &ce) == SR_OK)
    for (int i = 0; i < LEN - 1; i++) text[i] = (char)bytes[i];
  free(bytes);
  if (first == R) return rc;
  if (!text[0]) snprintf(text, sizeof text, "could not %s", what);
  if (code == SR_EINPUT) return sr_input_error(e, NULL, NULL, "rank %d: %s", first, text);
  return sr_internal_error(e, 0, "rank %d: %s", first, text);
}

int trainer_save(trainer *t, const char *root, sr_error *e) {
  int R = t->comm.rank, W = t->comm.world, rc = SR_OK;
#if SR_HAVE_CUDA
  if (t->dev) {  // the weights (rank 0 writes them) and this rank's moments, to the host
    if (R == 0) rc = model_cuda_download(t->dev, &t->model, e);
    if (!rc) rc = model_cuda_moments(t->dev, t->adam.m, t->adam.v, 1, e);
  }
#endif
  ckpt_manifest mf;
  if (!rc) rc = ckpt_manifest_init(&mf, t->step, t->adam.step, t->opt.seed, t->model.num_params, t->model.cfg.name, W, e);
  char stage[1100];
  if ((rc = agree(t, rc, "save a checkpoint", e))) goto done;
  if (R == 0) rc = ckpt_stage(root, t->step, stage, sizeof stage, e);
  if ((rc = agree(t, rc, "create the checkpoint's staging directory", e))) goto done;
  if (R != 0) ckpt_stage_path(root, t->step, stage, sizeof stage);
  ckpt_fault_point("staged", t->step, R);
  rc = ckpt_write_slice(stage, &mf, R, t->adam.m, t->adam.v, e);
  if (!rc) ckpt_fault_point("slice", t->step, R);
  if (!rc && R == 0) rc = ckpt_write_model(stage, &mf, &t->model, e);
  if (!rc && R == 0) ckpt_fault_point("model", t->step, R);
  if ((rc = agree(t, rc, "write its part of the checkpoint", e))) goto done;
  if (W > 1) {  // every file's size and checksum to rank 0, which checks them against what reached the disk
    double *v = calloc((size_t)(2 * (W + 1)), sizeof *v);
    if (!v) rc = sr_internal_error(e, 0, "trainer: out of memory");
    int mine = 1 + R;
    if (!rc) {
      v[2 * mine] = (double)mf.files[mine].bytes, v[2 * mine + 1] = mf.files[mine].crc32c;
      if (R == 0) v[0] = (double)mf.files[0].bytes, v[1] = mf.files[0].crc32c;
      rc = t->comm.allreduce_f64(t->comm.ctx, v, 2 * (W + 1), e);
    }
    for (int i = 0; !rc && i <= W; i++) mf.files[i].bytes = (uint64_t)v[2 * i], mf.files[i].crc32c = (uint32_t)v[2 * i + 1];
    free(v);
    if (rc) goto done;
  }
  if (R == 0) rc = ckpt_commit(root, stage, &mf, e);
  rc = agree(t, rc, "commit the checkpoint", e);
done:
  ckpt_manifest_free(&mf);
  return rc;
}

int trainer_init_weights(trainer *t, const char *path, sr_error *e) {
  struct stat st;
  int rc;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {  // a checkpoint: its weights, verified by its manifest
    char dir[1100];
    ckpt_manifest mf = {0};
    rc = ckpt_locate(path, dir, sizeof dir, e);
    if (!rc) rc = ckpt_manifest_read(dir, &mf, e);
    if (!rc) rc = ckpt_load_model(dir, &mf, &t->model, e);
    ckpt_manifest_free(&mf);
  } else {
    rc = model_load_weights(&t->model, path, e);
  }
#if SR_HAVE_CUDA
  if (rc == SR_OK && t->dev) rc = model_cuda_upload(t->dev, &t->model, e);
#endif
  return rc;
}

// The manifest against this run: the same model, seed and parameter count, a step the run has not passed.
static int check_run(const trainer *t, const char *dir, const ckpt_manifest *mf, sr_error *e) {
  char file[1200];
  snprintf(file, sizeof file, "%s/%s", dir, CKPT_MANIFEST);
  if (mf->num_params != t->model.num_params)
    return sr_input_error(e, file, "num_params", "%lld parameters (model %s); this run's model %s has %lld",
                          (long long)mf->num_params, mf->model, t->model.cfg.name, (long long)t->model.num_params);
  if (mf->seed != t->opt.seed)
    return sr_input_error(e, file, "seed", "%llu; this run has --seed %llu (the samples would differ from the run "
                          "it continues)", (unsigned long long)mf->seed, (unsigned long long)t->opt.seed);
  if (mf->step > t->opt.steps)
    return sr_input_error(e, file, "step", "%lld is past this run's last step (--steps %lld)", (long long)mf->step,
                          (long long)t->opt.steps);
  return SR_OK;
}

int trainer_resume(trainer *t, const char *path, sr_error *e) {
  char dir[1100];
  ckpt_manifest mf = {0};
  int64_t P = t->model.num_params, lo = t->adam.lo, hi = t->adam.hi, n = hi - lo;
  float *w = NULL, *m = NULL, *v = NULL;
  int rc = ckpt_locate(path, dir, sizeof dir, e);
  if (!rc) rc = ckpt_manifest_read(dir, &mf, e);
  if (!rc) rc = check_run(t, dir, &mf, e);
  // everything is read and checked into scratch first: a refused checkpoint leaves the trainer as it was
  if (!rc) {
    w = malloc((size_t)P * sizeof *w), m = malloc((size_t)sr_max64(n, 1) * sizeof *m);
    v = malloc((size_t)sr_max64(n, 1) * sizeof *v);
    if (!w || !m || !v) rc = sr_internal_error(e, 0, "trainer: out of memory resuming");
  }
  if (!rc) {
    void *own = t->model.params;
    t->model.params = w;
    rc = ckpt_load_model(dir, &mf, &t->model, e);
    t->model.params = own;
  }
  if (!rc) rc = ckpt_load_moments(dir, &mf, lo, hi, m, v, e);
  rc = agree(t, rc, "resume from the checkpoint", e);
  if (!rc) {
    memcpy(t->model.params, w, (size_t)P * sizeof *w);
    if (n > 0) memcpy(t->adam.m, m, (size_t)n * sizeof *m), memcpy(t->adam.v, v, (size_t)n * sizeof *v);
    t->step = mf.step;
    t->adam.step = mf.adam_step;
  }
  free(w), free(m), free(v);
  ckpt_manifest_free(&mf);
#if SR_HAVE_CUDA
  if (rc == SR_OK && t->dev) {
    rc = model_cuda_upload(t->dev, &t->model, e);
    if (!rc) rc = model_cuda_moments(t->dev, t->adam.m, t->adam.v, 0, e);
  }
#endif
  return rc;
}
