// train_fixture.h — what the trainer tests share: a repeated sentence to learn, and attention through the model's
// callback (one process, positions 0..T-1, dense) that counts its calls, in all and a layer at a time.
#ifndef SR_TRAIN_FIXTURE_H
#define SR_TRAIN_FIXTURE_H

#include <math.h>
#include <string.h>

#include "exec/dense_ref.h"
#include "plan/pattern.h"
#include "tests/test.h"
#include "train/train.h"

// A 45-byte sentence repeated 20 times, with "fox" as the passkey word the data reader wants.
static inline data_tokens repetitive_text(void) {
  static char buf[2048];
  const char *sentence = "the quick brown fox jumps over the lazy dog. ";
  buf[0] = 0;
  for (int i = 0; i < 20; i++) strcat(buf, sentence);
  data_tokens d;
  sr_error e = {0};
  data_from_text(buf, (int64_t)strlen(buf), "fox", &d, &e);
  return d;
}

#define COUNTED_LAYERS 8  // layers whose forwards are counted one by one
typedef struct {
  pattern dense;
  const model_config *c;
  int fwd, bwd;                    // calls in all
  int fwd_layer[COUNTED_LAYERS];   // forwards of each of the first layers
} counting_attn;

static inline int counted_fwd(void *ctx, int layer, int64_t T, const float *q, const float *k, const float *v, float *o,
                              float *lse, sr_error *e) {
  counting_attn *a = ctx;
  a->fwd++;
  if (layer < COUNTED_LAYERS) a->fwd_layer[layer]++;
  int d = (int)a->c->head_dim;
  return dense_attn_fwd(&a->dense, layer, T, (int)a->c->num_heads, (int)a->c->num_kv_heads, d, 1.0f / sqrtf((float)d), q,
                        k, v, o, lse)
             ? sr_internal_error(e, 0, "dense reference: out of memory")
             : SR_OK;
}

static inline int counted_bwd(void *ctx, int layer, int64_t T, const float *q, const float *k, const float *v,
                              const float *o, const float *lse, const float *dout, float *dq, float *dk, float *dv,
                              sr_error *e) {
  counting_attn *a = ctx;
  a->bwd++;
  int d = (int)a->c->head_dim;
  return dense_attn_bwd(&a->dense, layer, T, (int)a->c->num_heads, (int)a->c->num_kv_heads, d, 1.0f / sqrtf((float)d), q,
                        k, v, o, lse, dout, dq, dk, dv)
             ? sr_internal_error(e, 0, "dense reference: out of memory")
             : SR_OK;
}

// Route trainer t's attention through ca over `tokens` tokens (dense over the model's layers and heads).
static inline int counting_attn_attach(counting_attn *ca, trainer *t, int64_t tokens, sr_error *e) {
  memset(ca, 0, sizeof *ca);
  ca->c = &t->model.cfg;
  int rc = pattern_alloc(&ca->dense, tokens, (int)ca->c->num_layers, (int)ca->c->num_heads, e);
  if (!rc) t->model.attn = (model_attention){ca, counted_fwd, counted_bwd, NULL};
  return rc;
}

// tiny-test with 4 layers on 40 tokens under selective recomputation: attention's output kept by the first `keep`
// layers (-1: all), the first `whole` layers kept whole, the MLP in chunks of `mlp_chunk` tokens (0: the default),
// attention through ca. The recomputation tests train copies of it with different choices and compare them bit for bit.
static inline int keep_trainer(trainer *t, const data_tokens *d, int64_t keep, int64_t whole, int64_t mlp_chunk,
                               counting_attn *ca) {
  model_config c;
  sr_error e = {0};
  if (model_load("tiny-test", &c, &e) != SR_OK) {
    test_fail(__FILE__, __LINE__, "%s", e.msg);
    return -1;
  }
  c.num_layers = 4;
  train_options o;
  train_options_defaults(&o);
  o.seq = 40;
  o.data = d;
  o.lr = 3e-3;
  o.recompute = MODEL_RECOMPUTE_KEEP_ATTN;
  o.keep_layers = keep;
  o.keep_all = whole;
  if (mlp_chunk) o.mlp_chunk = mlp_chunk;
  int64_t pos[40];
  for (int64_t i = 0; i < 40; i++) pos[i] = i;
  int rc = trainer_create(t, &c, &o, NULL, 40, pos, &e);
  if (rc) {
    test_fail(__FILE__, __LINE__, "%s", e.msg);
    return rc;
  }
  if ((rc = counting_attn_attach(ca, t, 40, &e))) test_fail(__FILE__, __LINE__, "%s", e.msg);
  return rc;
}

#endif
