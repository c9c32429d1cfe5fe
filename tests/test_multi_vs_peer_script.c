// test_multi_vs_peer_script.c — scripts/gpu/multi_vs_peer.sh (ours against PyTorch's context parallelism on a 4-GPU
// host) on the CPU backend (SR_DRY=1): every layout of ours lands in the final table with its times, the peer is
// skipped where no torch sees the GPUs, and, with a stand-in for the peer's launcher that prints fixed RESULT
// lines, each row's ratio is the peer's time over the row's; scripts/gpu/cp_peer.py refuses bad flags (exit 2)
// before it loads torch, so those are checked on any machine.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/mpi_fixture.h"
#include "tests/test.h"

// The table row of the final table whose "what" column starts with `what` at length `seq`: its fields
// (seq, what, fwd, bwd, fwd+bwd, ratio) into f[6]; 0 when there is none.
static int table_row(const char *out, const char *seq, const char *what, char f[6][160]) {
  const char *t = out ? strstr(out, "| seq | what |") : NULL;
  char head[200];
  snprintf(head, sizeof head, "| %s | %s", seq, what);
  const char *r = t ? strstr(t, head) : NULL;
  if (!r) return 0;
  const char *p = r + 1;
  for (int i = 0; i < 6; i++) {
    const char *bar = strchr(p, '|');
    if (!bar) return 0;
    size_t n = (size_t)(bar - p);
    while (n && p[n - 1] == ' ') n--;
    while (n && *p == ' ') p++, n--;
    if (n >= 160) return 0;
    memcpy(f[i], p, n);
    f[i][n] = 0;
    p = bar + 1;
  }
  return 1;
}

TEST(multi_vs_peer_dry_run_tables_every_layout_and_training_step_of_ours_next_to_a_skipped_peer) {
  char cmd[2048], *out = NULL, f[6][160];
  snprintf(cmd, sizeof cmd,
           MPI_ENV "SR_DRY=1 NP=4 SEQS=512K PY=/nonexistent/python SR_BIN=%s SR_LOGS=%s/logs OUT=%s/out "
                   "bash scripts/gpu/multi_vs_peer.sh 'check layer train'",
           test_bin_dir(), test_tmpdir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "p_check: skipped");
  const char *ours[] = {"ours, striped ring (dense)", "ours, zigzag ring (dense)", "ours, USP",
                        "ours, double ring over 2 nodes", "ours, MTraining (vs-topp:0.95, double ring)"};
  for (int i = 0; i < 5; i++) {
    CHECK(table_row(out, "512K", ours[i], f));
    // forward, backward and their sum measured; no peer to divide by
    CHECK(atof(f[2]) > 0 && atof(f[3]) > 0);
    CHECK_NEAR(atof(f[4]), atof(f[2]) + atof(f[3]), 0.11);
    CHECK(strcmp(f[5], "-") == 0);
  }
  CHECK(table_row(out, "512K", "PyTorch context parallelism", f) && strcmp(f[2], "skipped") == 0);
  CHECK(table_row(out, "128K", "train step: PyTorch context parallelism", f) && strcmp(f[2], "skipped") == 0);
  CHECK(table_row(out, "128K", "train step: ours, striped ring (dense)", f) && atof(f[4]) > 0);
  CHECK(table_row(out, "128K", "train step: ours, MTraining", f) && atof(f[4]) > 0);
  CHECK(strstr(out, "failed") == NULL);
  free(out);
}

// A stand-in for the peer's Python: it answers the script's torch probe and, launched as torchrun, prints the
// RESULT line of the mode it was asked for (layer: 400 ms forward + backward; training: 50 ms a step; check:
// a failed comparison).
static void write_fake_python(const char *path) {
  FILE *fp = fopen(path, "w");
  CHECK(fp != NULL);
  if (!fp) return;
  fputs("#!/bin/sh\n"
        "[ \"$1\" = -c ] && { echo 'peer: torch fake'; exit 0; }\n"
        "case \" $* \" in\n"
        "  *' --check '*) echo 'RESULT mode=check seq=16384 world=4 worst=5.0e-02 tol=0.02 ok=0'; exit 1 ;;\n"
        "  *' --mode train '*) echo 'RESULT mode=train seq=512 world=4 median_step_s=0.0500 tokens_per_s=10240.0 "
        "peak_gib=1.000 params=replicated gqa=native' ;;\n"
        "  *) echo 'RESULT mode=layer seq=2048 world=4 fwd_ms=100.000 bwd_ms=300.000 total_ms=400.000 peak_gib=2.000 "
        "gqa=native backend=cudnn' ;;\n"
        "esac\n",
        fp);
  fclose(fp);
}

// The table prints a ratio to two decimals (and the times to one): 2% of it, or the printed digits' half unit where
// that is more (a dry run's slow step on a loaded machine gives ratios near 0.1, where 0.005 is 5%).
static double printed_ratio_tol(double exact) { return 0.02 * exact > 0.0051 ? 0.02 * exact : 0.0051; }

TEST(multi_vs_peer_ratio_is_the_peer_time_over_the_row_time) {
  char py[700], cmd[2048], *out = NULL, f[6][160];
  snprintf(py, sizeof py, "%s/python", test_tmpdir());
  write_fake_python(py);
  snprintf(cmd, sizeof cmd,
           "chmod +x %s && " MPI_ENV "SR_DRY=1 NP=4 SEQS=512K OURS='striped-ring mtraining' TRAIN_STRATEGIES=mtraining "
           "PY=%s SR_BIN=%s SR_LOGS=%s/logs OUT=%s/out bash scripts/gpu/multi_vs_peer.sh 'check layer train'",
           py, py, test_bin_dir(), test_tmpdir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK_STR_CONTAINS(out, "peer check FAILED");  // the stand-in's check reports ok=0
  CHECK(table_row(out, "512K", "PyTorch context parallelism (load balancing, all-gather), gqa native, cudnn", f));
  CHECK(strcmp(f[2], "100.0") == 0 && strcmp(f[3], "300.0") == 0 && strcmp(f[4], "400.0") == 0);
  CHECK(strcmp(f[5], "1.00x") == 0);
  const char *ours[] = {"ours, striped ring (dense)", "ours, MTraining"};
  for (int i = 0; i < 2; i++) {
    CHECK(table_row(out, "512K", ours[i], f));
    CHECK(atof(f[4]) > 0);
    if (atof(f[4]) > 0) CHECK_NEAR(atof(f[5]), 400.0 / atof(f[4]), printed_ratio_tol(400.0 / atof(f[4])));
  }
  CHECK(table_row(out, "128K", "train step: PyTorch context parallelism", f) && strcmp(f[4], "50.0") == 0);
  CHECK(table_row(out, "128K", "train step: ours, MTraining", f));
  if (atof(f[4]) > 0) CHECK_NEAR(atof(f[5]), 50.0 / atof(f[4]), printed_ratio_tol(50.0 / atof(f[4])));
  free(out);
}

// mtraining-all: the mean layer over all the model's layers (attn --layers 36, the closing line), not layer 0's row.
TEST(multi_vs_peer_mean_layer_run_tables_the_closing_mean_of_all_layers) {
  char cmd[2048], *out = NULL, f[6][160];
  snprintf(cmd, sizeof cmd,
           MPI_ENV "SR_DRY=1 NP=4 SEQS=512K OURS='mtraining-all' PY=/nonexistent/python SR_BIN=%s SR_LOGS=%s/logs "
                   "OUT=%s/out bash scripts/gpu/multi_vs_peer.sh layer",
           test_bin_dir(), test_tmpdir(), test_tmpdir());
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  CHECK(table_row(out, "512K", "ours, MTraining (vs-topp:0.95, double ring), the mean of the 36 layers", f));
  CHECK(atof(f[2]) > 0 && atof(f[3]) > 0);
  CHECK_NEAR(atof(f[4]), atof(f[2]) + atof(f[3]), 0.11);
  // the row is the closing line's mean of the run's 2 layers (tiny-test), not layer 0's own times
  char log[1024], *txt = NULL;
  snprintf(log, sizeof log, "cat %s/logs/l_mtraining-all_512K.log", test_tmpdir());
  CHECK_EQ_INT(test_run(log, &txt), 0);
  CHECK_STR_CONTAINS(txt, "2 layer(s): fwd");
  free(txt);
  free(out);
}

TEST(multi_vs_peer_refuses_an_unknown_run_or_too_few_ranks) {
  char *out = NULL;
  CHECK_EQ_INT(test_run("NP=4 OURS='striped-ring bogus' bash scripts/gpu/multi_vs_peer.sh layer", &out), 2);
  CHECK_STR_CONTAINS(out, "unknown run 'bogus'");
  free(out), out = NULL;
  CHECK_EQ_INT(test_run("NP=4 PEER_VARIANTS=fast bash scripts/gpu/multi_vs_peer.sh layer", &out), 2);
  CHECK_STR_CONTAINS(out, "unknown peer variant 'fast'");
  free(out), out = NULL;
  CHECK_EQ_INT(test_run("NP=2 bash scripts/gpu/multi_vs_peer.sh layer", &out), 2);
  CHECK_STR_CONTAINS(out, "NP=2");
  free(out);
}

TEST(cp_peer_refuses_bad_flags_before_it_loads_torch) {
  struct {
    const char *args, *says;
  } bad[] = {
      {"--mode bogus --seq 1K", "invalid choice: 'bogus'"},
      {"--mode layer --seq 12Q", "'12Q' is not a token count"},
      {"--mode layer --seq 1K --repeat 0", "'0' is not a positive integer"},
      {"--mode train --seq 1K", "--mode train needs --model"},
      {"--mode train --seq 1K --model /nonexistent.json", "/nonexistent.json: no such file"},
      {"--mode layer --seq 1K --model models/qwen2.5-3b.json", "belong to --mode train"},
  };
  char cmd[600], *out = NULL;
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    snprintf(cmd, sizeof cmd, "python3 scripts/gpu/cp_peer.py %s", bad[i].args);
    CHECK_EQ_INT(test_run(cmd, &out), 2);
    CHECK_STR_CONTAINS(out, bad[i].says);
    free(out), out = NULL;
  }
  // 1001 tokens over 4 ranks with load balancing (2 chunks a rank): 8 does not divide it; without it 4 must
  CHECK_EQ_INT(test_run("WORLD_SIZE=4 python3 scripts/gpu/cp_peer.py --mode layer --seq 1001", &out), 2);
  CHECK_STR_CONTAINS(out, "not a multiple of 8");
  free(out), out = NULL;
  CHECK_EQ_INT(test_run("WORLD_SIZE=4 python3 scripts/gpu/cp_peer.py --mode layer --seq 1002 --no-load-balance", &out), 2);
  CHECK_STR_CONTAINS(out, "not a multiple of 4");
  free(out), out = NULL;
  CHECK_EQ_INT(test_run("python3 scripts/gpu/cp_peer.py --help", &out), 0);
  CHECK_STR_CONTAINS(out, "context_parallel");
  free(out);
}
