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

// The jump buffer of the guarded append running on this thread, or NULL: set only around the copy.
static __thread sigjmp_buf *volatile guarded_copy_target = NULL;
static struct sigaction previous_bus_action;
static pthread_once_t bus_guard_once = PTHREAD_ONCE_INIT;
static int bus_guard_status = -1;
static int bus_guard_errno = 0;

static void bus_handler(int signal_number, siginfo_t *info, void *context) {
    sigjmp_buf *target = guarded_copy_target;
    if (target != NULL) {
        guarded_copy_target = NULL;
        // The copy was a plain memcpy with nothing to unwind; SA_NODEFER left SIGBUS unblocked,
        // so no signal mask needs restoring (sigsetjmp saved none: no system call per copy).
        siglongjmp(*target, 1);
    }
    // Not ours: whatever would have happened without this handler.
    if (previous_bus_action.sa_flags & SA_SIGINFO) {
        if (previous_bus_action.sa_sigaction != NULL) {
            previous_bus_action.sa_sigaction(signal_number, info, context);
            return;
        }
    } else if (previous_bus_action.sa_handler != SIG_DFL && previous_bus_action.sa_handler != SIG_IGN) {
        previous_bus_action.sa_handler(signal_number);
        return;
    }
    // The default action: returning re-runs the faulting access, which now kills the process
    // (with a core dump where allowed) as if no handler had been installed.
    signal(SIGBUS, SIG_DFL);
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
    if (bus_guard_status != 0) errno = bus_guard_errno;
    return bus_guard_status;
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

int coffer_guarded_append(void *destination, const void *frames, size_t count) {
#if COFFER_HAS_STORE16
    sigjmp_buf target;
    if (sigsetjmp(target, 0) != 0) {
        return -1;
    }
    guarded_copy_target = &target;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    unsigned char *out = (unsigned char *)destination;
    const unsigned char *in = (const unsigned char *)frames;
    size_t at = 0;
    while (count - at >= 12) {
        uint32_t word;  // little-endian in the journal
        memcpy(&word, in + at, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        word = __builtin_bswap32(word);
#endif
        size_t length = (size_t)(word & 0x3FFFFFFFu);
        if (length > count - at - 12) break;  // not a frame: never happens for the journal's own
        memcpy(out + at + 12, in + at + 12, length);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        unsigned char block[16];
        memcpy(block, out + at - 4, 4);
        memcpy(block + 4, in + at, 12);
        store16(out + at - 4, block);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        at += 12 + length;
    }
    guarded_copy_target = NULL;
    return 0;
#else
    (void)destination;
    (void)frames;
    (void)count;
    return -2;
#endif
}
