// data.c — token files, the byte-level tokenizer and the passkey retrieval generator.
#include "train/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/util.h"

// ---- token streams ----------------------------------------------------------------------------

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

int64_t data_bytes_encode(const unsigned char *text, int64_t n, int32_t *out) {
  for (int64_t i = 0; i < n; i++) out[i] = text[i];
  return n;
}

int64_t data_bytes_decode(const int32_t *tokens, int64_t n, char *out) {
  for (int64_t i = 0; i < n; i++) out[i] = tokens[i] >= 0 && tokens[i] < 256 ? (char)tokens[i] : '?';
  return n;
}

int data_from_text(const char *text, int64_t n, const char *name, data_tokens *d, sr_error *e) {
  memset(d, 0, sizeof *d);
  if (n < 2) return sr_input_error(e, name, NULL, "needs at least 2 bytes of text, has %lld", (long long)n);
  d->tokens = malloc((size_t)n * sizeof(int32_t));
  if (!d->tokens) return sr_internal_error(e, 0, "%s: out of memory", name);
  d->n = data_bytes_encode((const unsigned char *)text, n, d->tokens);
  for (int64_t i = 0; i < n; i++)
    if (d->tokens[i] > d->max_token) d->max_token = d->tokens[i];
  snprintf(d->path, sizeof d->path, "%s", name);
  snprintf(d->format, sizeof d->format, "text");
  return SR_OK;
}

int data_load(const char *path, const char *format, data_tokens *d, sr_error *e) {
  memset(d, 0, sizeof *d);
  const char *f = format && *format ? format : "auto";
  if (strcmp(f, "auto") == 0)
    f = ends_with(path, ".u16") || ends_with(path, ".bin16")   ? "u16"
        : ends_with(path, ".u32") || ends_with(path, ".bin32") ? "u32"
                                                               : "text";
  if (strcmp(f, "u16") != 0 && strcmp(f, "u32") != 0 && strcmp(f, "text") != 0)
    return sr_input_error(e, path, "format", "'%s' is not one of auto, u16, u32, text", f);
  char *raw = NULL;
  size_t n = 0;
  int rc = sr_read_file(path, &raw, &n, e);
  if (rc) return rc;
  if (strcmp(f, "text") == 0) {
    rc = data_from_text(raw, (int64_t)n, path, d, e);
    free(raw);
    return rc;
  }
  size_t w = strcmp(f, "u16") == 0 ? 2 : 4;
  if (n % w != 0) {
    free(raw);
    return sr_input_error(e, path, NULL, "%zu bytes is not a whole number of %zu-byte tokens", n, w);
  }
  int64_t count = (int64_t)(n / w);
  if (count < 2) {
    free(raw);
    return sr_input_error(e, path, NULL, "needs at least 2 tokens, has %lld", (long long)count);
  }
  d->tokens = malloc((size_t)count * sizeof(int32_t));
  if (!d->tokens) {
    free(raw);
    return sr_internal_error(e, 0, "%s: out of memory for %lld tokens", path, (long long)count);
  }
  const unsigned char *b = (const unsigned char *)raw;
  for (int64_t i = 0; i < count; i++) {
    uint32_t v = w == 2 ? (uint32_t)(b[2 * i] | b[2 * i + 1] << 8)
                        : (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 |
                              (uint32_t)b[4 * i + 3] << 24;
    if (v > INT32_MAX) {
      free(raw);
      data_free(d);
      return sr_input_error(e, path, NULL, "token %lld is %u, beyond any vocabulary", (long long)i, v);
    }
    d->tokens[i] = (int32_t)v;
    if (d->tokens[i] > d->max_token) d->max_token = d->tokens[i];
  }
  free(raw);
  d->n = count;
  snprintf(d->path, sizeof d->path, "%s", path);
  snprintf(d->format, sizeof d->format, "%s", f);
  return SR_OK;
}

void data_free(data_tokens *d) {
  free(d->tokens);
  memset(d, 0, sizeof *d);
}

int data_sequence(const data_tokens *d, int64_t index, int64_t seq, int32_t *tokens, int32_t *targets, sr_error *e) {
  if (d->n < 2) return sr_input_error(e, d->path, NULL, "needs at least 2 tokens");
  if (seq <= 0 || index < 0) return sr_input_error(e, d->path, "seq", "sequence %lld of length %lld", (long long)index, (long long)seq);
  // (index * seq) mod n without overflow for long runs
  int64_t start = (int64_t)(((unsigned __int128)index * (unsigned __int128)seq) % (unsigned __int128)d->n);
  for (int64_t j = 0; j < seq; j++) {
    tokens[j] = d->tokens[(start + j) % d->n];
    targets[j] = d->tokens[(start + j + 1) % d->n];
  }
  return SR_OK;
}

int64_t data_heldout_tokens(const data_tokens *d, int64_t seq) {
  int64_t h = sr_max64(seq + 1, d->n / 20);
  return seq > 0 && d->n - h >= 2 ? h : 0;
}

int data_train_sequence(const data_tokens *d, int64_t index, int64_t seq, int32_t *tokens, int32_t *targets, sr_error *e) {
  data_tokens train = *d;
  train.n = d->n - data_heldout_tokens(d, seq);
  return data_sequence(&train, index, seq, tokens, targets, e);
}

static uint64_t mix64(uint64_t z) {  // splitmix64 finaliser: decorrelates (seed, index) pairs
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int data_heldout_sequence(const data_tokens *d, int64_t index, int64_t seq, uint64_t seed, int32_t *tokens,
                          int32_t *targets, sr_error *e) {
  int64_t h = data_heldout_tokens(d, seq);
  if (h == 0)
    return sr_input_error(e, d->path, NULL, "%lld tokens hold no held-out window of %lld tokens apart from the "
                          "training text (need at least %lld)", (long long)d->n, (long long)seq, (long long)(seq + 3));
  // a window and its next-token targets inside [n - h, n): starts n - h .. n - seq - 1
  int64_t start = d->n - h + (int64_t)(mix64(seed ^ mix64((uint64_t)index)) % (uint64_t)(h - seq));
  for (int64_t j = 0; j < seq; j++) {
    tokens[j] = d->tokens[start + j];
    targets[j] = d->tokens[start + j + 1];
  }
  return SR_OK;
}

// ---- passkey retrieval ------------------------------------------------------------------------

// The prompt of the Landmark Attention paper's passkey task (and LongLoRA / YaRN evaluations).
static const char passkey_intro[] =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.\n";
static const char passkey_filler[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
static const char passkey_question[] = "\nWhat is the pass key? The pass key is ";

static int64_t key_sentence(char *out, size_t size, const char *key) {
  return snprintf(out, size, "The pass key is %s. Remember it. %s is the pass key. ", key, key);
}

int64_t data_passkey_min_seq(int digits) {
  char key[32] = {0}, sent[160];
  memset(key, '0', (size_t)(digits > 0 && digits < 31 ? digits : 1));
  return (int64_t)(sizeof passkey_intro - 1) + key_sentence(sent, sizeof sent, key) +
         (int64_t)(sizeof passkey_question - 1) + digits;
}

int data_passkey(int64_t seq, double depth, int digits, uint64_t seed, passkey_loss loss, int32_t *tokens,
                 int32_t *targets, int64_t *answer_start, sr_error *e) {
  if (digits < 1 || digits > 30) return sr_input_error(e, "passkey", "digits", "%d is not in 1..30", digits);
  if (loss != PASSKEY_LOSS_ANSWER && loss != PASSKEY_LOSS_ALL && loss != PASSKEY_LOSS_KEYS)
    return sr_input_error(e, "passkey", "loss", "%d is not a per-sample loss (answer, all or keys)", (int)loss);
  if (!(depth >= 0.0 && depth <= 1.0)) return sr_input_error(e, "passkey", "depth", "%g is not in [0, 1]", depth);
  int64_t need = data_passkey_min_seq(digits);
  if (seq < need)
    return sr_input_error(e, "passkey", "seq", "%lld tokens cannot hold the prompt (needs >= %lld)", (long long)seq,
                          (long long)need);
  // the key: digits drawn by a 64-bit LCG (Knuth MMIX constants), first digit nonzero
  char key[32] = {0};
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  for (int i = 0; i < digits; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int dgt = (int)((s >> 33) % (i == 0 ? 9 : 10));
    key[i] = (char)('0' + dgt + (i == 0));
  }
  char sent[160];
  int64_t ns = key_sentence(sent, sizeof sent, key);
  int64_t ni = (int64_t)sizeof passkey_intro - 1, nq = (int64_t)sizeof passkey_question - 1;
  int64_t nf = (int64_t)sizeof passkey_filler - 1;
  int64_t filler = seq - need, before = (int64_t)(depth * (double)filler + 0.5);
  int64_t t = 0;
  for (int64_t i = 0; i < ni; i++) tokens[t++] = (unsigned char)passkey_intro[i];
  for (int64_t i = 0; i < before; i++) tokens[t++] = (unsigned char)passkey_filler[i % nf];
  // the repeat's first digit sits at "The pass key is NNNNN. Remember it. " into the sentence
  int64_t repeat = t + (int64_t)strlen("The pass key is . Remember it. ") + digits;
  for (int64_t i = 0; i < ns; i++) tokens[t++] = (unsigned char)sent[i];
  for (int64_t i = before; i < filler; i++) tokens[t++] = (unsigned char)passkey_filler[i % nf];
  for (int64_t i = 0; i < nq; i++) tokens[t++] = (unsigned char)passkey_question[i];
  *answer_start = t;
  for (int i = 0; i < digits; i++) tokens[t++] = (unsigned char)key[i];
  for (int64_t j = 0; j < seq; j++) {
    int take = j + 1 < seq && (loss == PASSKEY_LOSS_ALL || data_passkey_is_answer(j, *answer_start, digits) ||
                               (loss == PASSKEY_LOSS_KEYS && data_passkey_is_answer(j, repeat, digits)));
    targets[j] = take ? tokens[j + 1] : -1;
  }
  return SR_OK;
}

int data_passkey_is_answer(int64_t t, int64_t answer_start, int digits) {
  return t >= answer_start - 1 && t < answer_start + digits - 1;
}

int64_t data_count_mispredicted(const int32_t *argmax, const int32_t *targets, int64_t n) {
  int64_t bad = 0;
  for (int64_t t = 0; t < n; t++) bad += targets[t] >= 0 && argmax[t] != targets[t];
  return bad;
}
