/* What the test programs share: failing with a message, reading a number from an argument,
 * and the monotonic clock in nanoseconds. Messages start with the program's name. */
#ifndef ONIONLAB_PROGRAMS_COMMON_H
#define ONIONLAB_PROGRAMS_COMMON_H
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define UNUSED __attribute__((unused))

/* A call failed: its name and errno's message on stderr, status 1. */
UNUSED static void die(const char *what) {
    fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, strerror(errno));
    exit(1);
}

/* Something other than a call went wrong: the message on stderr, status 1. */
UNUSED static void fail(const char *msg) {
    fprintf(stderr, "%s: %s\n", program_invocation_short_name, msg);
    exit(1);
}

/* Argument `s` as a number from `min` to `max`, or status 2 with a message naming `what`. */
UNUSED static long num(const char *s, long min, long max, const char *what) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "%s: bad %s '%s'\n", program_invocation_short_name, what, s);
        exit(2);
    }
    return v;
}

/* CLOCK_MONOTONIC in nanoseconds. */
UNUSED static long long now_ns(void) {
    struct timespec t;
    if (clock_gettime(CLOCK_MONOTONIC, &t) < 0)
        die("clock_gettime");
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

#endif
