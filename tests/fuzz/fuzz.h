// fuzz.h — what every harness of tests/fuzz/ shares. A harness defines LLVMFuzzerTestOneInput: any byte string
// fed to one parser must give SR_OK or an error, never a crash, a leak, a hang or undefined behaviour. It is
// built two ways: against libFuzzer (clang -fsanitize=fuzzer,address,undefined: tests/fuzz/run.sh, the long
// campaigns) and against tests/fuzz/replay.c (any C compiler: `make test` runs its seed corpus plus a fixed
// number of mutations, under ASan/UBSan with SAN=1).
#ifndef SR_FUZZ_H
#define SR_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The input as a NUL-terminated string (the text parsers take one); free it.
static inline char *fuzz_text(const uint8_t *data, size_t size) {
  char *t = malloc(size + 1);
  if (!t) return NULL;
  if (size) memcpy(t, data, size);
  t[size] = '\0';
  return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
