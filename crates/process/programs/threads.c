/* A test program for managed processes: threads, a mutex, condition variables and an eventfd.
 *
 * usage: threads WORKERS ITEMS
 *
 * The main thread hands the items 1..ITEMS to WORKERS threads through a small queue guarded by a
 * mutex and two condition variables (not empty, not full). A worker adds each item it takes to
 * a shared sum and then signals its completion by writing 1 to an eventfd, which the main thread
 * reads (blocking) until all ITEMS are counted. Worker 0 also sleeps 10 ms (nanosleep) after
 * every 10th item it takes, so the others run on meanwhile. Prints "sum S", "items I" and
 * "elapsed T ns" (CLOCK_MONOTONIC; deterministic only in simulation). Any failure ends it with a
 * message on stderr and status 1. */
// build: -pthread
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define QUEUE 4

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER, not_full = PTHREAD_COND_INITIALIZER;
static long queue[QUEUE], head, tail; /* items queue[head % QUEUE .. tail % QUEUE] wait */
static int finished;                  /* no more items will come */
static unsigned long long sum;
static int efd;

/* pthread calls return their error instead of setting errno. */
static void check(int err, const char *what) {
    if (err) {
        errno = err;
        die(what);
    }
}

static void *worker(void *arg) {
    long id = (long)arg, taken = 0;
    for (;;) {
        check(pthread_mutex_lock(&lock), "pthread_mutex_lock");
        while (head == tail && !finished)
            check(pthread_cond_wait(&not_empty, &lock), "pthread_cond_wait");
        if (head == tail) { /* finished, and nothing left */
            check(pthread_mutex_unlock(&lock), "pthread_mutex_unlock");
            return NULL;
        }
        long item = queue[head++ % QUEUE];
        check(pthread_cond_signal(&not_full), "pthread_cond_signal");
        sum += (unsigned long long)item;
        check(pthread_mutex_unlock(&lock), "pthread_mutex_unlock");
        uint64_t one = 1;
        if (write(efd, &one, sizeof one) != sizeof one)
            die("eventfd write");
        if (id == 0 && ++taken % 10 == 0) {
            struct timespec d = {0, 10000000};
            while (nanosleep(&d, &d) < 0)
                if (errno != EINTR)
                    die("nanosleep");
        }
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 3) {
        fprintf(stderr, "usage: threads WORKERS ITEMS\n");
        return 2;
    }
    long workers = num(argv[1], 1, 256, "worker count");
    long items = num(argv[2], 0, 100000000, "item count");
    if ((efd = eventfd(0, 0)) < 0)
        die("eventfd");
    long long t0 = now_ns();
    pthread_t *ts = malloc((size_t)workers * sizeof *ts);
    if (!ts)
        die("malloc");
    for (long w = 0; w < workers; w++)
        check(pthread_create(&ts[w], NULL, worker, (void *)w), "pthread_create");

    for (long i = 1; i <= items; i++) {
        check(pthread_mutex_lock(&lock), "pthread_mutex_lock");
        while (tail - head == QUEUE)
            check(pthread_cond_wait(&not_full, &lock), "pthread_cond_wait");
        queue[tail++ % QUEUE] = i;
        check(pthread_cond_signal(&not_empty), "pthread_cond_signal");
        check(pthread_mutex_unlock(&lock), "pthread_mutex_unlock");
    }
    /* Each read takes (and resets) the count of items done since the one before. */
    uint64_t done = 0, n;
    while (done < (uint64_t)items) {
        if (read(efd, &n, sizeof n) != sizeof n)
            die("eventfd read");
        done += n;
    }

    check(pthread_mutex_lock(&lock), "pthread_mutex_lock");
    finished = 1;
    check(pthread_cond_broadcast(&not_empty), "pthread_cond_broadcast");
    check(pthread_mutex_unlock(&lock), "pthread_mutex_unlock");
    for (long w = 0; w < workers; w++)
        check(pthread_join(ts[w], NULL), "pthread_join");
    check(pthread_mutex_lock(&lock), "pthread_mutex_lock");
    unsigned long long s = sum;
    check(pthread_mutex_unlock(&lock), "pthread_mutex_unlock");
    printf("sum %llu\nitems %llu\nelapsed %lld ns\n", s, (unsigned long long)done, now_ns() - t0);
    free(ts);
    return 0;
}
