// cmd_whatif.c — `sparsering whatif`: the strategies side by side on one model, cluster and length.
// Without flags it runs the default study (Qwen2.5-3B, 512K tokens, 4 x 8 A100-40GB); `make run` runs it.
// The table goes to stdout; a CSV is written only where --csv names one.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "plan/plan.h"
#include "plan/util.h"
#include "sim/report.h"
#include "sim/strategy.h"

#define MAX_STRATEGIES 32

static const cli_flag whatif_flags[] = {
    {"model", "NAME|PATH", "qwen2.5-3b", "the model: a shipped name (models/NAME.json) or a config file"},
    {"cluster", "NAME|PATH", "a100-4x8", "the cluster: a shipped name (models/clusters/NAME.json) or a description file"},
    {"seq", "N", "512K", "tokens in the sequence: 524288, 512K, 1M (K = 1024)"},
    {"pattern", "P", "each strategy's", "the sparse strategies' attention pattern (docs/patterns.md)"},
    {"seed", "X", "0", "seed of synthetic patterns, 0 to 2^53"},
    {"strategies", "A,B,...", "all", "the strategies to compare, comma-separated"},
    {"recompute", "0|1", "1", "per-layer activation recomputation"},
    {"zero", "0|1", "1", "optimizer state sharded over ranks (ZeRO-1)"},
    {"trainer", "NAME", "mixed", "whose memory to count: mixed (a bf16 mixed-precision trainer) or exec (sparsering-exec train)"},
    {"representative", NULL, NULL, "simulate one layer per distinct work pattern and repeat its time (faster)"},
    {"attention-only", NULL, NULL, "the step holds only each layer's attention, forward and backward"},
    {"csv", "FILE", "notebooks-data/whatif_*.csv", "where to write the table as CSV"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage whatif_usage = {NULL, "sparsering whatif --model qwen2.5-3b --cluster h100-8x8 --seq 1M --csv w.csv",
                                       {whatif_flags, NULL}};

static int cmd_whatif(int argc, char **argv) {
  sr_error e;
  sr_error_clear(&e);
  cli_args a;
  if (cli_parse(argc, argv, &whatif_usage, &a, &e)) return sr_error_report(&e, "sparsering whatif");
  if (a.n_pos > 0) {
    sr_input_error(&e, NULL, a.pos[0], "unexpected argument");
    return sr_error_report(&e, "sparsering whatif");
  }
  strategy_study st;
  memset(&st, 0, sizeof st);
  plan_spec_defaults(&st.base);
  int64_t x;
  snprintf(st.base.model, sizeof st.base.model, "%s", cli_get(&a, "model", "qwen2.5-3b"));
  snprintf(st.base.cluster, sizeof st.base.cluster, "%s", cli_get(&a, "cluster", "a100-4x8"));
  if (sr_parse_tokens(cli_get(&a, "seq", "512K"), "--seq", &st.base.seq, &e)) return sr_error_report(&e, "sparsering whatif");
  if (cli_get_int(&a, "seed", 0, 0, (int64_t)1 << 53, &x, &e)) return sr_error_report(&e, "sparsering whatif");
  st.base.seed = (uint64_t)x;
  if (cli_get_int(&a, "recompute", 1, 0, 1, &x, &e)) return sr_error_report(&e, "sparsering whatif");
  st.base.recompute = (int)x;
  if (cli_get_int(&a, "zero", 1, 0, 1, &x, &e)) return sr_error_report(&e, "sparsering whatif");
  st.base.zero = (int)x;
  // whose memory to count: a mixed-precision trainer's, or sparsering-exec train's (plan_build checks it)
  const char *tr = cli_get(&a, "trainer", "mixed");
  if (strcmp(tr, "mixed") != 0 && strcmp(tr, "exec") != 0) {
    sr_input_error(&e, NULL, "--trainer", "'%s' is not one of mixed, exec", tr);
    return sr_error_report(&e, "sparsering whatif");
  }
  snprintf(st.base.trainer, sizeof st.base.trainer, "%s", tr);
  st.base.attention_only = cli_has(&a, "attention-only");
  const char *pat = cli_get(&a, "pattern", "");
  if (strlen(pat) >= sizeof st.sparse_pattern) {
    sr_input_error(&e, NULL, "--pattern", "too long");
    return sr_error_report(&e, "sparsering whatif");
  }
  snprintf(st.sparse_pattern, sizeof st.sparse_pattern, "%s", pat);
  // The study's model and cluster must load: errors in them are the user's, not a strategy's.
  model_config m;
  cluster_desc c;
  if (model_load(st.base.model, &m, &e)) {
    char msg[sizeof e.msg];
    snprintf(msg, sizeof msg, "--model: %s", e.msg);
    snprintf(e.msg, sizeof e.msg, "%s", msg);
    return sr_error_report(&e, "sparsering whatif");
  }
  if (cluster_load(st.base.cluster, &c, &e)) {
    char msg[sizeof e.msg];
    snprintf(msg, sizeof msg, "--cluster: %s", e.msg);
    snprintf(e.msg, sizeof e.msg, "%s", msg);
    return sr_error_report(&e, "sparsering whatif");
  }
  // Strategies: the planner's list, or a comma-separated subset.
  char names[MAX_STRATEGIES][64];
  int n = 0;
  if (cli_has(&a, "strategies")) {
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", cli_get(&a, "strategies", ""));
    for (char *tok = strtok(buf, ","); tok && n < MAX_STRATEGIES; tok = strtok(NULL, ",")) snprintf(names[n++], 64, "%s", tok);
    if (n == 0) {
      sr_input_error(&e, NULL, "--strategies", "empty list");
      return sr_error_report(&e, "sparsering whatif");
    }
  } else {
    for (int i = 0; plan_strategy_names[i] && n < MAX_STRATEGIES; i++) snprintf(names[n++], 64, "%s", plan_strategy_names[i]);
  }
  sim_options o = {cli_has(&a, "representative"), 0, 0};
  sim_result *res = calloc((size_t)n, sizeof *res);
  if (!res) return 1;
  double t0 = sr_now();
  // The strategies share their pattern and accounting (the sparse ones run the same pattern, some on the
  // same layout): built and counted once.
  if (sim_cache_open(&st.cache, &e)) {
    free(res);
    return sr_error_report(&e, "sparsering whatif");
  }
  for (int i = 0; i < n; i++) {
    if (sim_strategy(&st, names[i], &o, &res[i], NULL, &e)) {
      sim_cache_close(st.cache);
      free(res);
      if (strncmp(e.msg, "strategy:", 9) == 0) {
        char msg[sizeof e.msg];
        snprintf(msg, sizeof msg, "--strategies%s", e.msg + 8);
        snprintf(e.msg, sizeof e.msg, "%s", msg);
      }
      return sr_error_report(&e, "sparsering whatif");
    }
  }
  sim_cache_close(st.cache);
  char tok[32];
  printf("what-if: %s on %s (%d x %d %s), %s tokens, sparse pattern %s\n", m.name, c.name, c.nodes, c.gpus_per_node,
         c.gpu.name, sr_format_tokens(st.base.seq, tok, sizeof tok), pat[0] ? pat : "(planner default)");
  char note[600];
  printf("%s\n", cluster_calibration_note(&c, note, sizeof note));
  sr_buf b = {0}, csv = {0};
  report_table(&b, res, n);
  fputs(b.data ? b.data : "", stdout);
  int best = report_fastest(res, n);
  printf("fastest: %s; simulated in %.2f s\n", best >= 0 ? res[best].strategy : "(none fits)", sr_now() - t0);
  // CSV: only where asked (--csv FILE)
  char lead[1200];
  int rc = 0;
  if (cli_has(&a, "csv")) {
    const char *path = cli_get(&a, "csv", "");
    report_csv_header(&csv, "model,cluster,seq");
    snprintf(lead, sizeof lead, "%s,%s,%lld", m.name, c.name, (long long)st.base.seq);
    for (int i = 0; i < n; i++) report_csv_row(&csv, lead, &res[i]);
    rc = sr_write_atomic(path, csv.data, csv.len, &e);
    if (!rc) printf("wrote %s\n", path);
  }
  sr_buf_free(&b);
  sr_buf_free(&csv);
  free(res);
  return rc ? sr_error_report(&e, "sparsering whatif") : 0;
}

CLI_COMMAND("whatif", cmd_whatif,
            "the strategies side by side on one model, cluster and length",
            &whatif_usage)
