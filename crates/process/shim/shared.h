/* The page a managed process and onionlab share: onionlab's side is `src/shared.rs`, which
 * must keep the same layout (a test compares the two). Everything in it is written by one side
 * while the other waits on `turn`, so no field needs atomics except `turn` itself. */
#ifndef ONIONLAB_SHARED_H
#define ONIONLAB_SHARED_H
#include <stdint.h>

#define OL_MAGIC 0x62616c6e6f696e6fULL /* "onionlab" */
#define OL_VERSION 1u
#define OL_DATA_BYTES 65536u
#define OL_MAX_FDS 1024u

/* Whose turn it is: the futex word both sides wait on. */
#define OL_TURN_PROCESS 1u
#define OL_TURN_SIMULATOR 2u

/* Requests that are not system calls (negative, so no call number collides). */
#define OL_REQ_START (-1)    /* the shim is installed; the program is about to run */
#define OL_REQ_OPEN_VIRTUAL (-2) /* args[0]: the placeholder descriptor; data: the path */

/* How onionlab answered. */
#define OL_REPLY_DONE 0u   /* `ret` is the call's result; `out_len` bytes of `data` go back */
#define OL_REPLY_NATIVE 1u /* make the call natively */

struct ol_shared {
    uint64_t magic;
    uint32_t version;
    uint32_t turn;
    /* The process's simulated pid (and its main thread's tid). */
    int32_t pid;
    int32_t _pad0;
    /* Simulated wall-clock time in nanoseconds since the Unix epoch. */
    int64_t now_ns;
    /* The request. */
    int64_t nr;
    int64_t args[6];
    uint32_t in_len;
    /* The reply. */
    uint32_t out_len;
    int64_t ret;
    uint32_t reply;
    uint32_t _pad1;
    /* Descriptors onionlab serves (bit n of byte n/8): every call on them goes to onionlab. */
    uint8_t virtual_fds[OL_MAX_FDS / 8];
    uint8_t data[OL_DATA_BYTES];
};

#endif
