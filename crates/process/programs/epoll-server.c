/* A test program for managed processes: a non-blocking echo server on one epoll instance.
 *
 * usage: epoll-server PORT CLIENTS MODE      (MODE: level or edge)
 *
 * Listens on 0.0.0.0:PORT and serves connections until CLIENTS of them have closed, echoing
 * everything they send. In edge mode every descriptor is registered with EPOLLET and read (or
 * accepted from) until EAGAIN; in level mode one chunk is read (one connection accepted) per
 * wakeup. Output that cannot be written at once waits in the connection's buffer for EPOLLOUT,
 * and the connection is not read meanwhile. Prints "clients C", "bytes B" and
 * "epoll_wait calls W" (W depends on timing: deterministic only in simulation). Any failure
 * ends it with a message on stderr and status 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

#define CHUNK 16384

struct conn {
    int fd;
    size_t off, len; /* unsent bytes are buf[off..len] */
    char buf[CHUNK];
};

static int ep, edge;

/* Registers (op ADD) or changes (op MOD) fd's interest: reading, or writing while output waits. */
static void watch(int op, int fd, void *ptr, int out) {
    struct epoll_event ev = {.events = (out ? EPOLLOUT : EPOLLIN) | (edge ? EPOLLET : 0),
                             .data.ptr = ptr};
    if (epoll_ctl(ep, op, fd, &ev) < 0)
        die("epoll_ctl");
}

/* Sends what is buffered; returns 1 when all of it went. */
static int flush(struct conn *c) {
    while (c->off < c->len) {
        ssize_t w = write(c->fd, c->buf + c->off, c->len - c->off);
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (w < 0)
            die("write");
        c->off += (size_t)w;
    }
    c->off = c->len = 0;
    return 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 4 || (strcmp(argv[3], "level") && strcmp(argv[3], "edge"))) {
        fprintf(stderr, "usage: epoll-server PORT CLIENTS level|edge\n");
        return 2;
    }
    int port = (int)num(argv[1], 1, 65535, "port");
    long clients = num(argv[2], 0, 1000000, "client count");
    edge = !strcmp(argv[3], "edge");

    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (ls < 0)
        die("socket");
    int one = 1;
    if (setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
        die("setsockopt SO_REUSEADDR");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0)
        die("bind");
    if (listen(ls, 64) < 0)
        die("listen");
    if ((ep = epoll_create1(0)) < 0)
        die("epoll_create1");
    watch(EPOLL_CTL_ADD, ls, NULL, 0); /* a null pointer stands for the listening socket */
    printf("listening on port %d, %s-triggered\n", port, argv[3]);

    long accepted = 0, closed = 0, waits = 0;
    long long bytes = 0;
    struct epoll_event evs[32];
    while (closed < clients) {
        int n = epoll_wait(ep, evs, 32, -1);
        waits++;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            die("epoll_wait");
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (!c) {
                do {
                    int fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK);
                    if (fd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        break;
                    if (fd < 0)
                        die("accept4");
                    if (!(c = calloc(1, sizeof *c)))
                        die("calloc");
                    c->fd = fd;
                    watch(EPOLL_CTL_ADD, fd, c, 0);
                    accepted++;
                } while (edge);
                continue;
            }
            if (c->len) { /* waiting to write: EPOLLOUT (or an error, which write reports) */
                if (flush(c))
                    watch(EPOLL_CTL_MOD, c->fd, c, 0);
                continue;
            }
            do {
                ssize_t r = read(c->fd, c->buf, CHUNK);
                if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                    break;
                if (r < 0)
                    die("read");
                if (r == 0) { /* the peer closed, and everything it sent has been echoed */
                    if (close(c->fd) < 0) /* closing also removes it from the epoll set */
                        die("close");
                    free(c);
                    closed++;
                    break;
                }
                bytes += r;
                c->len = (size_t)r;
                if (!flush(c)) { /* stop reading until the rest has gone */
                    watch(EPOLL_CTL_MOD, c->fd, c, 1);
                    break;
                }
            } while (edge);
        }
    }
    printf("clients %ld\nbytes %lld\nepoll_wait calls %ld\n", accepted, bytes, waits);
    return 0;
}
