// pthread_mutex_clocklock (glibc 2.30) is a GNU extension.
#define _GNU_SOURCE
#include "coffer_shared_word.h"

#include <errno.h>

#ifdef __linux__
#include <sys/vfs.h>

int coffer_file_system_type(int fd, uint64_t *type) {
    struct statfs info;
    if (fstatfs(fd, &info) != 0) return -1;
    *type = (uint64_t)(unsigned long)info.f_type & 0xFFFFFFFFu;
    return 0;
}
#else
int coffer_file_system_type(int fd, uint64_t *type) {
    (void)fd;
    (void)type;
    errno = ENOSYS;
    return -1;
}
#endif

// MARK: - Copies into a shared mapping that survive a truncated file

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>

// The guarded append running on this thread: its jump buffer (NULL outside a copy) and the
// addresses it stores to. Initial-exec TLS: read from the handler without __tls_get_addr.
#define COFFER_TLS static __thread __attribute__((tls_model("initial-exec")))
COFFER_TLS sigjmp_buf *volatile guarded_copy_target = NULL;
COFFER_TLS unsigned char *volatile guarded_copy_start = NULL;
COFFER_TLS unsigned char *volatile guarded_copy_end = NULL;
static struct sigaction previous_bus_action;
static pthread_once_t bus_guard_once = PTHREAD_ONCE_INIT;
static int bus_guard_status = -1;
static int bus_guard_errno = 0;

static void bus_handler(int signal_number, siginfo_t *info, void *context) {
    sigjmp_buf *target = guarded_copy_target;
    unsigned char *address = (unsigned char *)info->si_addr;
    // Ours only when the kernel raised it for an access by the copy (a page of the mapping past
    // the file's end), not when a process sent SIGBUS (si_code <= 0) or another access faulted.
    if (target != NULL && info->si_code > 0 && address >= guarded_copy_start && address < guarded_copy_end) {
        guarded_copy_target = NULL;
        // The copy was plain stores with nothing to unwind; SA_NODEFER left SIGBUS unblocked,
        // so no signal mask needs restoring (sigsetjmp saved none: no system call per copy).
        siglongjmp(*target, 1);
    }
    // Not ours: whatever would have happened without this handler.
    if (previous_bus_action.sa_flags & SA_SIGINFO) {
        if (previous_bus_action.sa_sigaction != NULL) {
            previous_bus_action.sa_sigaction(signal_number, info, context);
            return;
        }
    } else if (previous_bus_action.sa_handler == SIG_IGN) {
        // Sent by a process and ignored before: still ignored. A fault cannot be ignored.
        if (info->si_code <= 0) return;
    } else if (previous_bus_action.sa_handler != SIG_DFL) {
        previous_bus_action.sa_handler(signal_number);
        return;
    }
    // The default action, now: terminate (with a core dump where allowed), as without this
    // handler. Raised rather than returned into, so that a SIGBUS another process sent is not
    // swallowed. Nothing else of the process's handlers is touched, since it dies here.
    signal(SIGBUS, SIG_DFL);
    raise(SIGBUS);
}

static void install_bus_guard_once(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = bus_handler;
    action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &previous_bus_action) != 0) {
        bus_guard_errno = errno;
        return;
    }
    bus_guard_status = 0;
}

int coffer_install_bus_guard(void) {
    pthread_once(&bus_guard_once, install_bus_guard_once);
    if (bus_guard_status != 0) {
        errno = bus_guard_errno;
        return -1;
    }
    // A handler the host installed since (a crash reporter) replaced this one: say so, so that
    // no mapping is used from now on.
    struct sigaction current;
    if (sigaction(SIGBUS, NULL, &current) != 0) return -1;
    if (!(current.sa_flags & SA_SIGINFO) || current.sa_sigaction != bus_handler) {
        errno = EBUSY;
        return -1;
    }
    return 0;
}

// One 64-bit load from a shared mapping of a file another program may have truncated: 0 and the
// word in `*value`, or -1 when the page is gone (SIGBUS, caught as the copies' faults are). The
// bus guard must be installed (`coffer_install_bus_guard`).
int coffer_guarded_load(const void *address, uint64_t *value) {
    sigjmp_buf target;
    if (sigsetjmp(target, 0) != 0) {
        return -1;
    }
    guarded_copy_start = (unsigned char *)address;
    guarded_copy_end = (unsigned char *)address + 8;
    guarded_copy_target = &target;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    uint64_t word = __atomic_load_n((const uint64_t *)address, __ATOMIC_ACQUIRE);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    guarded_copy_target = NULL;
    *value = word;
    return 0;
}

#if defined(__x86_64__)
#include <immintrin.h>
#define COFFER_HAS_STORE16 1
static inline void store16(unsigned char *destination, const unsigned char *source) {
    _mm_storeu_si128((__m128i *)destination, _mm_loadu_si128((const __m128i *)source));
}
#elif defined(__aarch64__)
#include <arm_neon.h>
#define COFFER_HAS_STORE16 1
static inline void store16(unsigned char *destination, const unsigned char *source) {
    vst1q_u8(destination, vld1q_u8(source));
}
#else
#define COFFER_HAS_STORE16 0
#endif

int coffer_guarded_append_supported(void) { return COFFER_HAS_STORE16; }

// A 16-byte store is one instruction, which a kill cannot split, but one that crosses a page may
// fault on the second page after storing into the first: every store here stays inside one
// 4 KiB block (a page, or a part of a larger page).
#define COFFER_BLOCK 4096u

static inline size_t frame_length(const unsigned char *header) {
    uint32_t word;  // little-endian in the journal
    memcpy(&word, header, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    word = __builtin_bswap32(word);
#endif
    return (size_t)(word & 0x3FFFFFFFu);
}

// Where the 16-byte store that writes the header at `header` starts: inside the header's block,
// covering the 12 bytes, and below `limit` (the file's end). `header` is the header's address.
// Returns NULL when no such store exists: the header crosses a block (handled apart) or the file
// ends too close after it.
static inline unsigned char *header_store(unsigned char *header, const unsigned char *limit) {
    uintptr_t at = (uintptr_t)header;
    uintptr_t block = at & ~(uintptr_t)(COFFER_BLOCK - 1);
    if (at + 12 > block + COFFER_BLOCK) return NULL;
    uintptr_t start = at - 4 >= block && at >= 4 ? at - 4 : block;
    if (start + 16 > block + COFFER_BLOCK || start + 16 > (uintptr_t)limit) return NULL;
    return (unsigned char *)start;
}

int coffer_guarded_append(void *destination, const void *frames, size_t count, const void *limit) {
#if COFFER_HAS_STORE16
    unsigned char *out = (unsigned char *)destination;
    const unsigned char *in = (const unsigned char *)frames;
    const unsigned char *end = (const unsigned char *)limit;
    // First, without storing anything: every header can be stored whole as the format needs.
    for (size_t at = 0; count - at >= 12;) {
        size_t length = frame_length(in + at);
        if (length > count - at - 12) return -3;
        unsigned char *header = out + at;
        uintptr_t block_end = ((uintptr_t)header & ~(uintptr_t)(COFFER_BLOCK - 1)) + COFFER_BLOCK;
        if ((uintptr_t)header + 12 > block_end) {
            // Crossing: its part in the second block is stored last, in one store there.
            if (block_end + 16 > (uintptr_t)end) return -3;
        } else if (header_store(header, end) == NULL) {
            return -3;
        }
        at += 12 + length;
    }
    sigjmp_buf target;
    if (sigsetjmp(target, 0) != 0) {
        return -1;
    }
    guarded_copy_start = out >= (unsigned char *)16 ? out - 16 : out;
    guarded_copy_end = out + count + 16;
    guarded_copy_target = &target;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    size_t at = 0;
    while (count - at >= 12) {
        size_t length = frame_length(in + at);
        unsigned char *header = out + at;
        // The payload first: while the header is zero, a stop leaves a frame that looks torn.
        memcpy(header + 12, in + at + 12, length);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        unsigned char block[16];
        uintptr_t block_end = ((uintptr_t)header & ~(uintptr_t)(COFFER_BLOCK - 1)) + COFFER_BLOCK;
        if ((uintptr_t)header + 12 > block_end) {
            // The header crosses a 4 KiB (so also a 512-byte) boundary b: its part before b
            // first, then its part after b in one store inside the next block. A stop between
            // leaves [b, header + 12) zero, which FORMAT.md's rule 1 calls torn.
            unsigned char *boundary = (unsigned char *)block_end;
            size_t before = (size_t)(boundary - header);
            memcpy(header, in + at, before);
            __atomic_signal_fence(__ATOMIC_SEQ_CST);
            memcpy(block, boundary, 16);
            memcpy(block, in + at + before, 12 - before);
            store16(boundary, block);
        } else {
            unsigned char *start = header_store(header, end);
            size_t offset = (size_t)(header - start);
            memcpy(block, start, 16);
            memcpy(block + offset, in + at, 12);
            store16(start, block);
        }
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        at += 12 + length;
    }
    guarded_copy_target = NULL;
    return 0;
#else
    (void)destination;
    (void)frames;
    (void)count;
    (void)limit;
    return -2;
#endif
}

// MARK: - A robust mutex shared between processes

#include <time.h>

#if defined(__linux__) && defined(__GLIBC__)
size_t coffer_shared_mutex_size(void) { return sizeof(pthread_mutex_t); }
_Static_assert(sizeof(pthread_mutex_t) <= 64, "the control page reserves 64 bytes for the mutex");

// The kind glibc records in a mutex initialised as coffer_shared_mutex_init does (robust,
// process-shared, normal), learnt once from a mutex of this process's own.
static int expected_kind = -1;
static pthread_once_t expected_kind_once = PTHREAD_ONCE_INIT;

static void learn_expected_kind(void) {
    pthread_mutex_t probe;
    if (coffer_shared_mutex_init(&probe) == 0) {
        expected_kind = probe.__data.__kind;
        pthread_mutex_destroy(&probe);
    }
}

int coffer_shared_mutex_is_valid(const void *mutex) {
    pthread_once(&expected_kind_once, learn_expected_kind);
    const pthread_mutex_t *m = (const pthread_mutex_t *)mutex;
    int kind = __atomic_load_n(&m->__data.__kind, __ATOMIC_RELAXED);
    // Only the kind: glibc sets the count to 1 while a robust mutex is held.
    return expected_kind >= 0 && kind == expected_kind;
}

int coffer_shared_mutex_init(void *mutex) {
    pthread_mutexattr_t attributes;
    int result = pthread_mutexattr_init(&attributes);
    if (result != 0) return result;
    result = pthread_mutexattr_setpshared(&attributes, PTHREAD_PROCESS_SHARED);
    if (result == 0) result = pthread_mutexattr_setrobust(&attributes, PTHREAD_MUTEX_ROBUST);
    // Normal, not error-checking: an error-checking mutex compares its holder's thread ID with
    // the caller's, and processes in two PID namespaces (containers sharing a volume) can have
    // equal thread IDs. A thread that locks it again waits its timeout (the caller's thread
    // gate keeps one store's threads out of each other's way first).
    if (result == 0) {
        memset(mutex, 0, sizeof(pthread_mutex_t));
        result = pthread_mutex_init((pthread_mutex_t *)mutex, &attributes);
    }
    pthread_mutexattr_destroy(&attributes);
    return result;
}

int coffer_shared_mutex_lock(void *mutex, int64_t timeout_ns) {
    pthread_mutex_t *m = (pthread_mutex_t *)mutex;
    // The usual case, a free mutex, reads no clock.
    int result = pthread_mutex_trylock(m);
    if (result == EBUSY) {
        if (timeout_ns <= 0) return ETIMEDOUT;
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        int64_t seconds = timeout_ns / 1000000000;
        int64_t nanoseconds = deadline.tv_nsec + timeout_ns % 1000000000;
        if (nanoseconds >= 1000000000) {
            seconds += 1;
            nanoseconds -= 1000000000;
        }
        deadline.tv_sec += (time_t)seconds;
        deadline.tv_nsec = (long)nanoseconds;
        do {
            result = pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &deadline);
        } while (result == EINTR);
    }
    if (result == EOWNERDEAD) {
        result = pthread_mutex_consistent(m);
        if (result != 0) {
            pthread_mutex_unlock(m);
            return result;
        }
        return 1;
    }
    return result;
}

int coffer_shared_mutex_unlock(void *mutex) { return pthread_mutex_unlock((pthread_mutex_t *)mutex); }
#else
size_t coffer_shared_mutex_size(void) { return 0; }
int coffer_shared_mutex_init(void *mutex) {
    (void)mutex;
    return ENOSYS;
}
int coffer_shared_mutex_lock(void *mutex, int64_t timeout_ns) {
    (void)mutex;
    (void)timeout_ns;
    return ENOSYS;
}
int coffer_shared_mutex_unlock(void *mutex) {
    (void)mutex;
    return ENOSYS;
}
int coffer_shared_mutex_is_valid(const void *mutex) {
    (void)mutex;
    return 0;
}
#endif
