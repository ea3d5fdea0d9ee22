/* A test program for managed processes: a timerfd and an eventfd under poll(), then select().
 *
 * usage: timers
 *
 * Arms a CLOCK_MONOTONIC timerfd to fire first after 100 ms and then every 250 ms, and poll()s
 * it together with an eventfd. It reads the timer's expirations 5 times, printing
 * "tick K: expirations E at T ns" (T since the start); after tick 2 it writes 2 to the eventfd
 * itself, so that one poll() wakes for the eventfd instead: "eventfd V at T ns". It then sleeps
 * 600 ms without reading the timer and reads how often it expired meanwhile: "after sleeping
 * 600 ms: expirations E". Then it calls select() on no descriptors with a 30 ms timeout and
 * prints "select timed out after T ns", and select() on the eventfd, readable, with none.
 * Times are CLOCK_MONOTONIC. Any failure ends it with a message on stderr and status 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    (void)argv;
    if (argc != 1) {
        fprintf(stderr, "usage: timers\n");
        return 2;
    }
    int tfd = timerfd_create(CLOCK_MONOTONIC, 0);
    if (tfd < 0)
        die("timerfd_create");
    int efd = eventfd(0, 0);
    if (efd < 0)
        die("eventfd");
    long long t0 = now_ns();
    struct itimerspec its = {.it_value = {0, 100000000}, .it_interval = {0, 250000000}};
    if (timerfd_settime(tfd, 0, &its, NULL) < 0)
        die("timerfd_settime");

    int ticks = 0;
    while (ticks < 5) {
        struct pollfd p[2] = {{.fd = tfd, .events = POLLIN}, {.fd = efd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            die("poll");
        }
        uint64_t v;
        if (p[0].revents & POLLIN) {
            if (read(tfd, &v, sizeof v) != sizeof v)
                die("timerfd read");
            printf("tick %d: expirations %llu at %lld ns\n", ++ticks, (unsigned long long)v,
                   now_ns() - t0);
            if (ticks == 2) {
                uint64_t two = 2;
                if (write(efd, &two, sizeof two) != sizeof two)
                    die("eventfd write");
            }
        }
        if (p[1].revents & POLLIN) {
            if (read(efd, &v, sizeof v) != sizeof v)
                die("eventfd read");
            printf("eventfd %llu at %lld ns\n", (unsigned long long)v, now_ns() - t0);
        }
        if ((p[0].revents | p[1].revents) & (POLLERR | POLLHUP | POLLNVAL)) {
            fprintf(stderr, "timers: poll reported an error\n");
            return 1;
        }
    }
    struct timespec d = {0, 600000000};
    while (nanosleep(&d, &d) < 0)
        if (errno != EINTR)
            die("nanosleep");
    uint64_t v;
    if (read(tfd, &v, sizeof v) != sizeof v)
        die("timerfd read");
    printf("after sleeping 600 ms: expirations %llu\n", (unsigned long long)v);
    if (close(tfd) < 0)
        die("close");

    struct timeval tv = {0, 30000};
    long long s0 = now_ns();
    int r = select(0, NULL, NULL, NULL, &tv);
    if (r < 0)
        die("select");
    if (r != 0) {
        fprintf(stderr, "timers: select returned %d\n", r);
        return 1;
    }
    printf("select timed out after %lld ns\n", now_ns() - s0);

    uint64_t one = 1;
    if (write(efd, &one, sizeof one) != sizeof one)
        die("eventfd write");
    fd_set readable;
    FD_ZERO(&readable);
    FD_SET(efd, &readable);
    r = select(efd + 1, &readable, NULL, NULL, NULL);
    if (r != 1 || !FD_ISSET(efd, &readable)) {
        fprintf(stderr, "timers: select on the eventfd returned %d\n", r);
        return 1;
    }
    printf("select: eventfd readable\n");
    if (close(efd) < 0)
        die("close");
    return 0;
}
