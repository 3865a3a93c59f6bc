// See include/coffer_keyring.h.
#include "coffer_keyring.h"

#include <errno.h>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#if __has_include(<linux/keyctl.h>)
#include <linux/keyctl.h>
#endif

// The values of <linux/keyctl.h>, for a system without that header (they are the kernel's ABI).
#ifndef KEYCTL_GET_KEYRING_ID
#define KEYCTL_GET_KEYRING_ID 0
#endif
#ifndef KEYCTL_JOIN_SESSION_KEYRING
#define KEYCTL_JOIN_SESSION_KEYRING 1
#endif
#ifndef KEYCTL_SETPERM
#define KEYCTL_SETPERM 5
#endif
#ifndef KEYCTL_DESCRIBE
#define KEYCTL_DESCRIBE 6
#endif
#ifndef KEYCTL_LINK
#define KEYCTL_LINK 8
#endif
#ifndef KEYCTL_UNLINK
#define KEYCTL_UNLINK 9
#endif
#ifndef KEYCTL_SEARCH
#define KEYCTL_SEARCH 10
#endif
#ifndef KEYCTL_READ
#define KEYCTL_READ 11
#endif
#ifndef KEYCTL_SET_TIMEOUT
#define KEYCTL_SET_TIMEOUT 15
#endif
#ifndef KEYCTL_INVALIDATE
#define KEYCTL_INVALIDATE 21
#endif

int32_t coffer_key_add_user(const char *description, const void *payload, size_t length, int32_t keyring) {
    return (int32_t)syscall(SYS_add_key, "user", description, payload, length, keyring);
}

int32_t coffer_key_keyring_id(int32_t id, int create) {
    return (int32_t)syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, id, create);
}

int32_t coffer_key_join_session(const char *name) {
    return (int32_t)syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, name);
}

int coffer_key_set_permissions(int32_t key, uint32_t permissions) {
    return (int)syscall(SYS_keyctl, KEYCTL_SETPERM, key, permissions);
}

int coffer_key_set_timeout(int32_t key, uint32_t seconds) {
    return (int)syscall(SYS_keyctl, KEYCTL_SET_TIMEOUT, key, seconds);
}

int32_t coffer_key_search_user(int32_t keyring, const char *description) {
    return (int32_t)syscall(SYS_keyctl, KEYCTL_SEARCH, keyring, "user", description, 0);
}

long coffer_key_read(int32_t key, void *buffer, size_t capacity) {
    return syscall(SYS_keyctl, KEYCTL_READ, key, buffer, capacity);
}

long coffer_key_describe(int32_t key, char *buffer, size_t capacity) {
    return syscall(SYS_keyctl, KEYCTL_DESCRIBE, key, buffer, capacity);
}

int coffer_key_invalidate(int32_t key) {
    return (int)syscall(SYS_keyctl, KEYCTL_INVALIDATE, key);
}

int coffer_key_link(int32_t key, int32_t keyring) {
    return (int)syscall(SYS_keyctl, KEYCTL_LINK, key, keyring);
}

int coffer_key_unlink(int32_t key, int32_t keyring) {
    return (int)syscall(SYS_keyctl, KEYCTL_UNLINK, key, keyring);
}

#else

static int unsupported(void) {
    errno = ENOSYS;
    return -1;
}

int32_t coffer_key_add_user(const char *d, const void *p, size_t l, int32_t k) { (void)d; (void)p; (void)l; (void)k; return unsupported(); }
int32_t coffer_key_keyring_id(int32_t id, int c) { (void)id; (void)c; return unsupported(); }
int32_t coffer_key_join_session(const char *n) { (void)n; return unsupported(); }
int coffer_key_set_permissions(int32_t k, uint32_t p) { (void)k; (void)p; return unsupported(); }
int coffer_key_set_timeout(int32_t k, uint32_t s) { (void)k; (void)s; return unsupported(); }
int32_t coffer_key_search_user(int32_t r, const char *d) { (void)r; (void)d; return unsupported(); }
long coffer_key_read(int32_t k, void *b, size_t c) { (void)k; (void)b; (void)c; return unsupported(); }
long coffer_key_describe(int32_t k, char *b, size_t c) { (void)k; (void)b; (void)c; return unsupported(); }
int coffer_key_invalidate(int32_t k) { (void)k; return unsupported(); }
int coffer_key_link(int32_t k, int32_t r) { (void)k; (void)r; return unsupported(); }
int coffer_key_unlink(int32_t k, int32_t r) { (void)k; (void)r; return unsupported(); }

#endif
