/* The page a managed process and onionlab share: onionlab's side is `src/shared.rs`, which
 * must keep the same layout (a test compares the two). Everything in it is written by one side
 * while the other waits on `turn`, so no field needs atomics except `turn` itself. */
#ifndef ONIONLAB_SHARED_H
#define ONIONLAB_SHARED_H
#include <stdint.h>

#define OL_MAGIC 0x62616c6e6f696e6fULL /* "onionlab" */
#define OL_VERSION 2u
#define OL_DATA_BYTES 65536u
#define OL_MAX_FDS 1024u
#define OL_MAX_THREADS 128u

/* Whose turn it is: the futex word onionlab waits on. */
#define OL_TURN_PROCESS 1u
#define OL_TURN_SIMULATOR 2u
/* A thread's own word, which it waits on: it may run when onionlab sets it to OL_THREAD_GO. */
#define OL_THREAD_WAIT 0u
#define OL_THREAD_GO 1u

/* Requests that are not system calls (negative, so no call number collides). */
#define OL_REQ_START (-1)    /* the shim is installed; the program is about to run */
#define OL_REQ_OPEN_VIRTUAL (-2) /* args[0]: the placeholder descriptor; data: the path */
#define OL_REQ_THREAD_FAILED (-3) /* args[0]: the slot clone gave, whose thread was not made */

/* How onionlab answered. */
#define OL_REPLY_DONE 0u   /* `ret` is the call's result; `out_len` bytes of `data` go back */
#define OL_REPLY_NATIVE 1u /* make the call natively */

/* One thread's entry in the table, by slot (0: the main thread). */
struct ol_thread {
    /* OL_THREAD_GO while the thread may run, OL_THREAD_WAIT while it waits for its turn. */
    uint32_t turn;
    /* The real thread's id while it lives: Linux clears it and wakes its waiters when the thread
     * has ended (CLONE_CHILD_CLEARTID), which is how onionlab knows it is gone. */
    uint32_t alive;
    /* Its simulated id (gettid). */
    int32_t tid;
    uint32_t _pad;
    /* The program's word that is cleared, and its waiters woken, when the thread ends
     * (CLONE_CHILD_CLEARTID, set_tid_address); 0: none. */
    uint64_t clear_tid;
};

struct ol_shared {
    uint64_t magic;
    uint32_t version;
    uint32_t turn;
    /* The process's simulated pid (and its main thread's tid). */
    int32_t pid;
    /* The slot of the thread that made the request. */
    uint32_t current;
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
    struct ol_thread threads[OL_MAX_THREADS];
    /* Descriptors onionlab serves (bit n of byte n/8): every call on them goes to onionlab. */
    uint8_t virtual_fds[OL_MAX_FDS / 8];
    uint8_t data[OL_DATA_BYTES];
};

#endif
