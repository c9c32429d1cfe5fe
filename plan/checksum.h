// checksum.h — CRC32C (Castagnoli, the iSCSI / ext4 / Btrfs checksum), for files that must never be read
// back silently changed (training checkpoints: train/ckpt.h).
//
// Polynomial 0x1EDC6F41, reflected (0x82F63B78), initial value and final XOR 0xFFFFFFFF, so crc32c of
// "123456789" is 0xE3069283 (RFC 3720, appendix B.4). x86-64 processors with SSE4.2 compute it with the
// crc32 instruction (about 8 bytes a cycle); elsewhere, and when asked, eight 256-entry tables ("slicing
// by 8", Kounavis & Berry 2005) do, with the same result.
#ifndef SR_CHECKSUM_H
#define SR_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

// CRC32C of n bytes continuing a previous value (0 to start): sr_crc32c(sr_crc32c(0, a), b) equals the
// CRC32C of a followed by b.
uint32_t sr_crc32c(uint32_t crc, const void *data, size_t n);
// The same by the tables alone, whatever the processor (for tests that compare the two ways).
uint32_t sr_crc32c_portable(uint32_t crc, const void *data, size_t n);

#endif
