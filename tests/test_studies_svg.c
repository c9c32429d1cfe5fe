// test_studies_svg.c — the SVG Gantt writer (sim/svg.h): the file parses as XML, has one row per rank
// (ranks without tasks included), one bar per task with a hover title naming phase, layer and step,
// bars placed in proportion to time, the layer filter, and `sparsering sim --svg` end to end.
// The XML is read back by scripts/svg_summary.py (python3's xml.etree), not by the writer's own code.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/svg.h"
#include "tests/test.h"

// ---- helpers ---------------------------------------------------------------------------------

// The repository root: the tests run from it under `make test`; else two levels above $SR_BIN.
static const char *repo_root(void) {
  static char root[4096];
  if (test_file_exists("scripts/svg_summary.py")) return ".";
  snprintf(root, sizeof root, "%s/..", test_bin_dir());
  char probe[4200];
  snprintf(probe, sizeof probe, "%s/scripts/svg_summary.py", root);
  if (!test_file_exists(probe)) snprintf(root, sizeof root, "%s/../../..", test_bin_dir());
  return root;
}

// Parse an SVG with scripts/svg_summary.py; returns its exit status, its report in *out.
static int svg_summary(const char *svg, char **out) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "python3 %s/scripts/svg_summary.py '%s'", repo_root(), svg);
  return test_run(cmd, out);
}

// Count the lines of text that start with prefix.
static int count_lines(const char *text, const char *prefix) {
  int n = 0;
  size_t k = strlen(prefix);
  for (const char *p = text; p && *p;) {
    if (strncmp(p, prefix, k) == 0) n++;
    p = strchr(p, '\n');
    if (p) p++;
  }
  return n;
}

// The x and width of the bar line whose title contains key ("bar R X W | TITLE").
static int bar_geometry(const char *report, const char *key, double *x, double *w) {
  for (const char *p = report; p && *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
    int r;
    if (strncmp(line, "bar ", 4) == 0 && strstr(line, key) && sscanf(line, "bar %d %lf %lf", &r, x, w) == 3) return 1;
    p = nl ? nl + 1 : NULL;
  }
  return 0;
}

static timeline_event ev(double start_s, double dur_s, int rank, int layer, int step, int stream, int phase) {
  return (timeline_event){.start = start_s, .dur = dur_s, .rank = rank, .layer = layer, .step = step, .stream = (uint8_t)stream,
                          .phase = (uint8_t)phase};
}

// The chart of t with options o (NULL: the defaults), written to the test's folder, as svg_summary reports
// it (malloc'd; "" when the write or the report failed, which the checks here count as failures).
static char *chart(const sim_timeline *t, const sim_svg_options *o) {
  char path[4200], *out = NULL;
  snprintf(path, sizeof path, "%s/t.svg", test_tmpdir());
  sr_error e = {0};
  CHECK_EQ_INT(sim_svg_write(t, o, path, &e), SR_OK);
  CHECK_EQ_INT(svg_summary(path, &out), 0);
  return out ? out : strdup("");
}

// ---- the writer ------------------------------------------------------------------------------

TEST(svg_has_one_row_per_rank_including_idle_ranks) {
  // Ranks 0 and 2 have tasks, rank 1 none: the chart still has three rows.
  timeline_event e3[] = {ev(0, 1e-3, 0, 0, 0, STREAM_COMPUTE, PHASE_ATTN), ev(0, 2e-3, 2, 0, 1, STREAM_INTER, PHASE_KV_SEND)};
  sim_timeline t = {e3, 2, 2};
  sim_svg_options o = sim_svg_defaults();
  o.world = 3;
  char *out = chart(&t, &o);
  CHECK_STR_CONTAINS(out, "ranks 3\n");
  CHECK_STR_CONTAINS(out, "row 0 bars 1 ");
  CHECK_STR_CONTAINS(out, "row 1 bars 0 ");
  CHECK_STR_CONTAINS(out, "row 2 bars 1 ");
  free(out);
}

TEST(svg_rows_default_to_the_largest_rank_of_the_timeline) {
  timeline_event e1[] = {ev(0, 1e-3, 4, 0, 0, STREAM_COMPUTE, PHASE_QKV)};
  sim_timeline t = {e1, 1, 1};
  char *out = chart(&t, NULL);
  CHECK_STR_CONTAINS(out, "ranks 5\n");
  free(out);
}

TEST(svg_lanes_are_the_streams_in_use_in_every_row) {
  // compute on rank 0, the inter-node link on rank 1: both rows show both lanes, and no other.
  timeline_event e2[] = {ev(0, 1e-3, 0, 0, 0, STREAM_COMPUTE, PHASE_ATTN), ev(0, 1e-3, 1, 0, 0, STREAM_INTER, PHASE_KV_SEND)};
  sim_timeline t = {e2, 2, 2};
  char *out = chart(&t, NULL);
  CHECK_STR_CONTAINS(out, "row 0 bars 1 lanes compute,inter\n");
  CHECK_STR_CONTAINS(out, "row 1 bars 1 lanes compute,inter\n");
  free(out);
}

TEST(svg_every_task_is_a_bar_with_a_title_naming_phase_layer_and_step) {
  timeline_event e3[] = {ev(0, 1e-3, 0, 3, 2, STREAM_COMPUTE, PHASE_ATTN_BWD), ev(1e-3, 1e-3, 0, 3, 2, STREAM_INTRA, PHASE_DKV_SEND),
                    ev(0, 5e-4, 1, 7, -1, STREAM_COLL, PHASE_GRAD_REDUCE)};
  sim_timeline t = {e3, 3, 3};
  char *out = chart(&t, NULL);
  CHECK_EQ_INT(count_lines(out, "bar "), 3);
  CHECK_STR_CONTAINS(out, "| rank 0 compute: attn_bwd, layer 3, step 2, start 0 ms, 1 ms");
  CHECK_STR_CONTAINS(out, "| rank 0 intra: dkv_send, layer 3, step 2, start 1 ms, 1 ms");
  CHECK_STR_CONTAINS(out, "| rank 1 coll: grad_reduce, layer 7, step -1, start 0 ms, 0.5 ms");
  free(out);
}

TEST(svg_bars_are_placed_in_proportion_to_time) {
  // A takes [0, 1) ms, B [1, 3) ms: B is twice as wide as A and starts where A ends.
  timeline_event e2[] = {ev(0, 1e-3, 0, 0, 0, STREAM_COMPUTE, PHASE_QKV), ev(1e-3, 2e-3, 1, 0, 0, STREAM_COMPUTE, PHASE_POST)};
  sim_timeline t = {e2, 2, 2};
  char *out = chart(&t, NULL);
  double xa = 0, wa = 0, xb = 0, wb = 0;
  CHECK(bar_geometry(out, ": qkv,", &xa, &wa));
  CHECK(bar_geometry(out, ": post,", &xb, &wb));
  CHECK_NEAR(wb, 2 * wa, 0.02);
  CHECK_NEAR(xb, xa + wa, 0.02);
  free(out);
}

TEST(svg_layer_filter_keeps_only_that_layers_tasks) {
  timeline_event e4[] = {ev(0, 1e-3, 0, 0, 0, STREAM_COMPUTE, PHASE_ATTN), ev(1e-3, 1e-3, 0, 1, 0, STREAM_COMPUTE, PHASE_ATTN),
                    ev(2e-3, 1e-3, 1, 1, 1, STREAM_COMPUTE, PHASE_ATTN), ev(3e-3, 1e-3, 1, 2, 0, STREAM_COMPUTE, PHASE_ATTN)};
  sim_timeline t = {e4, 4, 4};
  sim_svg_options o = sim_svg_defaults();
  o.layer = 1;
  char *out = chart(&t, &o);
  CHECK_EQ_INT(count_lines(out, "bar "), 2);
  CHECK(!strstr(out, "layer 0,"));
  CHECK(!strstr(out, "layer 2,"));
  free(out);
}

TEST(svg_title_with_markup_characters_is_escaped) {
  timeline_event e1[] = {ev(0, 1e-3, 0, 0, 0, STREAM_COMPUTE, PHASE_ATTN)};
  sim_timeline t = {e1, 1, 1};
  sim_svg_options o = sim_svg_defaults();
  o.title = "a<b & \"c\" > 'd'";
  char *out = chart(&t, &o);
  free(out);
}

TEST(svg_empty_timeline_is_still_a_chart) {
  sim_timeline t = {NULL, 0, 0};
  sim_svg_options o = sim_svg_defaults();
  o.world = 2;
  char *out = chart(&t, &o);
  CHECK_STR_CONTAINS(out, "ranks 2\n");
  CHECK_EQ_INT(count_lines(out, "bar "), 0);
  free(out);
}

TEST(svg_unwritable_path_is_an_error_not_a_crash) {
  timeline_event e1[] = {ev(0, 1e-3, 0, 0, 0, STREAM_COMPUTE, PHASE_ATTN)};
  sim_timeline t = {e1, 1, 1};
  sr_error e = {0};
  CHECK(sim_svg_write(&t, NULL, "/nonexistent-dir/x/t.svg", &e) != SR_OK);
  CHECK(e.msg[0] != 0);
}
