#ifndef COFFER_RANDOM_H
#define COFFER_RANDOM_H

#include <stddef.h>

/// Fills `length` bytes at `buffer` with random bytes from the kernel's generator: through the
/// vDSO's getrandom where the kernel has one (Linux 6.11 and later on x86-64), else the
/// getrandom system call. Returns 0, or -1 when neither is available (the caller then uses
/// another source); never returns fewer bytes than asked.
int coffer_random_fill(void *buffer, size_t length);

/// Whether coffer_random_fill uses the vDSO (for tests and `coffer bench`).
int coffer_random_uses_vdso(void);

#endif
