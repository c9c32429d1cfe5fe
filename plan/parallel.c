// parallel.c — sr_parallel_for on POSIX threads (see parallel.h).
#include "plan/parallel.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sr_threads(void) {
  const char *env = getenv("SR_THREADS");
  if (env && *env) {
    int t = atoi(env);
    if (t >= 1 && t <= 256) return t;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

// Set on the threads of a running loop: a loop started inside one runs serially, so nested loops (a
// layer's heads inside one of the tuner's points) never start threads times threads.
static __thread int in_loop;

typedef struct {
  sr_item_fn fn;
  void *ctx;
  int n;
  int next;              // next item to take (under mu)
  int failed_item;       // lowest failing item so far (n: none)
  sr_error err;          // its error
  int rc;
  pthread_mutex_t mu;
} loop_state;

typedef struct {
  loop_state *s;
  int thread;
} worker_arg;

static void *worker(void *p) {
  worker_arg *a = p;
  loop_state *s = a->s;
  in_loop = 1;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    // Items past a failure are not started: the error to return is already the lowest one's or a lower
    // item still running will replace it.
    int item = s->next < s->failed_item ? s->next++ : s->n;
    pthread_mutex_unlock(&s->mu);
    if (item >= s->n) break;
    sr_error e;
    sr_error_clear(&e);
    int rc = s->fn(s->ctx, item, a->thread, &e);
    if (rc) {
      pthread_mutex_lock(&s->mu);
      if (item < s->failed_item) {
        s->failed_item = item;
        s->err = e;
        s->rc = rc;
      }
      pthread_mutex_unlock(&s->mu);
    }
  }
  return NULL;
}

int sr_parallel_for(int n, int threads, sr_item_fn fn, void *ctx, sr_error *e) {
  if (n <= 0) return SR_OK;
  if (threads > n) threads = n;
  if (in_loop) threads = 1;
  if (threads <= 1) {
    for (int i = 0; i < n; i++) {
      int rc = fn(ctx, i, 0, e);
      if (rc) return rc;
    }
    return SR_OK;
  }
  loop_state s;
  memset(&s, 0, sizeof s);
  s.fn = fn;
  s.ctx = ctx;
  s.n = n;
  s.failed_item = n;
  pthread_mutex_init(&s.mu, NULL);
  pthread_t th[256];
  worker_arg args[256];
  int started = 0;
  for (int t = 1; t < threads && t < 256; t++) {
    args[t] = (worker_arg){&s, t};
    if (pthread_create(&th[t], NULL, worker, &args[t]) != 0) break;
    started = t;
  }
  args[0] = (worker_arg){&s, 0};
  worker(&args[0]);  // the caller is thread 0
  in_loop = 0;
  for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
  pthread_mutex_destroy(&s.mu);
  if (s.rc) {
    *e = s.err;
    return s.rc;
  }
  return SR_OK;
}

struct sr_ordered {
  sr_item_fn fn;
  void *ctx;
  int n;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int ready, stop;  // items [0, ready) handed over; stop: no more will be (under mu)
  int done, rc;     // items done; the failing item's code (its error in e)
  sr_error e;
  pthread_t thread;
};

static void *ordered_worker(void *p) {
  sr_ordered *o = p;
  for (int item = 0; item < o->n && !o->rc; item++) {
    pthread_mutex_lock(&o->mu);
    while (o->ready <= item && !o->stop) pthread_cond_wait(&o->cv, &o->mu);
    int go = o->ready > item;
    pthread_mutex_unlock(&o->mu);
    if (!go) break;
    if (!(o->rc = o->fn(o->ctx, item, 0, &o->e))) o->done = item + 1;
  }
  return NULL;
}

sr_ordered *sr_ordered_start(int n, sr_item_fn fn, void *ctx) {
  sr_ordered *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->fn = fn, o->ctx = ctx, o->n = n;
  sr_error_clear(&o->e);
  pthread_mutex_init(&o->mu, NULL);
  pthread_cond_init(&o->cv, NULL);
  if (pthread_create(&o->thread, NULL, ordered_worker, o) == 0) return o;
  pthread_mutex_destroy(&o->mu);
  pthread_cond_destroy(&o->cv);
  free(o);
  return NULL;
}

static void ordered_signal(sr_ordered *o, int ready, int stop) {
  pthread_mutex_lock(&o->mu);
  if (ready > o->ready) o->ready = ready;
  o->stop |= stop;
  pthread_cond_signal(&o->cv);
  pthread_mutex_unlock(&o->mu);
}

void sr_ordered_hand(sr_ordered *o, int ready) { ordered_signal(o, ready, 0); }

int sr_ordered_finish(sr_ordered *o, int *done, sr_error *e) {
  ordered_signal(o, 0, 1);
  pthread_join(o->thread, NULL);
  int rc = o->rc;
  if (rc) *e = o->e;
  *done = o->done;
  pthread_mutex_destroy(&o->mu);
  pthread_cond_destroy(&o->cv);
  free(o);
  return rc;
}

typedef struct {
  sr_item_fn work;
  sr_commit_fn commit;
  void *ctx;
  int n, window;
  pthread_mutex_t mu;
  pthread_cond_t cv;      // a commit made room, or an item failed
  int next;               // next item to take
  int committed;          // items [0, committed) committed
  int committing;         // a thread is committing
  unsigned char *done;    // [window] the work of the item in the slot is done
  int failed_item;        // lowest failing item so far (n: none)
  sr_error err;
  int rc;
} pipe_state;

typedef struct {
  pipe_state *s;
  int thread;
} pipe_arg;

// Record item's failure (under mu).
static void pipe_fail(pipe_state *s, int item, int rc, const sr_error *e) {
  if (item < s->failed_item) {
    s->failed_item = item;
    s->err = *e;
    s->rc = rc;
  }
  pthread_cond_broadcast(&s->cv);
}

// Commit every item whose work is done, in order, unless another thread is at it (under mu; mu is released
// around each commit).
static void pipe_commit_ready(pipe_state *s) {
  if (s->committing) return;
  s->committing = 1;
  while (s->committed < s->n && s->committed < s->failed_item && s->done[s->committed % s->window]) {
    int item = s->committed;
    pthread_mutex_unlock(&s->mu);
    sr_error e;
    sr_error_clear(&e);
    int rc = s->commit(s->ctx, item, &e);
    pthread_mutex_lock(&s->mu);
    if (rc) {
      pipe_fail(s, item, rc, &e);
      break;
    }
    s->done[item % s->window] = 0;
    s->committed = item + 1;
    pthread_cond_broadcast(&s->cv);
  }
  s->committing = 0;
}

static void *pipe_worker(void *p) {
  pipe_arg *a = p;
  pipe_state *s = a->s;
  in_loop = 1;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    if (s->next >= s->n || s->next >= s->failed_item) break;
    int item = s->next++;
    while (item - s->committed >= s->window && item < s->failed_item) pthread_cond_wait(&s->cv, &s->mu);
    if (item >= s->failed_item) break;
    pthread_mutex_unlock(&s->mu);
    sr_error e;
    sr_error_clear(&e);
    int rc = s->work(s->ctx, item, a->thread, &e);
    pthread_mutex_lock(&s->mu);
    if (rc) {
      pipe_fail(s, item, rc, &e);
      continue;
    }
    s->done[item % s->window] = 1;
    pipe_commit_ready(s);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int sr_pipeline(int n, int threads, int window, sr_item_fn work, sr_commit_fn commit, void *ctx, sr_error *e) {
  if (n <= 0) return SR_OK;
  if (window < 1) window = 1;
  if (threads > window) threads = window;
  if (threads > n) threads = n;
  if (in_loop) threads = 1;
  if (threads <= 1) {
    for (int i = 0; i < n; i++) {
      int rc = work(ctx, i, 0, e);
      if (rc || (rc = commit(ctx, i, e))) return rc;
    }
    return SR_OK;
  }
  pipe_state s;
  memset(&s, 0, sizeof s);
  s.work = work, s.commit = commit, s.ctx = ctx, s.n = n, s.window = window, s.failed_item = n;
  if (!(s.done = calloc((size_t)window, 1))) return sr_internal_error(e, 0, "parallel: out of memory");
  pthread_mutex_init(&s.mu, NULL);
  pthread_cond_init(&s.cv, NULL);
  pthread_t th[256];
  pipe_arg args[256];
  int started = 0;
  for (int t = 1; t < threads && t < 256; t++) {
    args[t] = (pipe_arg){&s, t};
    if (pthread_create(&th[t], NULL, pipe_worker, &args[t]) != 0) break;
    started = t;
  }
  args[0] = (pipe_arg){&s, 0};
  pipe_worker(&args[0]);  // the caller is thread 0
  in_loop = 0;
  for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
  pthread_cond_destroy(&s.cv);
  pthread_mutex_destroy(&s.mu);
  free(s.done);
  if (s.rc) {
    *e = s.err;
    return s.rc;
  }
  return SR_OK;
}
