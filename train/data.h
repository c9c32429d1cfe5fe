// data.h — what the trainer learns from: token files (uint16 / uint32), plain text through a
// byte-level tokenizer, and a passkey (needle-in-a-haystack) retrieval task with exact-match scoring.
//
// Every source yields whole training sequences of seq tokens plus their next-token targets
// (-1 where no loss is taken), so a context-parallel rank picks its layout's positions from them.
#ifndef SR_DATA_H
#define SR_DATA_H

#include <stdint.h>

#include "plan/error.h"

// A token stream held in memory.
typedef struct {
  int32_t *tokens;
  int64_t n;
  int64_t max_token;   // largest id in the stream (the model's vocabulary must exceed it)
  char path[512];
  char format[8];      // "u16", "u32" or "text"
} data_tokens;

// Load a data file. format: "u16" / "u32" (little-endian token ids), "text" (byte-level: one token per
// byte, vocabulary 256) or "auto" (by extension: .u16/.bin16 -> u16, .u32/.bin32 -> u32, else text).
int data_load(const char *path, const char *format, data_tokens *d, sr_error *e);
// Wrap bytes already in memory as a byte-level token stream (name is used in messages).
int data_from_text(const char *text, int64_t n, const char *name, data_tokens *d, sr_error *e);
// Free a stream.
void data_free(data_tokens *d);
// Byte-level tokenizer: one token per byte (0..255); returns n.
int64_t data_bytes_encode(const unsigned char *text, int64_t n, int32_t *out);
// Byte-level detokenizer: writes n bytes (tokens outside 0..255 become '?'); returns n.
int64_t data_bytes_decode(const int32_t *tokens, int64_t n, char *out);

// Training sequence number `index`: seq tokens from offset index*seq (the stream read cyclically, so any
// stream of two or more tokens serves any seq) and their next tokens as targets.
int data_sequence(const data_tokens *d, int64_t index, int64_t seq, int32_t *tokens, int32_t *targets, sr_error *e);

// Held-out text: the end of the stream, max(seq + 1, n / 20) tokens, is never read by training (so a held-out
// window is text the model has not seen); 0 when the stream is too short to spare that and keep two tokens.
int64_t data_heldout_tokens(const data_tokens *d, int64_t seq);
// Training sequence number `index`: data_sequence over the stream without its held-out end.
int data_train_sequence(const data_tokens *d, int64_t index, int64_t seq, int32_t *tokens, int32_t *targets, sr_error *e);
// Held-out sequence number `index` (seed picks the windows): seq tokens and their targets from inside the
// held-out end; an input error when the stream has none.
int data_heldout_sequence(const data_tokens *d, int64_t index, int64_t seq, uint64_t seed, int32_t *tokens,
                          int32_t *targets, sr_error *e);

// ---- passkey retrieval (Mohtashami & Jaggi 2023, "Landmark Attention", section 4.2) --------------

// Shortest sequence that holds the passkey prompt with `digits` digits and no filler.
int64_t data_passkey_min_seq(int digits);
// A byte-level passkey sample of exactly seq tokens: instruction, filler, the key sentence at `depth`
// (0 = start of the filler, 1 = end), more filler, the question, then the digits. The key is drawn from
// seed. Targets by loss (passkey_loss): the positions that predict the answer digits (exact-match
// scoring), those and the key's repeat inside the key sentence, or every next byte. *answer_start: first
// digit's position.
typedef enum {
  PASSKEY_LOSS_ANSWER = 0,  // the answer digits only
  PASSKEY_LOSS_ALL = 1,     // every position predicts its next byte
  PASSKEY_LOSS_KEYS = 2,    // the answer and the repeat ("... Remember it. NNNNN is the pass key"): the same
                            // retrieval a few tokens from the key, so short samples carry twice the signal
  PASSKEY_LOSS_MIX = 3,     // trainer only: samples alternate between KEYS (even index) and ALL (odd), so
                            // the model also learns to continue the repeated filler (prefix matching, the
                            // mechanism of retrieval) while the digits keep a large share of the gradient
} passkey_loss;
int data_passkey(int64_t seq, double depth, int digits, uint64_t seed, passkey_loss loss, int32_t *tokens,
                 int32_t *targets, int64_t *answer_start, sr_error *e);
// Positions t in [lo, hi) that predict an answer digit (t = answer_start-1 .. answer_start+digits-2).
int data_passkey_is_answer(int64_t t, int64_t answer_start, int digits);
// Mispredicted targets: count of t with targets[t] >= 0 and argmax[t] != targets[t]. A sample is an exact
// match when the count over its answer positions is 0 (greedy decoding then emits the key).
int64_t data_count_mispredicted(const int32_t *argmax, const int32_t *targets, int64_t n);

#endif
