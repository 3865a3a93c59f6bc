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

// The jump buffer of the guarded copy running on this thread, or NULL: set only around the copy.
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

int coffer_guarded_copy(void *destination, const void *source, size_t count) {
    sigjmp_buf target;
    if (sigsetjmp(target, 0) != 0) {
        return -1;
    }
    guarded_copy_target = &target;
    // Compiler barriers: the copy's stores stay between setting the target and clearing it.
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    memcpy(destination, source, count);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    guarded_copy_target = NULL;
    return 0;
}
