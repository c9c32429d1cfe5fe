// replay.c — a small stand-in for libFuzzer's driver, so every harness of tests/fuzz/ runs in `make test` on
// machines without clang's libFuzzer (CI): each file of the seed corpus once, then mutations of them until a
// number of runs or seconds is reached. The mutations are libFuzzer's simplest (bit flips, interesting bytes,
// inserted, erased and repeated ranges, dictionary tokens, crossover of two inputs), drawn from a fixed seed,
// so a run is reproducible. A crash, an abort or a hang (10 s) writes the input that caused it to
// crash-PID (timeout-PID) in the current directory before the process dies.
//
//   replay-NAME [-runs N] [-seconds S] [-seed X] [-max_len B] CORPUS_DIR_OR_FILE...
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "tests/fuzz/fuzz.h"

typedef struct {
  uint8_t *data;
  size_t size;
} input;

static input *corpus;
static int n_corpus, cap_corpus;
static const uint8_t *current;  // the input being run, for the crash handler
static size_t current_size;

// Tokens of the formats the harnesses read, spliced in by the mutator.
static const char *const dict[] = {"{",       "}",      "[",         "]",          "\"",      ":",       ",",     "null",
                                   "true",    "false",  "-1",        "0",          "1e400",   "1e-320",  "nan",   "4294967297",
                                   "\"seq\"", "\"step\"", "\"dtype\"", "\"shape\"", "\"F32\"", "\"BF16\"", "\"data_offsets\"",
                                   "\"__metadata__\"", "vs-topp:", "window:", "block:", "dense", ":", "\\u0000"};

static void add_input(const uint8_t *d, size_t n) {
  if (n_corpus == cap_corpus) {
    cap_corpus = cap_corpus ? 2 * cap_corpus : 16;
    corpus = realloc(corpus, (size_t)cap_corpus * sizeof *corpus);
    if (!corpus) exit(2);
  }
  input *in = &corpus[n_corpus++];
  in->data = malloc(n ? n : 1);
  if (!in->data) exit(2);
  if (n) memcpy(in->data, d, n);
  in->size = n;
}

static void add_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return;
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0, r;
  uint8_t chunk[65536];
  while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (n + r > cap) {
      cap = 2 * (n + r);
      buf = realloc(buf, cap);
      if (!buf) exit(2);
    }
    memcpy(buf + n, chunk, r);
    n += r;
  }
  fclose(f);
  add_input(buf, n);
  free(buf);
}

static void add_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: %s: no such file or directory\n", path);
    exit(2);
  }
  if (!S_ISDIR(st.st_mode)) return add_file(path);
  DIR *d = opendir(path);
  struct dirent *de;
  char p[4096];
  // sorted, so the runs do not depend on the directory's order
  char **names = NULL;
  int n = 0;
  while (d && (de = readdir(d)))
    if (de->d_name[0] != '.') {
      names = realloc(names, (size_t)(n + 1) * sizeof *names);
      names[n++] = strdup(de->d_name);
    }
  if (d) closedir(d);
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
      char *t = names[j];
      names[j] = names[j - 1], names[j - 1] = t;
    }
  for (int i = 0; i < n; i++) {
    snprintf(p, sizeof p, "%s/%s", path, names[i]);
    add_file(p);
    free(names[i]);
  }
  free(names);
}

static uint64_t rng;
static uint64_t next(void) {  // splitmix64
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static size_t below(size_t n) { return n ? (size_t)(next() % n) : 0; }

// One mutation of buf (size *n, capacity cap) in place.
static void mutate_once(uint8_t *buf, size_t *n, size_t cap) {
  static const uint8_t interesting[] = {0, 1, 0x7F, 0x80, 0xFF, '0', '9', '-', '.', 'e', ' ', '\n', '"', '{', '}'};
  size_t len = *n;
  switch (next() % 8) {
    case 0:  // flip a bit
      if (len) buf[below(len)] ^= (uint8_t)(1u << (next() % 8));
      break;
    case 1:  // an interesting byte
      if (len) buf[below(len)] = interesting[below(sizeof interesting)];
      break;
    case 2: {  // erase a range
      if (!len) break;
      size_t at = below(len), k = 1 + below(len - at < 16 ? len - at : 16);
      memmove(buf + at, buf + at + k, len - at - k);
      *n = len - k;
      break;
    }
    case 3: {  // insert random bytes
      size_t k = 1 + below(8), at = below(len + 1);
      if (len + k > cap) break;
      memmove(buf + at + k, buf + at, len - at);
      for (size_t i = 0; i < k; i++) buf[at + i] = (uint8_t)next();
      *n = len + k;
      break;
    }
    case 4: {  // repeat a range
      if (!len) break;
      size_t at = below(len), k = 1 + below(len - at < 64 ? len - at : 64), to = below(len + 1);
      if (len + k > cap) break;
      uint8_t tmp[64];
      memcpy(tmp, buf + at, k);
      memmove(buf + to + k, buf + to, len - to);
      memcpy(buf + to, tmp, k);
      *n = len + k;
      break;
    }
    case 5: {  // a dictionary token
      const char *t = dict[below(sizeof dict / sizeof *dict)];
      size_t k = strlen(t), at = below(len + 1);
      if (len + k > cap) break;
      memmove(buf + at + k, buf + at, len - at);
      memcpy(buf + at, t, k);
      *n = len + k;
      break;
    }
    case 6: {  // crossover: the tail of another input
      const input *o = &corpus[below((size_t)n_corpus)];
      if (!o->size) break;
      size_t at = below(len + 1), from = below(o->size), k = o->size - from;
      if (at + k > cap) k = cap - at;
      memcpy(buf + at, o->data + from, k);
      *n = at + k;
      break;
    }
    default: {  // a little-endian integer field changed (header lengths, counts)
      if (len < 8) break;
      size_t at = below(len - 7);
      uint64_t v;
      memcpy(&v, buf + at, 8);
      v += (uint64_t)((int64_t)below(33) - 16);
      memcpy(buf + at, &v, 8);
      break;
    }
  }
}

static void dump(const char *kind) {
  char name[64];
  int n = snprintf(name, sizeof name, "%s-%d", kind, (int)getpid());
  int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    if (current_size && write(fd, current, current_size) < 0) { /* nothing more to do in a dying process */ }
    close(fd);
  }
  if (write(2, "replay: input saved as ", 23) < 0 || write(2, name, (size_t)n) < 0 || write(2, "\n", 1) < 0) {}
}

static void on_crash(int sig) {
  dump(sig == SIGALRM ? "timeout" : "crash");
  signal(sig, SIG_DFL);
  raise(sig == SIGALRM ? SIGABRT : sig);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run(const uint8_t *d, size_t n) {
  current = d, current_size = n;
  struct itimerval t = {{0, 0}, {10, 0}};  // a hang is an input of its own
  setitimer(ITIMER_REAL, &t, NULL);
  LLVMFuzzerTestOneInput(d, n);
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
}

int main(int argc, char **argv) {
  long long runs = 10000, seed = 1;
  double seconds = 1e9;
  size_t max_len = 65536;
  const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-runs") && i + 1 < argc) runs = atoll(argv[++i]);
    else if (!strcmp(argv[i], "-seconds") && i + 1 < argc) seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "-seed") && i + 1 < argc) seed = atoll(argv[++i]);
    else if (!strcmp(argv[i], "-max_len") && i + 1 < argc) max_len = (size_t)atoll(argv[++i]);
    else add_path(argv[i]);
  }
  if (!n_corpus) {
    fprintf(stderr, "usage: %s [-runs N] [-seconds S] [-seed X] [-max_len B] CORPUS_DIR_OR_FILE...\n", name);
    return 2;
  }
  signal(SIGSEGV, on_crash), signal(SIGABRT, on_crash), signal(SIGBUS, on_crash), signal(SIGFPE, on_crash);
  signal(SIGILL, on_crash), signal(SIGALRM, on_crash);
  double t0 = now();
  for (int i = 0; i < n_corpus; i++) run(corpus[i].data, corpus[i].size);
  rng = (uint64_t)seed;
  uint8_t *buf = malloc(max_len);
  if (!buf) return 2;
  long long done = 0;
  for (; done < runs && now() - t0 < seconds; done++) {
    const input *base = &corpus[below((size_t)n_corpus)];
    size_t n = base->size < max_len ? base->size : max_len;
    memcpy(buf, base->data, n);
    for (int k = 1 + (int)below(4); k > 0; k--) mutate_once(buf, &n, max_len);
    run(buf, n);
  }
  printf("replay %s: %d corpus inputs and %lld mutations in %.1f s, no failure\n", name, n_corpus, done, now() - t0);
  free(buf);
  return 0;
}
