// checksum.c — CRC32C by the SSE4.2 crc32 instruction or by slicing-by-8 tables (see checksum.h).
#include "plan/checksum.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u  // 0x1EDC6F41 bit-reversed

// table[k][b]: the CRC of byte b followed by k zero bytes, so eight bytes fold in with eight lookups.
static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_build(void) {
  for (uint32_t b = 0; b < 256; b++) {
    uint32_t c = b;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
    table[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; b++)
    for (int k = 1; k < 8; k++) table[k][b] = (table[k - 1][b] >> 8) ^ table[0][table[k - 1][b] & 0xFF];
}

uint32_t sr_crc32c_portable(uint32_t crc, const void *data, size_t n) {
  pthread_once(&table_once, table_build);
  const unsigned char *p = data;
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {  // little-endian loads, as the reflected CRC consumes bytes
    uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    c = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^ table[4][lo >> 24] ^
        table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^ table[0][p[7]];
  }
  while (n--) c = (c >> 8) ^ table[0][(c ^ *p++) & 0xFF];
  return ~c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const void *data, size_t n) {
  const unsigned char *p = data;
  uint64_t c = ~crc;
  for (; n > 0 && ((uintptr_t)p & 7); n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  for (; n > 0; n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
  return ~(uint32_t)c;
}

uint32_t sr_crc32c(uint32_t crc, const void *data, size_t n) {
  return __builtin_cpu_supports("sse4.2") ? crc32c_sse42(crc, data, n) : sr_crc32c_portable(crc, data, n);
}
#else
uint32_t sr_crc32c(uint32_t crc, const void *data, size_t n) { return sr_crc32c_portable(crc, data, n); }
#endif
