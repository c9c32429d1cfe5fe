// cmd_whatif.c — `sparsering whatif`: the strategies side by side on one model, cluster and length.
// Without flags it runs the default study (Qwen2.5-3B, 512K tokens, 4 x 8 A100-40GB); `make run` runs it.
// The table goes to stdout; a CSV is written only where --csv names one.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "plan/plan.h"
#include "plan/plan_flags.h"
#include "plan/util.h"
#include "sim/report.h"
#include "sim/strategy.h"
#include "sim/study_flags.h"

// The study's flags are sim/study_flags.h's; the CSV is this command's output.
static const cli_flag whatif_out_flags[] = {
    {"csv", cli_out_file, NULL, "where to write the table as CSV (no CSV without it)"},
    {NULL, NULL, NULL, NULL},
};
static const cli_usage whatif_usage = {NULL, "sparsering whatif --model qwen2.5-3b --cluster h100-8x8 --seq 1M --csv w.csv",
                                       {whatif_flags, plan_step_flags, whatif_out_flags, NULL}};

static int cmd_whatif(int argc, char **argv) {
  sr_error e;
  sr_error_clear(&e);
  cli_args a;
  if (cli_parse(argc, argv, &whatif_usage, &a, &e)) return sr_error_report(&e, "sparsering whatif");
  if (a.n_pos > 0) {
    sr_input_error(&e, NULL, a.pos[0], "unexpected argument");
    return sr_error_report(&e, "sparsering whatif");
  }
  whatif_study w;
  if (whatif_from_flags(&a, &w, &e) || whatif_run(&w, &e)) {
    whatif_free(&w);
    return sr_error_report(&e, "sparsering whatif");
  }
  char tok[32];
  const char *pat = w.st.sparse_pattern;
  printf("what-if: %s on %s (%d x %d %s), %s tokens, sparse pattern %s\n", w.m.name, w.c.name, w.c.nodes,
         w.c.gpus_per_node, w.c.gpu.name, sr_format_tokens(w.st.base.seq, tok, sizeof tok), pat[0] ? pat : "(planner default)");
  char note[600];
  printf("%s\n", cluster_calibration_note(&w.c, note, sizeof note));
  sr_buf b = {0}, csv = {0};
  report_table(&b, w.res, w.n);
  fputs(b.data ? b.data : "", stdout);
  int best = report_fastest(w.res, w.n);
  printf("fastest: %s; simulated in %.2f s\n", best >= 0 ? w.res[best].strategy : "(none fits)", w.wall_s);
  // CSV: only where asked (--csv FILE)
  int rc = 0;
  if (cli_has(&a, "csv")) {
    const char *path = cli_get(&a, "csv", "");
    rc = whatif_csv(&w, &csv) ? sr_internal_error(&e, 0, "whatif: out of memory") : sr_write_atomic(path, csv.data, csv.len, &e);
    if (!rc) printf("wrote %s\n", path);
  }
  sr_buf_free(&b);
  sr_buf_free(&csv);
  whatif_free(&w);
  return rc ? sr_error_report(&e, "sparsering whatif") : 0;
}

CLI_COMMAND("whatif", cmd_whatif,
            "the strategies side by side on one model, cluster and length",
            &whatif_usage)
