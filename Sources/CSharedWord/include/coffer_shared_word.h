// Atomic loads and stores of 64-bit words in memory shared between processes (a MAP_SHARED
// mapping of a journal's lock file), and the file system type that decides whether to map. Swift's `Atomic` must own its storage, so it cannot be
// placed at an address inside a mapping; these are the C11/GCC builtins, inlined.
#ifndef COFFER_SHARED_WORD_H
#define COFFER_SHARED_WORD_H

#include <stddef.h>
#include <stdint.h>

// Each word must be one atomic access in every process; where 64-bit atomics would need a lock
// (some 32-bit targets) that lock would not be shared between processes.
_Static_assert(__atomic_always_lock_free(sizeof(uint64_t), 0), "64-bit atomics must be lock-free");

/// Loads the aligned word at `word` with acquire ordering: later reads (of the journal file)
/// see everything written before the matching release store.
static inline uint64_t coffer_shared_load(const void *word) {
    return __atomic_load_n((const uint64_t *)word, __ATOMIC_ACQUIRE);
}

/// Stores `value` to the aligned word at `word` with release ordering.
static inline void coffer_shared_store(void *word, uint64_t value) {
    __atomic_store_n((uint64_t *)word, value, __ATOMIC_RELEASE);
}

/// Adds 1 to the aligned word at `word`, atomically.
static inline void coffer_shared_increment(void *word) {
    __atomic_add_fetch((uint64_t *)word, 1, __ATOMIC_ACQ_REL);
}

/// Subtracts 1 from the aligned word at `word` unless it is 0, atomically.
static inline void coffer_shared_decrement(void *word) {
    uint64_t value = __atomic_load_n((uint64_t *)word, __ATOMIC_ACQUIRE);
    while (value != 0 &&
           !__atomic_compare_exchange_n((uint64_t *)word, &value, value - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    }
}

/// The file system type (`statfs.f_type`) of the file open as `fd`, in `*type`: 0 on success,
/// else -1 with errno set. Linux only (elsewhere it fails with ENOSYS): telling file systems that
/// several hosts share (NFS, …), where a shared mapping is not kept in step between processes.
int coffer_file_system_type(int fd, uint64_t *type);

/// Copies one commit's frames (`count` bytes laid out as the journal writes them: a 12-byte
/// header whose first word's low 30 bits are the payload's length, then the payload) to
/// `destination` inside a shared file mapping, where the bytes are zero; `limit` is the file's
/// end in the mapping, and the bytes before `destination` are the journal's.
///
/// A kill can stop a copy between any two instructions, so the order makes every stop look as
/// the journal's format calls torn: each frame's payload first, then its 12 header bytes in one
/// 16-byte store inside one 4 KiB block (with bytes around them stored unchanged), which no kill
/// splits; a header that crosses a block is stored in two parts, the part past the boundary last.
/// A stop leaves every frame before whole and the next one's header zero, or zero past a sector
/// boundary.
///
/// It survives the file having been truncated under the mapping by another process: the store
/// into a page past the file's end raises SIGBUS, which a handler installed once
/// (`coffer_install_bus_guard`) turns into a return of -1 from this call, on this thread only.
/// Returns 0 on success; -1 on that SIGBUS; -2 where this build has no single 16-byte store;
/// -3 when a header could not be stored so (the file ends too close after it): for -2 and -3
/// nothing was copied, and the caller writes the commit instead.
int coffer_guarded_append(void *destination, const void *frames, size_t count, const void *limit);

/// Whether `coffer_guarded_append` can copy in this build (a 16-byte store exists).
int coffer_guarded_append_supported(void);

/// One 64-bit load (acquire) from a shared mapping of a file another program may truncate: 0, or
/// -1 when the page is past the file's end (the SIGBUS caught as for `coffer_guarded_append`).
int coffer_guarded_load(const void *address, uint64_t *value);

/// Installs the SIGBUS handler behind `coffer_guarded_append` (once per process) and checks that
/// it is still the process's: 0 when it is, else -1 with errno set (EBUSY: a handler installed
/// later replaced it). Only a SIGBUS the kernel raises for the copy's own stores is taken; any
/// other goes to the handler installed before, or to the default action. No guarded append may
/// be attempted unless this returned 0.
int coffer_install_bus_guard(void);

/// A mutex in memory shared between processes (a journal's control page): process-shared and
/// robust, so a process that dies holding it does not leave it held (the next locker is told, and
/// takes it over). Linux with glibc only (the validity check reads glibc's layout): elsewhere
/// the functions fail with ENOSYS and callers keep to `flock`.

/// Bytes a shared mutex takes (at most 64).
size_t coffer_shared_mutex_size(void);

/// Initialises the mutex at `mutex` (8-byte aligned, `coffer_shared_mutex_size()` bytes) unlocked:
/// 0, or an errno. No thread of any process may hold or wait for it meanwhile.
int coffer_shared_mutex_init(void *mutex);

/// Locks the mutex at `mutex`, waiting at most `timeout_ns` nanoseconds (on CLOCK_MONOTONIC; 0:
/// not at all). Returns 0 when locked; 1 when locked after its last holder died holding it (it
/// is made consistent: the caller owns it as usual, and must judge what that holder left);
/// ETIMEDOUT (a thread that holds it waits for itself until then); ENOTRECOVERABLE; or another
/// errno.
int coffer_shared_mutex_lock(void *mutex, int64_t timeout_ns);

/// Whether the bytes at `mutex` are a mutex `coffer_shared_mutex_init` made (its kind, as glibc
/// records it: robust, process-shared and normal): 1 or 0. The bytes live in
/// a file anyone with write access can change, and glibc trusts them: a mutex of another kind
/// (priority-inheriting, not shared, not robust) makes it abort, or lock only within a process.
int coffer_shared_mutex_is_valid(const void *mutex);

/// Unlocks the mutex at `mutex`, which this thread holds: 0, or an errno.
int coffer_shared_mutex_unlock(void *mutex);

#endif