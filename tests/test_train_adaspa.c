// test_train_adaspa.c — `sparsering-exec train --pattern adaspa-online:S:B` on the CPU backend: the plans search
// their block masks inside the forwards (on one rank and over the ring of two), at every --search-every-th step
// and on every held-out sequence, reuse them in between (a recomputation's forward too) and report the reused
// masks' recall when asked; the run trains (finite losses) and its recorded pattern is the searched one.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/mpi_fixture.h"
#include "tests/test.h"
#include "traces/trace.h"

// `sparsering-exec train` of tiny-test (2 layers) on `ranks` CPU ranks at 300 tokens with adaspa-online:0.5:32.
static int train_run(int ranks, const char *args, char **out) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, MPI_ENV "mpirun --oversubscribe -np %d %s/sparsering-exec train --model tiny-test --cluster %s "
           "--layout striped:16 --schedule ring --pattern adaspa-online:0.5:32 --seq 300 %s 2>&1", ranks, test_bin_dir(),
           mpi_cpu_cluster(1, ranks), args);
  return test_run(cmd, out);
}

// The count before `what` in the "block search" summary line (-1: none).
static long long counted(const char *out, const char *what) {
  const char *l = out ? strstr(out, "adaspa-online block search") : NULL;
  const char *w = l ? strstr(l, what) : NULL;
  if (!w) return -1;
  const char *p = w;
  while (p > l && p[-1] == ' ') p--;
  while (p > l && p[-1] >= '0' && p[-1] <= '9') p--;
  return atoll(p);
}

TEST(train_adaspa_online_searches_every_k_steps_and_reuses_the_mask_in_between) {
  for (int ranks = 1; ranks <= 2; ranks++) {
    char *out = NULL;
    // 5 steps, a search at steps 0, 2 and 4 in each of the 2 layers, the masks kept at steps 1 and 3
    CHECK_EQ_INT(train_run(ranks, "--steps 5 --search-every 2", &out), 0);
    CHECK_EQ_INT(counted(out, " searches"), 6);
    CHECK_EQ_INT(counted(out, " reuses"), 4);
    CHECK_EQ_INT(counted(out, " dense passes"), 6);  // a new sample every step: every search runs its dense pass
    CHECK_STR_CONTAINS(out, "step     5 | loss ");
    CHECK(out && !strstr(out, "nan") && !strstr(out, "inf "));
    free(out);
  }
}

TEST(train_adaspa_online_searches_each_sample_of_a_batch_at_a_searching_step) {
  char *out = NULL;
  // 3 steps of 3 samples, a search at steps 0 and 2: each sample is new inputs, so each of its 2 layers searches
  // its own mask (3 samples x 2 layers x 2 steps = 12 searches, each with its dense pass); at step 1 all 3 samples
  // run the last mask (3 x 2 = 6 reuses). Before, the batch's later samples ran its first sample's mask.
  CHECK_EQ_INT(train_run(1, "--steps 3 --batch 3 --search-every 2", &out), 0);
  CHECK_EQ_INT(counted(out, " searches"), 12);
  CHECK_EQ_INT(counted(out, " reuses"), 6);
  CHECK_EQ_INT(counted(out, " dense passes"), 12);
  CHECK_STR_CONTAINS(out, "step     3 | loss ");
  free(out);
}

TEST(train_adaspa_online_reuses_in_the_recomputation_and_measures_reused_masks_when_asked) {
  char *out = NULL;
  // steps 0..3, searches at 0 and 3; the recomputed forward of every layer reuses its step's mask (8 forwards:
  // 2 of them at reuse steps 1 and 2 are measured, each with its own dense pass) and the 2 held-out sequences search
  CHECK_EQ_INT(train_run(1, "--steps 4 --search-every 3 --recompute-attn --search-recall --eval 2", &out), 0);
  CHECK_EQ_INT(counted(out, " searches"), 2 * 2 + 2 * 2);
  CHECK_EQ_INT(counted(out, " reuses"), 2 * 4 + 2 * 2);
  CHECK_STR_CONTAINS(out, "reused masks ");
  CHECK_STR_CONTAINS(out, "(4 forwards)");  // the first forward of layers 0 and 1 at steps 1 and 2
  free(out);
}

TEST(train_adaspa_online_records_the_searched_masks_in_its_trace) {
  char *out = NULL, args[800];
  snprintf(args, sizeof args, "--steps 2 --trace %s/t.safetensors --trace-steps 2", test_tmpdir());
  CHECK_EQ_INT(train_run(2, args, &out), 0);
  free(out);
  char path[700];
  snprintf(path, sizeof path, "%s/t.safetensors", test_tmpdir());
  trace_file t;
  sr_error e = {0};
  pattern p = {0};
  CHECK_EQ_INT(trace_open(path, &t, &e), 0);
  CHECK_EQ_INT(trace_read_step(&t, 0, &p, &e), 0);
  trace_close(&t);
  for (int64_t h = 0; p.h && h < (int64_t)p.layers * p.heads; h++) {
    CHECK_EQ_INT(p.h[h].kind, PATTERN_BLOCK);
    CHECK_EQ_INT(p.h[h].block, 32);
    // every causal block row keeps ceil((1 - s)(row + 1)) blocks for its head's budget s: at least one, and the
    // budgets of 4 heads are 0.5 or (3 * 0.5 - 1) / 2 = 0.25 or (1 + 0.5) / 2 = 0.75 -> at most 3/4 of a row
    for (int64_t pb = 0; pb < p.h[h].n_blocks; pb++) {
      int kept = __builtin_popcountll(p.h[h].mask[pb * p.h[h].row_words]);
      CHECK(kept >= 1 && kept <= (int)ceil(0.75 * (double)(pb + 1)));
    }
  }
  pattern_free(&p);
}
