// Random bytes from the kernel without a system call per request: the vDSO's getrandom
// (Linux 6.11; glibc 2.41 and later use it for getrandom(3), Debian 12's 2.36 does not).
//
// The kernel keeps the generator's state in memory this file maps with the flags the kernel
// asks for (MAP_DROPPABLE: wiped in a child after fork, and reseeded after a VM snapshot is
// restored), so the bytes stay as fresh as the system call's: a nonce is never repeated by a
// forked child or a cloned VM. Each state is used by one thread at a time: a thread takes one
// from a pool on first use and gives it back when it exits (and forgets it: a later draw on
// the exiting thread takes another). A signal handler that interrupts a request on the same
// thread uses the system call. The pool's lock is held across fork (pthread_atfork), so a
// child never inherits it locked.

#if defined(__linux__)
#define _GNU_SOURCE
#include "coffer_random.h"

#include <elf.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

typedef ssize_t (*vgetrandom_function)(void *buffer, size_t length, unsigned int flags, void *state, size_t state_size);

// The kernel's struct vgetrandom_opaque_params (include/uapi/linux/random.h).
struct opaque_params {
    uint32_t size_of_opaque_state;
    uint32_t mmap_prot;
    uint32_t mmap_flags;
    uint32_t reserved[13];
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static vgetrandom_function vgetrandom;
static struct opaque_params params;
static pthread_key_t release_key;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static void **pool;
static size_t pool_count;
static size_t pool_capacity;
/// Set when a page of states could not be mapped: the system call is used from then on.
static int mapping_failed;

static __thread void *thread_state;
static __thread volatile sig_atomic_t thread_busy;

/// The address of `name` in the vDSO image at `base`, or NULL (ElfW: the process's word size).
static void *vdso_symbol(uintptr_t base, const char *name) {
    const ElfW(Ehdr) *header = (const ElfW(Ehdr) *)base;
    if (memcmp(header->e_ident, ELFMAG, SELFMAG) != 0) return NULL;
    const ElfW(Phdr) *program = (const ElfW(Phdr) *)(base + header->e_phoff);
    uintptr_t load = 0;
    int loaded = 0;
    const ElfW(Dyn) *dynamic = NULL;
    for (int i = 0; i < header->e_phnum; i++) {
        if (program[i].p_type == PT_LOAD && !loaded) {
            load = base + program[i].p_offset - program[i].p_vaddr;
            loaded = 1;
        } else if (program[i].p_type == PT_DYNAMIC) {
            dynamic = (const ElfW(Dyn) *)(base + program[i].p_offset);
        }
    }
    if (!loaded || dynamic == NULL) return NULL;
    const ElfW(Sym) *symbols = NULL;
    const char *strings = NULL;
    const ElfW(Word) *hash = NULL;
    const uint32_t *gnu_hash = NULL;
    for (const ElfW(Dyn) *entry = dynamic; entry->d_tag != DT_NULL; entry++) {
        switch (entry->d_tag) {
        case DT_SYMTAB: symbols = (const ElfW(Sym) *)(load + entry->d_un.d_ptr); break;
        case DT_STRTAB: strings = (const char *)(load + entry->d_un.d_ptr); break;
        case DT_HASH: hash = (const ElfW(Word) *)(load + entry->d_un.d_ptr); break;
        case DT_GNU_HASH: gnu_hash = (const uint32_t *)(load + entry->d_un.d_ptr); break;
        default: break;
        }
    }
    if (symbols == NULL || strings == NULL) return NULL;
    // How many symbols: DT_HASH's chain count, else one past the last in DT_GNU_HASH's chains.
    size_t count = 0;
    if (hash != NULL) {
        count = hash[1];
    } else if (gnu_hash != NULL) {
        uint32_t buckets = gnu_hash[0], first = gnu_hash[1], bloom = gnu_hash[2];
        const uint32_t *bucket = (const uint32_t *)((const ElfW(Addr) *)(gnu_hash + 4) + bloom);
        const uint32_t *chain = bucket + buckets;
        uint32_t last = 0;
        for (uint32_t i = 0; i < buckets; i++) {
            if (bucket[i] > last) last = bucket[i];
        }
        if (last >= first) {
            while ((chain[last - first] & 1) == 0) last++;
            count = (size_t)last + 1;
        }
    }
    for (size_t i = 0; i < count; i++) {
        const ElfW(Sym) *symbol = &symbols[i];
        if (ELF64_ST_TYPE(symbol->st_info) != STT_FUNC || symbol->st_shndx == SHN_UNDEF) continue;
        int binding = ELF64_ST_BIND(symbol->st_info);
        if (binding != STB_GLOBAL && binding != STB_WEAK) continue;
        if (strcmp(strings + symbol->st_name, name) == 0) return (void *)(load + symbol->st_value);
    }
    return NULL;
}

static void give_back(void *state) {
    pthread_mutex_lock(&pool_lock);
    if (pool_count == pool_capacity) {
        size_t capacity = pool_capacity == 0 ? 16 : pool_capacity * 2;
        void **grown = realloc(pool, capacity * sizeof *pool);
        if (grown == NULL) {  // the state is lost (a few hundred bytes), never reused twice
            pthread_mutex_unlock(&pool_lock);
            return;
        }
        pool = grown;
        pool_capacity = capacity;
    }
    pool[pool_count++] = state;
    pthread_mutex_unlock(&pool_lock);
}

/// The key's destructor, on the exiting thread: forget the state, then return it to the pool.
static void release_on_exit(void *state) {
    thread_state = NULL;
    give_back(state);
}

static void lock_pool(void) { pthread_mutex_lock(&pool_lock); }
static void unlock_pool(void) { pthread_mutex_unlock(&pool_lock); }

static void set_up(void) {
    uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
    if (base == 0) return;
    vgetrandom_function function = (vgetrandom_function)vdso_symbol(base, "__vdso_getrandom");
    if (function == NULL) function = (vgetrandom_function)vdso_symbol(base, "__kernel_getrandom");
    if (function == NULL) return;
    struct opaque_params asked;
    memset(&asked, 0, sizeof asked);
    // A state size of ~0 asks for the parameters of the states to map.
    if (function(NULL, 0, 0, &asked, ~(size_t)0) != 0) return;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || asked.size_of_opaque_state == 0 || asked.size_of_opaque_state + 63 > (size_t)page) return;
    if (pthread_key_create(&release_key, release_on_exit) != 0) return;
    if (pthread_atfork(lock_pool, unlock_pool, unlock_pool) != 0) return;
    params = asked;
    vgetrandom = function;
}

/// This thread's state, taken from the pool (or a new page of them) on first use; NULL when
/// none can be mapped.
static void *this_thread_state(void) {
    if (thread_state != NULL) return thread_state;
    pthread_mutex_lock(&pool_lock);
    if (pool_count == 0) {
        if (mapping_failed) goto none;
        // A page of states, none crossing a page boundary (the kernel requires it), each on
        // cache lines of its own (threads drawing at once do not share a line).
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t stride = ((size_t)params.size_of_opaque_state + 63) & ~(size_t)63;
        size_t per_page = page / stride;
        if (pool_capacity < per_page) {
            void **grown = realloc(pool, per_page * sizeof *pool);
            if (grown == NULL) goto none;
            pool = grown;
            pool_capacity = per_page;
        }
        void *mapped = mmap(NULL, page, (int)params.mmap_prot, (int)params.mmap_flags, -1, 0);
        if (mapped == MAP_FAILED) {
            mapping_failed = 1;
            goto none;
        }
        for (size_t i = 0; i < per_page; i++) pool[pool_count++] = (char *)mapped + i * stride;
    }
    void *state = pool[--pool_count];
    pthread_mutex_unlock(&pool_lock);
    if (pthread_setspecific(release_key, state) != 0) {
        give_back(state);
        return NULL;
    }
    thread_state = state;
    return state;
none:
    pthread_mutex_unlock(&pool_lock);
    return NULL;
}

int coffer_random_fill(void *buffer, size_t length) {
    unsigned char *next = buffer;
    size_t left = length;
    pthread_once(&once, set_up);
    if (vgetrandom != NULL && left > 0 && !thread_busy) {
        thread_busy = 1;
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        void *state = this_thread_state();
        while (state != NULL && left > 0) {
            ssize_t got = vgetrandom(next, left, 0, state, params.size_of_opaque_state);
            if (got == -EINTR) continue;
            if (got <= 0) break;  // the system call below says what is wrong
            next += got;
            left -= (size_t)got;
        }
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        thread_busy = 0;
    }
    while (left > 0) {
        ssize_t got = getrandom(next, left, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        next += got;
        left -= (size_t)got;
    }
    return 0;
}

int coffer_random_uses_vdso(void) {
    pthread_once(&once, set_up);
    return vgetrandom != NULL;
}

#else
#include "coffer_random.h"

int coffer_random_fill(void *buffer, size_t length) {
    (void)buffer;
    return length == 0 ? 0 : -1;
}

int coffer_random_uses_vdso(void) { return 0; }
#endif
