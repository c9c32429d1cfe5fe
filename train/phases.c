// phases.c — the step's classes of work by name, and their line and CSV columns (train/phases.h).
#include "train/phases.h"

#include <stdio.h>

// Each class's name, and whether the step line closes a group after it.
static const struct {
  const char *name;
  int group_end;
} phases[TRAIN_PHASES] = {
    [TRAIN_PHASE_EMBED] = {"embed", 1},
    [TRAIN_PHASE_RMSNORM_FWD] = {"rmsnorm-fwd", 0},
    [TRAIN_PHASE_RMSNORM_BWD] = {"rmsnorm-bwd", 1},
    [TRAIN_PHASE_QKV_FWD] = {"qkv-fwd", 0},
    [TRAIN_PHASE_QKV_DGRAD] = {"qkv-dgrad", 0},
    [TRAIN_PHASE_QKV_WGRAD] = {"qkv-wgrad", 0},
    [TRAIN_PHASE_ROPE_FWD] = {"rope-fwd", 0},
    [TRAIN_PHASE_ROPE_BWD] = {"rope-bwd", 1},
    [TRAIN_PHASE_ATTN_FWD] = {"attn-fwd", 0},
    [TRAIN_PHASE_ATTN_RECOMPUTE] = {"attn-recompute", 0},
    [TRAIN_PHASE_ATTN_BWD] = {"attn-bwd", 1},
    [TRAIN_PHASE_O_FWD] = {"o-fwd", 0},
    [TRAIN_PHASE_O_DGRAD] = {"o-dgrad", 0},
    [TRAIN_PHASE_O_WGRAD] = {"o-wgrad", 1},
    [TRAIN_PHASE_GATE_UP_FWD] = {"gate-up-fwd", 0},
    [TRAIN_PHASE_GATE_UP_DGRAD] = {"gate-up-dgrad", 0},
    [TRAIN_PHASE_GATE_UP_WGRAD] = {"gate-up-wgrad", 0},
    [TRAIN_PHASE_SWIGLU_FWD] = {"swiglu-fwd", 0},
    [TRAIN_PHASE_SWIGLU_BWD] = {"swiglu-bwd", 0},
    [TRAIN_PHASE_DOWN_FWD] = {"down-fwd", 0},
    [TRAIN_PHASE_DOWN_DGRAD] = {"down-dgrad", 0},
    [TRAIN_PHASE_DOWN_WGRAD] = {"down-wgrad", 1},
    [TRAIN_PHASE_RECOMPUTE] = {"recompute", 1},
    [TRAIN_PHASE_LM_HEAD] = {"lm-head", 0},
    [TRAIN_PHASE_CROSS_ENTROPY] = {"cross-entropy", 1},
    [TRAIN_PHASE_GRAD_NORM] = {"grad-norm", 0},
    [TRAIN_PHASE_ADAMW] = {"adamw", 1},
    [TRAIN_PHASE_CASTS] = {"casts", 0},
    [TRAIN_PHASE_COPIES] = {"copies", 0},
    [TRAIN_PHASE_OFFLOAD_WAIT] = {"offload-wait", 0},
    [TRAIN_PHASE_COMM] = {"comm", 1},
};

const char *train_phase_name(int phase) { return phase >= 0 && phase < TRAIN_PHASES ? phases[phase].name : "?"; }

double train_phases_unaccounted(const double *phase_s, double step_s) {
  double sum = 0;
  for (int p = 0; p < TRAIN_PHASES; p++) sum += phase_s[p];
  return step_s - sum;
}

int train_phases_line(int64_t step, const double *phase_s, double step_s, sr_buf *out) {
  int rc = sr_buf_printf(out, "phases %5lld |", (long long)step);
  for (int p = 0; p < TRAIN_PHASES && !rc; p++)
    rc = sr_buf_printf(out, " %s %.4f%s", phases[p].name, phase_s[p], phases[p].group_end ? " |" : "");
  double rest = train_phases_unaccounted(phase_s, step_s);
  return rc ? rc : sr_buf_printf(out, " unaccounted %.4f | step %.4f", rest, step_s);
}

int train_phases_csv_header(sr_buf *out) {
  int rc = 0;
  for (int p = 0; p < TRAIN_PHASES && !rc; p++) {
    char col[64];
    snprintf(col, sizeof col, "%s", phases[p].name);
    for (char *c = col; *c; c++)
      if (*c == '-') *c = '_';
    rc = sr_buf_printf(out, ",phase_%s_s", col);
  }
  return rc ? rc : sr_buf_printf(out, ",unaccounted_s");
}

int train_phases_csv_row(const double *phase_s, double step_s, sr_buf *out) {
  int rc = 0;
  for (int p = 0; p < TRAIN_PHASES && !rc; p++) rc = sr_buf_printf(out, ",%.6f", phase_s[p]);
  return rc ? rc : sr_buf_printf(out, ",%.6f", train_phases_unaccounted(phase_s, step_s));
}
