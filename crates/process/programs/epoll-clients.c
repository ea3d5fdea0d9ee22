/* A test program for managed processes: many echo clients at once, on one epoll instance.
 *
 * usage: epoll-clients HOST PORT N BYTES
 *
 * Resolves HOST (getaddrinfo, AF_INET) and opens N connections to it at once with non-blocking
 * connects. On each connection K (from 0) it sends BYTES bytes, byte i being (i*7 + K) & 0xff,
 * reads the echo back, checks it and closes. Prints "N clients echoed N*BYTES bytes in T ns",
 * the time from before the first connect until the last connection is done (CLOCK_MONOTONIC).
 * Any failure ends it with a message on stderr and status 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

struct conn {
    int fd, connected;
    size_t sent, got;
    char *out, *in;
};

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 5) {
        fprintf(stderr, "usage: epoll-clients HOST PORT N BYTES\n");
        return 2;
    }
    num(argv[2], 1, 65535, "port");
    long n = num(argv[3], 1, 10000, "connection count");
    size_t bytes = (size_t)num(argv[4], 1, 1L << 26, "byte count");
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    int e = getaddrinfo(argv[1], argv[2], &hints, &ai);
    if (e != 0) {
        fprintf(stderr, "epoll-clients: cannot resolve %s: %s\n", argv[1], gai_strerror(e));
        return 1;
    }
    int ep = epoll_create1(0);
    if (ep < 0)
        die("epoll_create1");
    struct conn *cs = calloc((size_t)n, sizeof *cs);
    if (!cs)
        die("calloc");

    long long t0 = now_ns();
    for (long k = 0; k < n; k++) {
        struct conn *c = &cs[k];
        if (!(c->out = malloc(bytes)) || !(c->in = malloc(bytes)))
            die("malloc");
        for (size_t i = 0; i < bytes; i++)
            c->out[i] = (char)((i * 7 + (size_t)k) & 0xff);
        if ((c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0)) < 0)
            die("socket");
        if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS)
            die("connect");
        /* Level-triggered: writable once connected, and while there is more to send. */
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
            die("epoll_ctl");
    }
    freeaddrinfo(ai);

    long done = 0;
    struct epoll_event evs[64];
    while (done < n) {
        int m = epoll_wait(ep, evs, 64, -1);
        if (m < 0 && errno == EINTR)
            continue;
        if (m < 0)
            die("epoll_wait");
        for (int i = 0; i < m; i++) {
            struct conn *c = evs[i].data.ptr;
            if (!c->connected) { /* the first event tells how the connect went */
                int err = 0;
                socklen_t len = sizeof err;
                if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
                    die("getsockopt SO_ERROR");
                if ((errno = err))
                    die("connect");
                c->connected = 1;
            }
            if ((evs[i].events & EPOLLOUT) && c->sent < bytes) {
                ssize_t w = write(c->fd, c->out + c->sent, bytes - c->sent);
                if (w < 0 && errno != EAGAIN)
                    die("write");
                if (w > 0 && (c->sent += (size_t)w) == bytes) {
                    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
                    if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
                        die("epoll_ctl");
                }
            }
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
                ssize_t r = read(c->fd, c->in + c->got, bytes - c->got);
                if (r < 0 && errno != EAGAIN)
                    die("read");
                if (r == 0) {
                    fprintf(stderr, "epoll-clients: server closed connection %ld early\n",
                            (long)(c - cs));
                    return 1;
                }
                if (r > 0 && (c->got += (size_t)r) == bytes) {
                    if (memcmp(c->in, c->out, bytes) != 0) {
                        fprintf(stderr, "epoll-clients: connection %ld: echo differs\n",
                                (long)(c - cs));
                        return 1;
                    }
                    if (close(c->fd) < 0) /* also takes it out of the epoll set */
                        die("close");
                    done++;
                }
            }
        }
    }
    printf("%ld clients echoed %lld bytes in %lld ns\n", n, (long long)n * (long long)bytes,
           now_ns() - t0);
    return 0;
}
