// Atomic loads and stores of 64-bit words in memory shared between processes (a MAP_SHARED
// mapping of a journal's lock file). Swift's `Atomic` must own its storage, so it cannot be
// placed at an address inside a mapping; these are the C11/GCC builtins, inlined.
#ifndef COFFER_SHARED_WORD_H
#define COFFER_SHARED_WORD_H

#include <stdint.h>

/// Loads the aligned word at `word` with acquire ordering: later reads (of the journal file)
/// see everything written before the matching release store.
static inline uint64_t coffer_shared_load(const void *word) {
    return __atomic_load_n((const uint64_t *)word, __ATOMIC_ACQUIRE);
}

/// Stores `value` to the aligned word at `word` with release ordering.
static inline void coffer_shared_store(void *word, uint64_t value) {
    __atomic_store_n((uint64_t *)word, value, __ATOMIC_RELEASE);
}

#endif
