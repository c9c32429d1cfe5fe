// test_parallel.c — the parallel loop (plan/parallel.h): every item runs once whatever the thread count,
// and a failure reports the lowest failing item's error, as a serial loop would; the ordered thread (sr_ordered) runs
// the items handed over, once each, in order; the pipeline (sr_pipeline) commits every item once, in order, within
// its window of items in flight, and stops at the lowest failure of its two stages.
#include <stdlib.h>
#include <string.h>

#include "plan/parallel.h"
#include "tests/test.h"

typedef struct {
  int *hits;
  int fail_from;  // items >= this fail (n: none)
} job;

static int item(void *ctx, int i, int thread, sr_error *e) {
  job *j = ctx;
  __atomic_add_fetch(&j->hits[i], 1, __ATOMIC_RELAXED);
  if (i >= j->fail_from && i % 3 == 0) return sr_input_error(e, NULL, "item", "%d failed", i);
  return SR_OK;
}

TEST(parallel_for_runs_every_item_once_for_any_thread_count) {
  for (int threads = 1; threads <= 5; threads++) {
    int hits[97] = {0};
    job j = {hits, 97};
    sr_error e;
    CHECK_EQ_INT(sr_parallel_for(97, threads, item, &j, &e), SR_OK);
    for (int i = 0; i < 97; i++) CHECK_EQ_INT(hits[i], 1);
  }
}

TEST(parallel_for_reports_the_lowest_failing_item) {
  for (int threads = 1; threads <= 4; threads++) {
    int hits[200] = {0};
    job j = {hits, 50};  // items 51, 54, ... fail; 51 first
    sr_error e;
    sr_error_clear(&e);
    CHECK_EQ_INT(sr_parallel_for(200, threads, item, &j, &e), SR_EINPUT);
    CHECK(strstr(e.msg, "51 failed") != NULL);
    for (int i = 0; i <= 51; i++) CHECK_EQ_INT(hits[i], 1);
  }
}

// The ordered thread's items: each appends its number to the log, after checking it was handed over.
typedef struct {
  int log[64], n_log;
  int handed;     // items handed over so far (written before sr_ordered_hand)
  int fail_at;    // this item fails (-1: none)
  int early;      // items run before they were handed over
} ordered_job;

static int ordered_item(void *ctx, int i, int thread, sr_error *e) {
  ordered_job *j = ctx;
  if (i >= __atomic_load_n(&j->handed, __ATOMIC_ACQUIRE)) j->early++;
  if (i == j->fail_at) return sr_input_error(e, NULL, "item", "%d failed", i);
  j->log[j->n_log++] = i;
  return SR_OK;
}

TEST(parallel_ordered_runs_every_handed_item_once_in_order) {
  ordered_job j = {.fail_at = -1};
  sr_ordered *o = sr_ordered_start(64, ordered_item, &j);
  CHECK(o != NULL);
  for (int k = 8; k <= 64; k += 8) {
    __atomic_store_n(&j.handed, k, __ATOMIC_RELEASE);
    sr_ordered_hand(o, k);
  }
  int done = -1;
  sr_error e;
  sr_error_clear(&e);
  CHECK_EQ_INT(sr_ordered_finish(o, &done, &e), SR_OK);
  CHECK_EQ_INT(done, 64);
  CHECK_EQ_INT(j.n_log, 64);
  for (int i = 0; i < 64; i++) CHECK_EQ_INT(j.log[i], i);
  CHECK_EQ_INT(j.early, 0);
}

TEST(parallel_ordered_stops_at_the_first_failure_and_after_the_items_handed_over) {
  ordered_job j = {.fail_at = 5};
  sr_ordered *o = sr_ordered_start(64, ordered_item, &j);
  CHECK(o != NULL);
  __atomic_store_n(&j.handed, 10, __ATOMIC_RELEASE);
  sr_ordered_hand(o, 10);
  int done = -1;
  sr_error e;
  sr_error_clear(&e);
  CHECK_EQ_INT(sr_ordered_finish(o, &done, &e), SR_EINPUT);
  CHECK(strstr(e.msg, "5 failed") != NULL);
  CHECK_EQ_INT(done, 5);
  CHECK_EQ_INT(j.n_log, 5);
  ordered_job k = {.fail_at = -1};  // finished early: only the three handed over run
  o = sr_ordered_start(64, ordered_item, &k);
  __atomic_store_n(&k.handed, 3, __ATOMIC_RELEASE);
  sr_ordered_hand(o, 3);
  CHECK_EQ_INT(sr_ordered_finish(o, &done, &e), SR_OK);
  CHECK_EQ_INT(done, 3);
  CHECK_EQ_INT(k.n_log, 3);
  CHECK_EQ_INT(k.early, 0);
}

// The pipeline's items: work checks that no item runs more than `window` past the last committed one; commit logs
// the item, after checking its work was done.
typedef struct {
  int worked[100], log[100], n_log;
  int window, too_early, uncommitted_work;
  int fail_work, fail_commit;  // this item's work (commit) fails (-1: none)
} pipe_job;

static int pipe_work(void *ctx, int i, int thread, sr_error *e) {
  pipe_job *j = ctx;
  if (i - __atomic_load_n(&j->n_log, __ATOMIC_ACQUIRE) >= j->window) __atomic_add_fetch(&j->too_early, 1, __ATOMIC_RELAXED);
  if (i == j->fail_work) return sr_input_error(e, NULL, "item", "work %d failed", i);
  __atomic_store_n(&j->worked[i], 1, __ATOMIC_RELEASE);
  return SR_OK;
}

static int pipe_commit(void *ctx, int i, sr_error *e) {
  pipe_job *j = ctx;
  if (!__atomic_load_n(&j->worked[i], __ATOMIC_ACQUIRE)) j->uncommitted_work++;
  if (i == j->fail_commit) return sr_input_error(e, NULL, "item", "commit %d failed", i);
  j->log[j->n_log] = i;
  __atomic_store_n(&j->n_log, j->n_log + 1, __ATOMIC_RELEASE);
  return SR_OK;
}

TEST(parallel_pipeline_commits_every_item_once_in_order_within_its_window) {
  for (int threads = 1; threads <= 4; threads++)
    for (int window = 1; window <= 5; window += 2) {
      pipe_job j = {.window = window, .fail_work = -1, .fail_commit = -1};
      sr_error e;
      sr_error_clear(&e);
      CHECK_EQ_INT(sr_pipeline(100, threads, window, pipe_work, pipe_commit, &j, &e), SR_OK);
      CHECK_EQ_INT(j.n_log, 100);
      for (int i = 0; i < j.n_log; i++) CHECK_EQ_INT(j.log[i], i);
      CHECK_EQ_INT(j.too_early, 0);
      CHECK_EQ_INT(j.uncommitted_work, 0);
    }
}

TEST(parallel_pipeline_reports_the_lowest_failing_item_and_commits_nothing_after_it) {
  for (int threads = 1; threads <= 4; threads++) {
    pipe_job j = {.window = 3, .fail_work = 40, .fail_commit = 60};  // work 40 fails first
    sr_error e;
    sr_error_clear(&e);
    CHECK_EQ_INT(sr_pipeline(100, threads, 3, pipe_work, pipe_commit, &j, &e), SR_EINPUT);
    CHECK(strstr(e.msg, "work 40 failed") != NULL);
    CHECK_EQ_INT(j.n_log, 40);
    pipe_job k = {.window = 3, .fail_work = 60, .fail_commit = 40};  // commit 40 fails first
    CHECK_EQ_INT(sr_pipeline(100, threads, 3, pipe_work, pipe_commit, &k, &e), SR_EINPUT);
    CHECK(strstr(e.msg, "commit 40 failed") != NULL);
    CHECK_EQ_INT(k.n_log, 40);
  }
}
