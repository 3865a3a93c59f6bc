// The Linux kernel key retention service (keyrings(7)), for `coffer unlock` and `coffer lock`:
// thin wrappers over the add_key and keyctl system calls. Swift cannot call the variadic
// `syscall`, and libkeyutils is not a dependency, so these call it with the constants of
// <linux/keyctl.h> (defined here where that header is absent). Elsewhere than Linux every
// function fails with ENOSYS.
#ifndef COFFER_KEYRING_H
#define COFFER_KEYRING_H

#include <stddef.h>
#include <stdint.h>

/// The calling thread's session keyring (KEY_SPEC_SESSION_KEYRING).
#define COFFER_KEY_SPEC_SESSION_KEYRING (-3)
/// The user's session keyring (KEY_SPEC_USER_SESSION_KEYRING): what a process without a session
/// keyring of its own is given.
#define COFFER_KEY_SPEC_USER_SESSION_KEYRING (-5)

/// Every permission of a key for its possessor, none for its user, group or others: view, read,
/// write, search, link and setattr (KEY_POS_ALL without the obsolete bit).
#define COFFER_KEY_POSSESSOR_ONLY 0x3f000000u

/// `add_key("user", description, payload, length, keyring)`: the new (or updated) key's serial,
/// or -1 with errno set.
int32_t coffer_key_add_user(const char *description, const void *payload, size_t length, int32_t keyring);

/// KEYCTL_GET_KEYRING_ID: the serial of the special keyring `id` (`create`: make it if absent),
/// or -1 with errno set.
int32_t coffer_key_keyring_id(int32_t id, int create);

/// KEYCTL_JOIN_SESSION_KEYRING with `name` (NULL: a new anonymous keyring) for the calling
/// thread: its serial, or -1 with errno set.
int32_t coffer_key_join_session(const char *name);

/// KEYCTL_SETPERM: 0, or -1 with errno set.
int coffer_key_set_permissions(int32_t key, uint32_t permissions);

/// KEYCTL_SET_TIMEOUT (seconds from now; 0 clears the timeout): 0, or -1 with errno set.
int coffer_key_set_timeout(int32_t key, uint32_t seconds);

/// KEYCTL_SEARCH of `keyring` (and the keyrings linked from it) for a "user" key with exactly
/// `description`: its serial, or -1 with errno set (ENOKEY: none; EKEYEXPIRED, EKEYREVOKED).
int32_t coffer_key_search_user(int32_t keyring, const char *description);

/// KEYCTL_READ into `buffer` (may be NULL with `capacity` 0): the payload's full length (which
/// may exceed `capacity`, then nothing useful was copied), or -1 with errno set. For a keyring
/// the payload is its keys' serials (int32_t each).
long coffer_key_read(int32_t key, void *buffer, size_t capacity);

/// KEYCTL_DESCRIBE into `buffer`: "type;uid;gid;perm;description" with its NUL, the length
/// needed, or -1 with errno set.
long coffer_key_describe(int32_t key, char *buffer, size_t capacity);

/// KEYCTL_INVALIDATE: the key is unusable at once and removed from every keyring soon after.
/// 0, or -1 with errno set.
int coffer_key_invalidate(int32_t key);

/// KEYCTL_LINK of `key` (a key or keyring) into `keyring`: 0, or -1 with errno set.
int coffer_key_link(int32_t key, int32_t keyring);

/// KEYCTL_UNLINK of `key` from `keyring`: 0, or -1 with errno set.
int coffer_key_unlink(int32_t key, int32_t keyring);

#endif
