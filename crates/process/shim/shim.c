/* onionlab's shim: preloaded into every managed process (LD_PRELOAD), it puts the process in
 * simulated time and hands its system calls to onionlab.
 *
 * How a call travels:
 *  - The constructor maps the page it shares with onionlab (descriptor ONIONLAB_SHM_FD), points
 *    the vDSO's time functions at real system calls, installs a SIGSYS handler and then a
 *    seccomp filter that lets through only system calls made from one instruction of this
 *    library (`ol_syscall`'s) and rt_sigreturn, and traps every other one.
 *  - A trapped call arrives in `on_sigsys`, which decides (`dispatch`): time and process ids are
 *    answered here from the shared page; memory, signals and calls on the process's own files
 *    run natively through `ol_syscall`; the rest (sleeping, randomness, the host's name, exit,
 *    calls on descriptors onionlab serves, and every call the shim does not know) go to
 *    onionlab as a request on the shared page, and the process waits on a futex until onionlab
 *    gives it the turn back with the reply. onionlab answers a call it does not implement with
 *    ENOSYS and counts it.
 *  - The libc functions a program calls most for the time (`clock_gettime`, `gettimeofday`,
 *    `time`) are defined here too, so those calls cost no trap at all.
 * Between two requests the process runs natively and its simulated time stands still.
 *
 * Threads run one at a time. Each has a slot in the page's thread table and waits on its own
 * word there; onionlab gives the turn to one thread at a time. A `clone` goes to onionlab, which
 * gives the new thread a slot and an id; the shim then makes the real thread, which starts on a
 * small stack of the shim's, waits for its first turn, and only then enters the program where
 * the program's `clone` returns, through `rt_sigreturn` with the registers the trap saved
 * (`start_thread`, `ol_child_main`). A thread's exit is reported to onionlab, which waits until
 * Linux says the real thread is gone before any other runs.
 *
 * The shim allocates nothing and calls nothing in libc after its constructor: everything it
 * does inside the handler is a raw system call from its own instruction. */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <poll.h>
#include <net/if.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/timerfd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "shared.h"

#define EXPORT __attribute__((visibility("default")))

/* The one instruction the seccomp filter lets through: `syscall` in this function. The filter
 * compares the address after it (`ol_syscall_end`) with the call's instruction pointer. */
long ol_syscall(long nr, long a, long b, long c, long d, long e, long f);
extern char ol_syscall_end[];
__asm__(".text\n"
        ".type ol_syscall,@function\n"
        "ol_syscall:\n"
        "  mov %rdi, %rax\n"
        "  mov %rsi, %rdi\n"
        "  mov %rdx, %rsi\n"
        "  mov %rcx, %rdx\n"
        "  mov %r8, %r10\n"
        "  mov %r9, %r8\n"
        "  mov 8(%rsp), %r9\n"
        "  syscall\n"
        "ol_syscall_end:\n"
        "  ret\n"
        ".size ol_syscall, .-ol_syscall\n");

static struct ol_shared *ol;
/* The hosts file onionlab writes for the run (ONIONLAB_HOSTS), which a program's /etc/hosts
 * opens instead of the machine's: the simulated network's names. */
static char hosts_path[4096];
/* The process's real ids, for signals a program sends itself, and the parent it started
 * under: if onionlab dies the process is handed to another parent and ends itself. */
static long real_pid, real_parent;

/* This thread's slot in the page's thread table (0: the main thread). Every thread onionlab
 * starts is made with its own TLS (CLONE_SETTLS), so the slot is the thread's own. */
static __thread uint32_t my_slot __attribute__((tls_model("initial-exec")));

static inline long sys0(long nr) { return ol_syscall(nr, 0, 0, 0, 0, 0, 0); }
static inline long sys6(long nr, const long *a) {
    return ol_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

static void copy_bytes(void *dst, const void *src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    while (n--)
        *d++ = *s++;
}

static size_t cstr_len(const char *s, size_t cap) {
    size_t n = 0;
    while (n < cap && s[n])
        n++;
    return n;
}

static int same_str(const char *a, const char *b) {
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

/* ---- Time, from the shared page ---- */

static void fill_timespec(struct timespec *ts) {
    int64_t now = ol->now_ns;
    ts->tv_sec = now / 1000000000;
    ts->tv_nsec = now % 1000000000;
}

static long sim_clock_gettime(long clock, struct timespec *ts) {
    (void)clock; /* every clock reads the simulated time: no CPU time passes in a simulation */
    if (!ts)
        return -EFAULT;
    fill_timespec(ts);
    return 0;
}

static long sim_gettimeofday(struct timeval *tv, void *tz) {
    if (tv) {
        int64_t now = ol->now_ns;
        tv->tv_sec = now / 1000000000;
        tv->tv_usec = (now % 1000000000) / 1000;
    }
    if (tz)
        copy_bytes(tz, &(struct timezone){0, 0}, sizeof(struct timezone));
    return 0;
}

static long sim_time(time_t *t) {
    time_t now = ol->now_ns / 1000000000;
    if (t)
        *t = now;
    return now;
}

/* ---- The turn: a request to onionlab and its reply ---- */

/* Waits until onionlab gives thread `slot` the turn. */
static void wait_for_turn(uint32_t slot) {
    uint32_t *word = &ol->threads[slot].turn;
    for (;;) {
        if (__atomic_load_n(word, __ATOMIC_ACQUIRE) == OL_THREAD_GO)
            return;
        struct timespec wait = {1, 0};
        long r = ol_syscall(SYS_futex, (long)word, FUTEX_WAIT, OL_THREAD_WAIT, (long)&wait, 0, 0);
        if (r == -ETIMEDOUT && sys0(SYS_getppid) != real_parent)
            ol_syscall(SYS_exit_group, 137, 0, 0, 0, 0, 0); /* onionlab is gone */
    }
}

/* Hands the turn to onionlab and waits until this thread has it back. */
static void take_turns(void) {
    uint32_t slot = my_slot;
    __atomic_store_n(&ol->threads[slot].turn, OL_THREAD_WAIT, __ATOMIC_RELAXED);
    ol->current = slot;
    __atomic_store_n(&ol->turn, OL_TURN_SIMULATOR, __ATOMIC_RELEASE);
    ol_syscall(SYS_futex, (long)&ol->turn, FUTEX_WAKE, 1, 0, 0, 0);
    wait_for_turn(slot);
}

/* Sends call `nr` with `in_len` bytes from `in` and copies up to `out_cap` bytes of the reply's
 * data to `out`. Returns the call's result, made natively if onionlab says so. */
static long request(long nr, const long *a, const void *in, size_t in_len, void *out,
                    size_t out_cap) {
    if (in_len > OL_DATA_BYTES)
        in_len = OL_DATA_BYTES;
    if (in_len)
        copy_bytes(ol->data, in, in_len);
    ol->nr = nr;
    for (int i = 0; i < 6; i++)
        ol->args[i] = a[i];
    ol->in_len = (uint32_t)in_len;
    ol->out_len = 0;
    take_turns();
    if (ol->reply == OL_REPLY_NATIVE)
        return sys6(nr, a);
    size_t n = ol->out_len;
    if (n > out_cap)
        n = out_cap;
    if (n && out)
        copy_bytes(out, ol->data, n);
    return ol->ret;
}

static long forward(long nr, const long *a) { return request(nr, a, 0, 0, 0, 0); }

static int is_virtual_fd(long fd) {
    return fd >= 0 && fd < (long)OL_MAX_FDS && (ol->virtual_fds[fd / 8] >> (fd % 8)) & 1;
}

/* Paths onionlab serves instead of the real file: the random devices, which must give the
 * host's seeded bytes. */
static int is_virtual_path(const char *path) {
    return path && (same_str(path, "/dev/urandom") || same_str(path, "/dev/random"));
}

static long open_path(long nr, const long *a) {
    const char *path = (const char *)(nr == SYS_open ? a[0] : a[1]);
    long flags = nr == SYS_open ? a[1] : a[2];
    if (path && hosts_path[0] && same_str(path, "/etc/hosts")) {
        long b[6] = {a[0], a[1], a[2], a[3], a[4], a[5]};
        b[nr == SYS_open ? 0 : 1] = (long)hosts_path;
        return sys6(nr, b);
    }
    if (!is_virtual_path(path))
        return sys6(nr, a);
    /* The descriptor's number is reserved in the real table by a placeholder, so that no
     * native open can take it while onionlab serves it. */
    long fd = ol_syscall(SYS_openat, AT_FDCWD, (long)"/dev/null", O_RDONLY | (flags & O_CLOEXEC),
                         0, 0, 0);
    if (fd < 0)
        return fd;
    long req[6] = {fd, 0, 0, 0, 0, 0};
    long r = request(OL_REQ_OPEN_VIRTUAL, req, path, cstr_len(path, 4095) + 1, 0, 0);
    if (r < 0) {
        ol_syscall(SYS_close, fd, 0, 0, 0, 0, 0);
        return r;
    }
    return fd;
}

/* A placeholder for a descriptor onionlab is about to serve: the number is taken in the
 * real table first, so that no native open can take it while onionlab serves it. */
static long placeholder(int cloexec) {
    return ol_syscall(SYS_openat, AT_FDCWD, (long)"/dev/null", O_RDONLY | (cloexec ? O_CLOEXEC : 0),
                      0, 0, 0);
}

/* A call that makes a descriptor (socket, accept): onionlab gets the reserved number in
 * args[5] and answers with it; a socket address it returns goes to `addr` and `*addrlen`. */
static long new_descriptor(long nr, const long *a, int cloexec, void *addr, socklen_t *addrlen) {
    long fd = placeholder(cloexec);
    if (fd < 0)
        return fd;
    long b[6] = {a[0], a[1], a[2], a[3], a[4], fd};
    unsigned char name[128];
    long r = request(nr, b, 0, 0, name, sizeof name);
    if (r < 0) {
        ol_syscall(SYS_close, fd, 0, 0, 0, 0, 0);
        return r;
    }
    if (addr && addrlen) {
        size_t n = ol->out_len < *addrlen ? ol->out_len : *addrlen;
        copy_bytes(addr, name, n);
        *addrlen = ol->out_len;
    }
    return r;
}

/* A call that makes two descriptors (pipe, pipe2, socketpair): onionlab gets the numbers
 * reserved for them in args[4] and args[5] and sends them back as two ints for `fds`. */
static long two_descriptors(long nr, const long *a, int cloexec, int *fds) {
    long first = placeholder(cloexec);
    if (first < 0)
        return first;
    long second = placeholder(cloexec);
    if (second < 0) {
        ol_syscall(SYS_close, first, 0, 0, 0, 0, 0);
        return second;
    }
    long b[6] = {a[0], a[1], a[2], a[3], first, second};
    int pair[2];
    long r = request(nr, b, 0, 0, pair, sizeof pair);
    if (r < 0) {
        ol_syscall(SYS_close, first, 0, 0, 0, 0, 0);
        ol_syscall(SYS_close, second, 0, 0, 0, 0, 0);
        return r;
    }
    fds[0] = pair[0];
    fds[1] = pair[1];
    return r;
}

/* A call that returns a socket address (getsockname, getpeername) or an option's value
 * (getsockopt) through a buffer and a length the program passes by pointer. */
static long with_sized_result(long nr, const long *a, void *buf, socklen_t *len) {
    unsigned char value[128];
    long r = request(nr, a, 0, 0, value, sizeof value);
    if (r >= 0 && buf && len) {
        size_t n = ol->out_len < *len ? ol->out_len : *len;
        copy_bytes(buf, value, n);
        *len = ol->out_len;
    }
    return r;
}

/* sendto: onionlab gets the destination address (16 bytes, zeros when there is none) and
 * then the payload. */
static long send_to(const long *a) {
    size_t len = (size_t)a[2];
    if (len > OL_DATA_BYTES - 16)
        len = OL_DATA_BYTES - 16;
    unsigned char *d = ol->data;
    for (int i = 0; i < 16; i++)
        d[i] = 0;
    if (a[4] && a[5] >= 16)
        copy_bytes(d, (void *)a[4], 16);
    copy_bytes(d + 16, (void *)a[1], len);
    ol->nr = SYS_sendto;
    for (int i = 0; i < 6; i++)
        ol->args[i] = a[i];
    ol->in_len = (uint32_t)(16 + len);
    ol->out_len = 0;
    take_turns();
    return ol->ret;
}

/* recvfrom: onionlab answers with the payload and, for a datagram, the sender's address
 * after it. */
static long receive_from(const long *a) {
    long r = request(SYS_recvfrom, a, 0, 0, 0, 0);
    if (r < 0)
        return r;
    copy_bytes((void *)a[1], ol->data, (size_t)r);
    if (a[4] && a[5]) {
        socklen_t *len = (socklen_t *)a[5];
        size_t have = ol->out_len - (size_t)r; /* 16 for a datagram, 0 for a stream */
        copy_bytes((void *)a[4], ol->data + r, have < *len ? have : *len);
        *len = (socklen_t)have;
    }
    return r;
}

/* ---- Threads ---- */

/* What a new thread needs to enter the program: the registers of the `clone` that made it. */
struct ol_start {
    greg_t gregs[NGREG];
    unsigned long mask;
    uint32_t slot;
};
static struct ol_start starts[OL_MAX_THREADS];
/* Each slot's start-up stack, made the first time the slot is used and kept: a thread leaves
 * it for the program's stack before anything else can use the slot. */
static void *start_stacks[OL_MAX_THREADS];
#define OL_START_STACK_BYTES 65536

/* Where a new thread goes first: `ol_syscall`'s `ret` in the child takes this address from the
 * top of its start-up stack; %r9 (the call's sixth argument, which clone ignores) holds its
 * `struct ol_start`. */
void ol_child_entry(void);
__asm__(".text\n"
        ".type ol_child_entry,@function\n"
        "ol_child_entry:\n"
        "  mov %r9, %rdi\n"
        "  and $-16, %rsp\n"
        "  call ol_child_main\n"
        "  ud2\n"
        ".size ol_child_entry, .-ol_child_entry\n");

/* The new thread: it waits for its first turn, then becomes what the program's `clone` made,
 * by `rt_sigreturn` into the saved registers (which the filter lets through from anywhere). */
__attribute__((noreturn, used, visibility("hidden"))) void ol_child_main(struct ol_start *s) {
    my_slot = s->slot;
    wait_for_turn(s->slot);
    ucontext_t uc;
    unsigned char *z = (unsigned char *)&uc;
    for (size_t i = 0; i < sizeof uc; i++)
        z[i] = 0;
    copy_bytes(uc.uc_mcontext.gregs, s->gregs, sizeof s->gregs);
    copy_bytes(&uc.uc_sigmask, &s->mask, sizeof s->mask);
    uc.uc_stack.ss_flags = SS_DISABLE;
    /* No saved floating-point state: the thread starts with a clean one, as Linux gives. */
    uc.uc_mcontext.fpregs = 0;
    __asm__ volatile("mov %0, %%rsp\n"
                     "mov $15, %%eax\n" /* rt_sigreturn */
                     "syscall\n"
                     "ud2\n"
                     :
                     : "r"(&uc)
                     : "memory");
    __builtin_unreachable();
}

#define THREAD_CLONE_FLAGS                                                                     \
    (CLONE_VM | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SETTLS | CLONE_PARENT_SETTID | \
     CLONE_CHILD_CLEARTID)

/* `clone` or `clone3` (`nr`) of a thread, with clone's arguments: onionlab gives the thread a
 * slot and an id, then the real thread is made here. `uc` holds the registers at the trap, which
 * the new thread starts from. */
static long start_thread(long nr, long flags, long stack_top, long ptid, long ctid, long tls,
                         ucontext_t *uc) {
    long b[6] = {flags, stack_top, ptid, ctid, tls, 0};
    uint32_t slot = 0;
    long tid = request(nr, b, 0, 0, &slot, sizeof slot);
    if (tid < 0)
        return tid;
    long failed[6] = {slot, 0, 0, 0, 0, 0};
    if (slot >= OL_MAX_THREADS) {
        request(OL_REQ_THREAD_FAILED, failed, 0, 0, 0, 0);
        return -EAGAIN;
    }
    if (!start_stacks[slot]) {
        long m = ol_syscall(SYS_mmap, 0, OL_START_STACK_BYTES, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m < 0 && m > -4096) {
            request(OL_REQ_THREAD_FAILED, failed, 0, 0, 0, 0);
            return m;
        }
        start_stacks[slot] = (void *)m;
    }
    struct ol_thread *th = &ol->threads[slot];
    th->tid = (int32_t)tid;
    th->turn = OL_THREAD_WAIT;
    th->clear_tid = (flags & CLONE_CHILD_CLEARTID) ? (uint64_t)ctid : 0;
    if ((flags & CLONE_PARENT_SETTID) && ptid)
        *(int *)ptid = (int)tid;
    if ((flags & CLONE_CHILD_SETTID) && ctid)
        *(int *)ctid = (int)tid;
    struct ol_start *s = &starts[slot];
    copy_bytes(s->gregs, uc->uc_mcontext.gregs, sizeof s->gregs);
    s->gregs[REG_RAX] = 0;
    s->gregs[REG_RSP] = stack_top;
    copy_bytes(&s->mask, &uc->uc_sigmask, sizeof s->mask);
    s->slot = slot;
    uintptr_t top = ((uintptr_t)start_stacks[slot] + OL_START_STACK_BYTES - 64) & ~(uintptr_t)15;
    *(void **)top = (void *)ol_child_entry;
    long native = THREAD_CLONE_FLAGS | (flags & (CLONE_FS | CLONE_SYSVSEM));
    long r = ol_syscall(SYS_clone, native, (long)top, (long)&th->alive, (long)&th->alive, tls,
                        (long)s);
    if (r < 0) {
        request(OL_REQ_THREAD_FAILED, failed, 0, 0, 0, 0);
        return r;
    }
    return tid;
}

/* clone3's arguments, laid out as clone's for onionlab and `start_thread`. */
static long start_thread3(const long *a, ucontext_t *uc) {
    struct clone_args_v0 {
        uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
    } args;
    if (!a[0] || (size_t)a[1] < sizeof args)
        return -EINVAL;
    copy_bytes(&args, (void *)a[0], sizeof args);
    /* What the first version's fields do not hold (set_tid, cgroup) must be zero. */
    for (size_t i = sizeof args; i < (size_t)a[1] && i < 4096; i++)
        if (((unsigned char *)a[0])[i])
            return forward(SYS_clone3, a);
    long flags = (long)(args.flags | (args.exit_signal & 0xff));
    long top = args.stack ? (long)(args.stack + args.stack_size) : 0;
    return start_thread(SYS_clone3, flags, top, (long)args.parent_tid, (long)args.child_tid,
                        (long)args.tls, uc);
}

/* A thread's own exit: its tid word is cleared first (the joiner's futex wakes on it at
 * onionlab), then onionlab says whether the thread ends alone (1) or the process with it. */
static long exit_thread(long code) {
    struct ol_thread *me = &ol->threads[my_slot];
    long clear = (long)me->clear_tid;
    if (clear)
        *(int *)clear = 0;
    long b[6] = {code, clear, 0, 0, 0, 0};
    long alone = request(SYS_exit, b, 0, 0, 0, 0);
    return ol_syscall(alone == 1 ? SYS_exit : SYS_exit_group, code, 0, 0, 0, 0, 0);
}

/* The real id of the thread whose simulated id is `tid`, or 0. */
static long real_tid(long tid) {
    for (uint32_t i = 0; i < OL_MAX_THREADS; i++)
        if (ol->threads[i].tid == tid && ol->threads[i].alive)
            return ol->threads[i].alive;
    return 0;
}

/* `futex`: onionlab gets the value at the address (and for FUTEX_WAKE_OP the second word's
 * old value, after the shim made the change), read while this thread alone runs, and a wait's
 * time limit after it. */
static long futex(const long *a) {
    long cmd = a[1] & ~(long)(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME);
    unsigned char d[4 + sizeof(struct timespec)];
    size_t n = 0;
    switch (cmd) {
    case FUTEX_WAIT:
    case FUTEX_WAIT_BITSET:
    case FUTEX_CMP_REQUEUE:
        if (!a[0])
            return -EFAULT;
        copy_bytes(d, (void *)a[0], 4);
        n = 4;
        if (cmd != FUTEX_CMP_REQUEUE && a[3]) {
            copy_bytes(d + 4, (void *)a[3], sizeof(struct timespec));
            n += sizeof(struct timespec);
        }
        break;
    case FUTEX_WAKE_OP: {
        if (!a[4])
            return -EFAULT;
        int32_t *word = (int32_t *)a[4];
        int32_t old = *word;
        uint32_t code = (uint32_t)a[5];
        int32_t arg = ((int32_t)(code << 8)) >> 20; /* bits 12..23, sign-extended */
        if (code & (8u << 28))
            arg = 1 << (arg & 31);
        switch ((code >> 28) & 7) {
        case 0: *word = arg; break;
        case 1: *word = old + arg; break;
        case 2: *word = old | arg; break;
        case 3: *word = old & ~arg; break;
        case 4: *word = old ^ arg; break;
        default: return -ENOSYS;
        }
        copy_bytes(d, &old, 4);
        n = 4;
        break;
    }
    }
    return request(SYS_futex, a, d, n, 0, 0);
}

/* ---- Waiting on descriptors ---- */

/* A time limit as nanoseconds: -1 for none (a null pointer), -2 for one Linux refuses. */
static long timeout_ns(const struct timespec *ts) {
    if (!ts)
        return -1;
    if (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000)
        return -2;
    return ts->tv_sec * 1000000000L + ts->tv_nsec;
}

/* `select` and `pselect6` go to onionlab as a poll of the descriptors in the three sets, with
 * the time limit in nanoseconds; what it finds ready goes back into the sets. The time left is
 * not written back. */
static long select_call(long nr, const long *a, long ns) {
    long nfds = a[0];
    if (nfds < 0 || nfds > (long)OL_MAX_FDS)
        return -EINVAL;
    fd_set *sets[3] = {(fd_set *)a[1], (fd_set *)a[2], (fd_set *)a[3]};
    struct pollfd *p = (struct pollfd *)ol->data;
    long n = 0;
    for (long fd = 0; fd < nfds; fd++) {
        short events = 0;
        if (sets[0] && FD_ISSET(fd, sets[0]))
            events |= POLLIN;
        if (sets[1] && FD_ISSET(fd, sets[1]))
            events |= POLLOUT;
        if (sets[2] && FD_ISSET(fd, sets[2]))
            events |= POLLPRI;
        if (events) {
            p[n].fd = (int)fd;
            p[n].events = events;
            p[n].revents = 0;
            n++;
        }
    }
    ol->nr = nr;
    long b[6] = {a[0], n, ns, 0, 0, 0};
    for (int i = 0; i < 6; i++)
        ol->args[i] = b[i];
    ol->in_len = (uint32_t)(n * sizeof(struct pollfd));
    ol->out_len = 0;
    take_turns();
    long r = ol->ret;
    if (r < 0)
        return r;
    for (int i = 0; i < 3; i++)
        if (sets[i])
            for (long fd = 0; fd < nfds; fd++)
                FD_CLR(fd, sets[i]);
    long bits = 0;
    for (long i = 0; i < n && (size_t)(i + 1) * sizeof(struct pollfd) <= ol->out_len; i++) {
        short re = p[i].revents;
        if (re & POLLNVAL)
            return -EBADF;
        if (sets[0] && (re & (POLLIN | POLLHUP | POLLERR)) && (p[i].events & POLLIN))
            FD_SET(p[i].fd, sets[0]), bits++;
        if (sets[1] && (re & (POLLOUT | POLLERR)) && (p[i].events & POLLOUT))
            FD_SET(p[i].fd, sets[1]), bits++;
        if (sets[2] && (re & POLLPRI) && (p[i].events & POLLPRI))
            FD_SET(p[i].fd, sets[2]), bits++;
    }
    return bits;
}

/* ---- The program's own SIGSYS handler ---- */

/* The kernel's `struct sigaction`, as rt_sigaction takes it. */
struct kernel_sigaction {
    long handler, flags, restorer;
    unsigned long mask;
};
/* What the program set for SIGSYS: kept and given back, never installed, since SIGSYS is the
 * shim's. Programs that install handlers for every fatal signal (tor's backtrace handler does)
 * then start as they would anywhere; the handler never runs. */
static struct kernel_sigaction program_sigsys_action;

static long program_sigsys(const long *a) {
    if (a[3] != sizeof(unsigned long))
        return -EINVAL;
    if (a[2])
        copy_bytes((void *)a[2], &program_sigsys_action, sizeof program_sigsys_action);
    if (a[1])
        copy_bytes(&program_sigsys_action, (void *)a[1], sizeof program_sigsys_action);
    return 0;
}

/* `ioctl(SIOCGIFCONF)`: onionlab lists the host's interfaces as `struct ifreq`s, copied into
 * the program's buffer as far as whole ones fit; a null buffer asks for the length. */
static long interfaces(long nr, const long *a) {
    struct ifconf *ic = (struct ifconf *)a[2];
    if (!ic)
        return -EFAULT;
    unsigned char list[4 * sizeof(struct ifreq)];
    long r = request(nr, a, 0, 0, list, sizeof list);
    if (r < 0)
        return r;
    size_t have = ol->out_len < sizeof list ? ol->out_len : sizeof list;
    if (!ic->ifc_buf) {
        ic->ifc_len = (int)have;
        return 0;
    }
    size_t room = ic->ifc_len > 0 ? (size_t)ic->ifc_len : 0;
    size_t fit = room / sizeof(struct ifreq) * sizeof(struct ifreq);
    if (fit > have)
        fit = have;
    copy_bytes(ic->ifc_buf, list, fit);
    ic->ifc_len = (int)fit;
    return 0;
}

/* ---- The dispatch of one trapped call ---- */

static long dispatch(long nr, long *a, ucontext_t *uc) {
    switch (nr) {
    case SYS_clock_gettime:
        return sim_clock_gettime(a[0], (struct timespec *)a[1]);
    case SYS_gettimeofday:
        return sim_gettimeofday((struct timeval *)a[0], (void *)a[1]);
    case SYS_time:
        return sim_time((time_t *)a[0]);
    case SYS_getcpu:
        if (a[0])
            *(unsigned *)a[0] = 0;
        if (a[1])
            *(unsigned *)a[1] = 0;
        return 0;
    case SYS_getpid:
        return ol->pid;
    case SYS_gettid:
        return ol->threads[my_slot].tid;
    case SYS_set_tid_address:
        ol->threads[my_slot].clear_tid = (uint64_t)a[0];
        return ol->threads[my_slot].tid;
    case SYS_getppid:
        return 1;
    case SYS_kill:
        if (a[0] == ol->pid)
            return ol_syscall(SYS_kill, real_pid, a[1], 0, 0, 0, 0);
        return forward(nr, a);
    case SYS_tgkill:
        if (a[0] == ol->pid && real_tid(a[1]))
            return ol_syscall(SYS_tgkill, real_pid, real_tid(a[1]), a[2], 0, 0, 0);
        return forward(nr, a);
    case SYS_tkill:
        if (real_tid(a[0]))
            return ol_syscall(SYS_tgkill, real_pid, real_tid(a[0]), a[1], 0, 0, 0);
        return forward(nr, a);

    /* Signals: SIGSYS stays the shim's and is never blocked, or the next trapped call would
     * kill the process. */
    case SYS_rt_sigaction: {
        if (a[0] == SIGSYS)
            return program_sigsys(a);
        if (!a[1])
            return sys6(nr, a);
        struct kernel_sigaction act;
        copy_bytes(&act, (void *)a[1], sizeof act);
        act.mask &= ~(1UL << (SIGSYS - 1));
        long b[6] = {a[0], (long)&act, a[2], a[3], a[4], a[5]};
        return sys6(nr, b);
    }
    case SYS_rt_sigprocmask: {
        if (!a[1])
            return sys6(nr, a);
        unsigned long set = *(unsigned long *)a[1];
        set &= ~(1UL << (SIGSYS - 1));
        long b[6] = {a[0], (long)&set, a[2], a[3], a[4], a[5]};
        return sys6(nr, b);
    }

    /* Calls on a descriptor: onionlab's if it serves the descriptor, native otherwise. */
    case SYS_read:
        if (is_virtual_fd(a[0]))
            return request(nr, a, 0, 0, (void *)a[1], (size_t)a[2]);
        return sys6(nr, a);
    case SYS_write:
        if (is_virtual_fd(a[0]))
            return request(nr, a, (void *)a[1],
                           (size_t)a[2] > OL_DATA_BYTES ? OL_DATA_BYTES : (size_t)a[2], 0, 0);
        return sys6(nr, a);
    case SYS_close:
        if (is_virtual_fd(a[0])) {
            long r = forward(nr, a);
            if (r == 0)
                ol_syscall(SYS_close, a[0], 0, 0, 0, 0, 0); /* the placeholder */
            return r;
        }
        return sys6(nr, a);
    case SYS_pread64:
    case SYS_pwrite64:
    case SYS_readv:
    case SYS_writev:
    case SYS_lseek:
    case SYS_fstat:
    case SYS_ioctl:
        if (is_virtual_fd(a[0]) && a[1] == SIOCGIFCONF)
            return interfaces(nr, a);
        /* The other requests onionlab serves take or give an int through the pointer. */
        if (is_virtual_fd(a[0]))
            return request(nr, a, (void *)a[2], a[2] ? 4 : 0, (void *)a[2], a[2] ? 4 : 0);
        return sys6(nr, a);
    case SYS_fcntl:
    case SYS_getdents64:
    case SYS_ftruncate:
    case SYS_fsync:
    case SYS_fdatasync:
    case SYS_dup:
    case SYS_dup2:
    case SYS_dup3:
    case SYS_fchmod:
    case SYS_fadvise64:
    case SYS_flock:
        if (is_virtual_fd(a[0]))
            return forward(nr, a);
        return sys6(nr, a);
    case SYS_newfstatat:
    case SYS_statx:
        if (is_virtual_fd(a[0]) && (a[0] != AT_FDCWD))
            return forward(nr, a);
        return sys6(nr, a);
    case SYS_open:
    case SYS_openat:
        return open_path(nr, a);

    /* Sockets: always onionlab's, over the simulated network. */
    case SYS_socket:
        return new_descriptor(nr, a, (a[1] & SOCK_CLOEXEC) != 0, 0, 0);
    case SYS_accept:
        return new_descriptor(nr, a, 0, (void *)a[1], (socklen_t *)a[2]);
    case SYS_accept4:
        return new_descriptor(nr, a, (a[3] & SOCK_CLOEXEC) != 0, (void *)a[1], (socklen_t *)a[2]);
    case SYS_connect:
    case SYS_bind:
        return request(nr, a, (void *)a[1], (size_t)a[2] > 128 ? 128 : (size_t)a[2], 0, 0);
    case SYS_sendto:
        return send_to(a);
    case SYS_recvfrom:
        return receive_from(a);
    case SYS_setsockopt:
        return request(nr, a, (void *)a[3], (size_t)a[4] > 256 ? 256 : (size_t)a[4], 0, 0);
    case SYS_getsockopt:
        return with_sized_result(nr, a, (void *)a[3], (socklen_t *)a[4]);
    case SYS_getsockname:
    case SYS_getpeername:
        return with_sized_result(nr, a, (void *)a[1], (socklen_t *)a[2]);
    case SYS_pipe:
        return two_descriptors(nr, a, 0, (int *)a[0]);
    case SYS_pipe2:
        return two_descriptors(nr, a, (a[1] & O_CLOEXEC) != 0, (int *)a[0]);
    case SYS_socketpair:
        return two_descriptors(nr, a, (a[1] & SOCK_CLOEXEC) != 0, (int *)a[3]);
    case SYS_epoll_create:
        return new_descriptor(nr, a, 0, 0, 0);
    case SYS_epoll_create1:
        return new_descriptor(nr, a, (a[0] & EPOLL_CLOEXEC) != 0, 0, 0);
    case SYS_eventfd:
        return new_descriptor(nr, a, 0, 0, 0);
    case SYS_eventfd2:
        return new_descriptor(nr, a, (a[1] & EFD_CLOEXEC) != 0, 0, 0);
    case SYS_epoll_ctl:
        return request(nr, a, (void *)a[3], a[3] ? 12 : 0, 0, 0);
    case SYS_epoll_wait:
    case SYS_epoll_pwait: {
        size_t bytes = a[2] > 0 ? (size_t)a[2] * 12 : 0;
        if (bytes > OL_DATA_BYTES)
            bytes = OL_DATA_BYTES;
        return request(nr, a, 0, 0, (void *)a[1], bytes);
    }
    case SYS_poll: {
        size_t bytes = (size_t)a[1] * 8;
        if (bytes > OL_DATA_BYTES)
            return -EINVAL;
        return request(nr, a, (void *)a[0], bytes, (void *)a[0], bytes);
    }
    case SYS_ppoll: {
        size_t bytes = (size_t)a[1] * 8;
        long ns = timeout_ns((const struct timespec *)a[2]);
        if (bytes > OL_DATA_BYTES || ns == -2)
            return -EINVAL;
        long b[6] = {a[0], a[1], ns, 0, 0, 0};
        return request(nr, b, (void *)a[0], bytes, (void *)a[0], bytes);
    }
    case SYS_select: {
        const struct timeval *tv = (const struct timeval *)a[4];
        if (tv && (tv->tv_sec < 0 || tv->tv_usec < 0 || tv->tv_usec >= 1000000))
            return -EINVAL;
        long ns = tv ? tv->tv_sec * 1000000000L + tv->tv_usec * 1000L : -1;
        return select_call(nr, a, ns);
    }
    case SYS_pselect6: {
        long ns = timeout_ns((const struct timespec *)a[4]);
        if (ns == -2)
            return -EINVAL;
        return select_call(nr, a, ns);
    }
    case SYS_timerfd_create:
        return new_descriptor(nr, a, (a[1] & TFD_CLOEXEC) != 0, 0, 0);
    case SYS_timerfd_settime: {
        unsigned char old[sizeof(struct itimerspec)];
        long r = request(nr, a, (void *)a[2], a[2] ? sizeof(struct itimerspec) : 0, old,
                         sizeof old);
        if (r == 0 && a[3])
            copy_bytes((void *)a[3], old, sizeof old);
        return r;
    }
    case SYS_timerfd_gettime:
        return request(nr, a, 0, 0, (void *)a[1], a[1] ? sizeof(struct itimerspec) : 0);

    /* The process's own memory, files and identity: native. */
    case SYS_mmap:
    case SYS_munmap:
    case SYS_mprotect:
    case SYS_madvise:
    case SYS_mremap:
    case SYS_brk:
    case SYS_msync:
    case SYS_mincore:
    case SYS_stat:
    case SYS_lstat:
    case SYS_access:
    case SYS_faccessat:
    case SYS_faccessat2:
    case SYS_readlink:
    case SYS_readlinkat:
    case SYS_mkdir:
    case SYS_mkdirat:
    case SYS_rmdir:
    case SYS_unlink:
    case SYS_unlinkat:
    case SYS_rename:
    case SYS_renameat:
    case SYS_renameat2:
    case SYS_chmod:
    case SYS_getcwd:
    case SYS_chdir:
    case SYS_umask:
    case SYS_truncate:
    case SYS_sigaltstack:
    case SYS_rt_sigpending:
    case SYS_arch_prctl:
    case SYS_set_robust_list:
    case SYS_rseq:
    case SYS_getuid:
    case SYS_geteuid:
    case SYS_getgid:
    case SYS_getegid:
    case SYS_getresuid:
    case SYS_getresgid:
    case SYS_getgroups:
    case SYS_getrlimit:
    case SYS_setrlimit:
        return sys6(nr, a);
    case SYS_prlimit64: {
        /* Its own limits (onionlab set the descriptor limit before the program started); no
         * other process is there for it to see. */
        if (a[0] != 0 && a[0] != ol->pid)
            return -ESRCH;
        long b[6] = {0, a[1], a[2], a[3], 0, 0};
        return sys6(nr, b);
    }

    /* Threads: onionlab's, which runs them one at a time. */
    case SYS_clone:
        return start_thread(nr, a[0], a[1], a[2], a[3], a[4], uc);
    case SYS_clone3:
        return start_thread3(a, uc);
    case SYS_futex:
        return futex(a);

    /* Served by onionlab, with what the call carries. */
    case SYS_nanosleep:
        return request(nr, a, (void *)a[0], a[0] ? sizeof(struct timespec) : 0, 0, 0);
    case SYS_clock_nanosleep:
        return request(nr, a, (void *)a[2], a[2] ? sizeof(struct timespec) : 0, 0, 0);
    case SYS_getrandom:
        return request(nr, a, 0, 0, (void *)a[0], (size_t)a[1]);
    case SYS_uname:
        return request(nr, a, 0, 0, (void *)a[0], a[0] ? sizeof(struct utsname) : 0);
    case SYS_sysinfo:
        return request(nr, a, 0, 0, (void *)a[0], a[0] ? sizeof(struct sysinfo) : 0);
    case SYS_exit_group:
        forward(nr, a);
        return ol_syscall(SYS_exit_group, a[0], 0, 0, 0, 0, 0);
    case SYS_exit:
        return exit_thread(a[0]);

    default:
        /* Unknown to the shim: onionlab answers it (ENOSYS, counted, for what it does not
         * implement). */
        return forward(nr, a);
    }
}

static void on_sigsys(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)info;
    ucontext_t *uc = context;
    greg_t *r = uc->uc_mcontext.gregs;
    long a[6] = {r[REG_RDI], r[REG_RSI], r[REG_RDX], r[REG_R10], r[REG_R8], r[REG_R9]};
    r[REG_RAX] = dispatch(r[REG_RAX], a, uc);
}

/* ---- Libc's time functions, without a trap ---- */

EXPORT int clock_gettime(clockid_t clock, struct timespec *ts) {
    long r = ol ? sim_clock_gettime(clock, ts)
                : ol_syscall(SYS_clock_gettime, clock, (long)ts, 0, 0, 0, 0);
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return 0;
}

EXPORT int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    long r = ol ? sim_gettimeofday(tv, tz)
                : ol_syscall(SYS_gettimeofday, (long)tv, (long)tz, 0, 0, 0, 0);
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    return 0;
}

EXPORT time_t time(time_t *t) {
    return ol ? sim_time(t) : ol_syscall(SYS_time, (long)t, 0, 0, 0, 0, 0);
}

/* ---- Set-up ---- */

/* The address of the vDSO's function `name`, or NULL. */
static void *vdso_function(const char *name) {
    uintptr_t base = getauxval(AT_SYSINFO_EHDR);
    if (!base)
        return NULL;
    Elf64_Ehdr *eh = (Elf64_Ehdr *)base;
    Elf64_Phdr *ph = (Elf64_Phdr *)(base + eh->e_phoff);
    uintptr_t bias = 0;
    Elf64_Dyn *dyn = NULL;
    int have_bias = 0;
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type == PT_LOAD && !have_bias) {
            bias = base + ph[i].p_offset - ph[i].p_vaddr;
            have_bias = 1;
        }
        if (ph[i].p_type == PT_DYNAMIC)
            dyn = (Elf64_Dyn *)(base + ph[i].p_offset);
    }
    if (!dyn)
        return NULL;
    Elf64_Sym *syms = NULL;
    const char *names = NULL;
    uint32_t *hash = NULL;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        if (dyn->d_tag == DT_SYMTAB)
            syms = (Elf64_Sym *)(bias + dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_STRTAB)
            names = (const char *)(bias + dyn->d_un.d_ptr);
        else if (dyn->d_tag == DT_HASH)
            hash = (uint32_t *)(bias + dyn->d_un.d_ptr);
    }
    if (!syms || !names || !hash)
        return NULL;
    for (uint32_t i = 0; i < hash[1]; i++)
        if (syms[i].st_name && same_str(names + syms[i].st_name, name) && syms[i].st_value)
            return (void *)(bias + syms[i].st_value);
    return NULL;
}

/* Makes the vDSO's function `name` a real system call `nr` (`mov eax, nr; syscall; ret`), which
 * the filter then traps: libc reaches the vDSO through its own pointers, not through the
 * functions above. Returns 0, or -1 if the function could not be rewritten. */
static int patch_vdso(const char *name, long nr) {
    unsigned char *f = vdso_function(name);
    if (!f)
        return 0; /* not in this kernel's vDSO: nothing to bypass the filter */
    unsigned char stub[8] = {0xb8, (unsigned char)nr, (unsigned char)(nr >> 8), 0, 0,
                             0x0f, 0x05, 0xc3};
    /* The kernel does not let a part of the vDSO's mapping change its protection, only the
     * whole of it. */
    uintptr_t base = getauxval(AT_SYSINFO_EHDR);
    Elf64_Ehdr *eh = (Elf64_Ehdr *)base;
    Elf64_Phdr *ph = (Elf64_Phdr *)(base + eh->e_phoff);
    size_t len = 0;
    for (int i = 0; i < eh->e_phnum; i++)
        if (ph[i].p_type == PT_LOAD && ph[i].p_offset + ph[i].p_memsz > len)
            len = ph[i].p_offset + ph[i].p_memsz;
    len = (len + 4095) & ~(size_t)4095;
    if (mprotect((void *)base, len, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
        return -1;
    copy_bytes(f, stub, sizeof stub);
    mprotect((void *)base, len, PROT_READ | PROT_EXEC);
    return 0;
}

static void fail(const char *what) {
    static const char prefix[] = "onionlab shim: cannot ";
    ol_syscall(SYS_write, 2, (long)prefix, sizeof prefix - 1, 0, 0, 0);
    ol_syscall(SYS_write, 2, (long)what, (long)cstr_len(what, 200), 0, 0, 0);
    ol_syscall(SYS_write, 2, (long)"\n", 1, 0, 0, 0);
    ol_syscall(SYS_exit_group, 126, 0, 0, 0, 0, 0);
}

static void install_filter(void) {
    uintptr_t ip = (uintptr_t)ol_syscall_end;
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_rt_sigreturn, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, instruction_pointer)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)ip, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                 offsetof(struct seccomp_data, instruction_pointer) + 4),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)(ip >> 32), 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
    };
    struct sock_fprog prog = {sizeof code / sizeof code[0], code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        fail("set no_new_privs");
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        fail("install the seccomp filter");
}

__attribute__((constructor)) static void ol_start(void) {
    const char *fd_text = getenv("ONIONLAB_SHM_FD");
    if (!fd_text)
        return; /* loaded outside onionlab: stay out of the way */
    const char *hosts = getenv("ONIONLAB_HOSTS");
    if (hosts && strlen(hosts) < sizeof hosts_path)
        strcpy(hosts_path, hosts);
    int fd = atoi(fd_text);
    void *page = mmap(NULL, sizeof(struct ol_shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (page == MAP_FAILED)
        fail("map the shared page");
    close(fd);
    struct ol_shared *shared = page;
    if (shared->magic != OL_MAGIC || shared->version != OL_VERSION)
        fail("use the shared page (another onionlab version?)");
    real_pid = sys0(SYS_getpid);
    real_parent = sys0(SYS_getppid);
    /* Linux clears the main thread's `alive` word when it ends, as it does a new thread's. */
    shared->threads[0].alive =
        (uint32_t)ol_syscall(SYS_set_tid_address, (long)&shared->threads[0].alive, 0, 0, 0, 0, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO;
    if (sigaction(SIGSYS, &sa, NULL) != 0)
        fail("install the SIGSYS handler");
    sigset_t sys;
    sigemptyset(&sys);
    sigaddset(&sys, SIGSYS);
    sigprocmask(SIG_UNBLOCK, &sys, NULL);
    if (patch_vdso("__vdso_clock_gettime", SYS_clock_gettime) ||
        patch_vdso("__vdso_gettimeofday", SYS_gettimeofday) ||
        patch_vdso("__vdso_time", SYS_time) || patch_vdso("__vdso_getcpu", SYS_getcpu))
        fail("rewrite the vDSO's time functions");
    ol = shared;
    install_filter();
    long none[6] = {0, 0, 0, 0, 0, 0};
    forward(OL_REQ_START, none);
}
