// check.h — fail-fast checks for the GPU test and benchmark tools (not library code: these exit).
#ifndef SR_KERNELS_TEST_CHECK_H
#define SR_KERNELS_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

// A CUDA runtime call that must succeed: print file:line, the call and CUDA's message, then exit.
#define CK(call)                                                                               \
  do {                                                                                         \
    cudaError_t err_ = (call);                                                                 \
    if (err_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)
// A planner call that must succeed; pass E as its sr_error argument.
#define SR(call)                                                             \
  do {                                                                       \
    sr_error e_;                                                             \
    if ((call) != SR_OK) {                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, e_.msg); \
      exit(1);                                                               \
    }                                                                        \
  } while (0)
#define E (&e_)

#endif
