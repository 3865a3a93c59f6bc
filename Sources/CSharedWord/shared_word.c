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
