// test_timeline.c — the one timeline writer (plan/timeline.h): its CSV and trace-event JSON for given
// events, and the simulator's and the executor's files of one plan holding the same columns, stream ids
// and names, so a predicted and a measured timeline line up.
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "plan/timeline.h"
#include "plan/util.h"
#include "tests/mpi_fixture.h"
#include "tests/test.h"

static char *read_text(const char *path) {
  char *text = NULL;
  sr_error e;
  CHECK_EQ_INT(sr_read_file(path, &text, NULL, &e), SR_OK);
  return text;
}

static cJSON *read_json(const char *path) {
  char *text = read_text(path);
  cJSON *root = cJSON_Parse(text ? text : "");
  free(text);
  CHECK(root != NULL);
  return root;
}

// The stream id of a stream name, or -1.
static int stream_id(const char *name) {
  for (int s = 0; s < STREAM_COUNT; s++)
    if (strcmp(name, timeline_stream_name(s)) == 0) return s;
  return -1;
}

static int phase_known(const char *name) {
  for (int p = 0; p < PHASE_COUNT; p++)
    if (strcmp(name, timeline_phase_name(p)) == 0) return 1;
  return 0;
}

TEST(timeline_csv_has_the_shared_header_and_one_row_per_task_in_microseconds) {
  // attn of rank 1 from 1.5 ms for 0.25 ms; a kv_send of rank 0 on the inter-node link from 2 ms for 1 ms
  timeline_event ev[] = {
      {.start = 1.5e-3, .dur = 0.25e-3, .rank = 1, .layer = 3, .step = 2, .stream = STREAM_COMPUTE, .phase = PHASE_ATTN},
      {.start = 2e-3, .dur = 1e-3, .rank = 0, .layer = 3, .step = 1, .stream = STREAM_INTER, .phase = PHASE_KV_SEND}};
  char path[600];
  snprintf(path, sizeof path, "%s/t.csv", test_tmpdir());
  sr_error e;
  CHECK_EQ_INT(timeline_write_csv(ev, 2, "study", path, &e), SR_OK);
  char *text = read_text(path);
  CHECK(text && strcmp(text, "run,layer,rank,step,phase,stream,start_us,dur_us\n"
                             "study,3,1,2,attn,compute,1500.000,250.000\n"
                             "study,3,0,1,kv_send,inter,2000.000,1000.000\n") == 0);
  free(text);
}

TEST(timeline_run_column_is_the_given_name_or_else_each_events_run_number) {
  timeline_event ev[] = {{.run = 4, .stream = STREAM_COMPUTE, .phase = PHASE_ATTN},
                         {.run = 5, .stream = STREAM_INTRA, .phase = PHASE_A2A}};
  char path[600];
  snprintf(path, sizeof path, "%s/runs.csv", test_tmpdir());
  sr_error e;
  CHECK_EQ_INT(timeline_write_csv(ev, 2, NULL, path, &e), SR_OK);
  char *text = read_text(path);
  CHECK_STR_CONTAINS(text, "\n4,0,0,0,attn,compute,0.000,0.000\n5,0,0,0,a2a,intra,0.000,0.000\n");
  free(text);
}

TEST(timeline_json_names_every_rank_and_stream_and_puts_each_task_on_its_streams_thread) {
  timeline_event ev[] = {
      {.start = 1e-3, .dur = 2e-3, .rank = 1, .layer = 0, .step = 1, .stream = STREAM_INTRA, .phase = PHASE_DKV_SEND}};
  char path[600];
  snprintf(path, sizeof path, "%s/t.json", test_tmpdir());
  sr_error e;
  CHECK_EQ_INT(timeline_write_json(ev, 1, "r", 2, "test", path, &e), SR_OK);
  cJSON *root = read_json(path);
  const cJSON *it, *list = cJSON_GetObjectItem(root, "traceEvents");
  int processes = 0, threads = 0, bad_threads = 0, tasks = 0;
  cJSON_ArrayForEach(it, list) {
    const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(it, "ph")), *name = cJSON_GetStringValue(cJSON_GetObjectItem(it, "name"));
    int tid = cJSON_GetObjectItem(it, "tid")->valueint;
    const char *arg_name = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(it, "args"), "name"));
    if (strcmp(ph, "M") == 0 && strcmp(name, "process_name") == 0) processes++;
    if (strcmp(ph, "M") == 0 && strcmp(name, "thread_name") == 0) threads++, bad_threads += stream_id(arg_name) != tid;
    if (strcmp(ph, "X") == 0) {
      tasks++;
      CHECK(strcmp(name, "dkv_send") == 0 && tid == STREAM_INTRA);
      CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(it, "cat")), "intra") == 0);
      CHECK_EQ_INT(cJSON_GetObjectItem(it, "pid")->valueint, 1);
      CHECK_NEAR(cJSON_GetObjectItem(it, "ts")->valuedouble, 1000, 1e-9);
      CHECK_NEAR(cJSON_GetObjectItem(it, "dur")->valuedouble, 2000, 1e-9);
    }
  }
  CHECK_EQ_INT(processes, 2);
  CHECK_EQ_INT(threads, 2 * STREAM_COUNT);
  CHECK_EQ_INT(bad_threads, 0);
  CHECK_EQ_INT(tasks, 1);
  cJSON_Delete(root);
}

// (phase, stream) pairs of a timeline CSV as "phase,stream" lines; the header is checked on the way.
static int csv_pairs(const char *path, char pairs[][48], int max) {
  char *text = read_text(path);
  int n = 0, line_no = 0;
  for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save), line_no++) {
    if (line_no == 0) {
      CHECK(strcmp(line, "run,layer,rank,step,phase,stream,start_us,dur_us") == 0);
      continue;
    }
    char *f[8], *p = line;
    for (int i = 0; i < 8; i++) f[i] = strsep(&p, ",");
    CHECK(f[7] != NULL && phase_known(f[4]) && stream_id(f[5]) >= 0);
    char pair[48];
    snprintf(pair, sizeof pair, "%s,%s", f[4], f[5]);
    int seen = 0;
    for (int i = 0; i < n && !seen; i++) seen = strcmp(pairs[i], pair) == 0;
    if (!seen && n < max) snprintf(pairs[n++], 48, "%s", pair);
  }
  free(text);
  return n;
}

// Complete events whose tid is not their stream's id (cat); thread names not their tid's stream.
static int json_stream_mismatches(const char *path, int *n_tasks) {
  cJSON *root = read_json(path);
  const cJSON *it;
  int bad = 0;
  *n_tasks = 0;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(root, "traceEvents")) {
    const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(it, "ph"));
    int tid = cJSON_GetObjectItem(it, "tid")->valueint;
    if (strcmp(ph, "X") == 0) {
      (*n_tasks)++;
      bad += stream_id(cJSON_GetStringValue(cJSON_GetObjectItem(it, "cat"))) != tid;
    } else if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(it, "name")), "thread_name") == 0) {
      bad += stream_id(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(it, "args"), "name"))) != tid;
    }
  }
  cJSON_Delete(root);
  return bad;
}

TEST(simulator_and_executor_timelines_of_one_plan_share_columns_stream_ids_and_phase_names) {
  char cmd[4096], sim_csv[600], sim_json[600], exec_csv[600], exec_json[600], *out = NULL;
  snprintf(sim_csv, sizeof sim_csv, "%s/sim.csv", test_tmpdir());
  snprintf(sim_json, sizeof sim_json, "%s/sim.json", test_tmpdir());
  snprintf(exec_csv, sizeof exec_csv, "%s/exec.csv", test_tmpdir());
  snprintf(exec_json, sizeof exec_json, "%s/exec.json", test_tmpdir());
  // Two nodes of two ranks: the ring's transfers cross nodes (inter) and stay inside one (intra).
  const char *plan = "--model tiny-test --seq 400 --layout zigzag --schedule ring --pattern dense";
  const char *cluster = mpi_cpu_cluster(2, 2);
  snprintf(cmd, sizeof cmd, "%s/sparsering sim %s --cluster %s --csv %s --timeline %s", test_bin_dir(), plan, cluster,
           sim_csv, sim_json);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  free(out);
  snprintf(cmd, sizeof cmd, MPI_ENV "mpirun --oversubscribe -np 4 %s/sparsering-exec attn %s --cluster %s --csv %s --trace %s",
           test_bin_dir(), plan, cluster, exec_csv, exec_json);
  CHECK_EQ_INT(test_run(cmd, &out), 0);
  free(out);
  // Both CSVs have the shared header and only known phases and streams (checked in csv_pairs); every
  // (phase, stream) the executor measured is one the simulator predicts for the same plan.
  char sim_pairs[64][48], exec_pairs[64][48];
  int n_sim = csv_pairs(sim_csv, sim_pairs, 64), n_exec = csv_pairs(exec_csv, exec_pairs, 64), missing = 0;
  CHECK(n_exec >= 4);  // attn, attn_bwd on compute; kv_send, dkv_send on the links
  for (int i = 0; i < n_exec; i++) {
    int found = 0;
    for (int j = 0; j < n_sim && !found; j++) found = strcmp(exec_pairs[i], sim_pairs[j]) == 0;
    if (!found) fprintf(stderr, "  measured %s is not predicted\n", exec_pairs[i]);
    missing += !found;
  }
  CHECK_EQ_INT(missing, 0);
  // In both traces each task sits on the thread of its stream's id and each thread is named by it.
  int n_tasks;
  CHECK_EQ_INT(json_stream_mismatches(sim_json, &n_tasks), 0);
  CHECK(n_tasks > 0);
  CHECK_EQ_INT(json_stream_mismatches(exec_json, &n_tasks), 0);
  CHECK(n_tasks > 0);
}
