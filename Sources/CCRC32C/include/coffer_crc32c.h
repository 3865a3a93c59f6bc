// CRC-32C (Castagnoli) for CofferCore's journal frames: the CPU's CRC-32C instruction where
// there is one (x86_64 SSE4.2, AArch64 CRC32), else a portable slicing-by-8 table.
#ifndef COFFER_CRC32C_H
#define COFFER_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// The CRC-32C of `length` bytes at `data`, continuing from `crc` (start with 0): the usual
/// pre- and post-inversion is done here, so `coffer_crc32c(coffer_crc32c(0, a, n), b, m)` is the
/// CRC of `a` followed by `b`. `data` may be NULL when `length` is 0 (the result is then `crc`).
/// Uses the hardware instruction when `coffer_crc32c_hardware()` says so, else the portable code.
uint32_t coffer_crc32c(uint32_t crc, const void *data, size_t length);

/// The same function, always computed with the portable table (for tests and comparisons).
uint32_t coffer_crc32c_portable(uint32_t crc, const void *data, size_t length);

/// 1 when `coffer_crc32c` uses a CRC-32C instruction on this CPU, else 0. Decided once, at the
/// first call, then cached.
int coffer_crc32c_hardware(void);

#ifdef __cplusplus
}
#endif

#endif
