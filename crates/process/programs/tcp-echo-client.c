/* A test program for managed processes: a TCP echo client that times its connect and rounds.
 *
 * usage: tcp-echo-client HOST PORT BYTES [ROUNDS]
 *
 * Resolves HOST (getaddrinfo, AF_INET), connects to it and prints "connected after T ns" (the
 * time connect() took). Then, for each round R of ROUNDS (default 1, numbered from 1), sends
 * BYTES bytes where byte i is (i*7 + R) & 0xff, reads them all back, checks them, and prints
 * "round R: B bytes echoed in T ns". Finally shuts its sending side down, reads until the
 * server closes (expecting nothing more), closes and prints "closed". Times come from
 * CLOCK_MONOTONIC. Any failure ends it with a message on stderr and status 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: tcp-echo-client HOST PORT BYTES [ROUNDS]\n");
        return 2;
    }
    num(argv[2], 1, 65535, "port");
    size_t bytes = (size_t)num(argv[3], 0, 1L << 30, "byte count");
    long rounds = argc == 5 ? num(argv[4], 0, 1000000, "round count") : 1;

    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    int e = getaddrinfo(argv[1], argv[2], &hints, &ai);
    if (e != 0) {
        fprintf(stderr, "tcp-echo-client: cannot resolve %s: %s\n", argv[1], gai_strerror(e));
        return 1;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    long long t0 = now_ns();
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
        die("connect");
    printf("connected after %lld ns\n", now_ns() - t0);
    freeaddrinfo(ai);

    char *out = malloc(bytes + 1), *in = malloc(bytes + 1);
    if (!out || !in)
        fail("out of memory");
    for (long r = 1; r <= rounds; r++) {
        for (size_t i = 0; i < bytes; i++)
            out[i] = (char)((i * 7 + (size_t)r) & 0xff);
        t0 = now_ns();
        /* Sends and receives interleaved, never blocking in a send: writing everything before
         * reading would deadlock once both directions' buffers are full. */
        size_t sent = 0, got = 0;
        while (got < bytes) {
            struct pollfd p = {.fd = fd, .events = POLLIN | (sent < bytes ? POLLOUT : 0)};
            if (poll(&p, 1, -1) < 0) {
                if (errno == EINTR)
                    continue;
                die("poll");
            }
            if (p.revents & POLLIN) {
                ssize_t n = read(fd, in + got, bytes - got);
                if (n < 0)
                    die("read");
                if (n == 0)
                    fail("server closed the connection early");
                got += (size_t)n;
            } else if (p.revents & (POLLERR | POLLHUP)) {
                fail("connection failed");
            }
            if (sent < bytes && (p.revents & POLLOUT)) {
                ssize_t n = send(fd, out + sent, bytes - sent, MSG_DONTWAIT);
                if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                    die("send");
                if (n > 0)
                    sent += (size_t)n;
            }
        }
        if (memcmp(in, out, bytes) != 0)
            fail("echoed bytes differ from those sent");
        printf("round %ld: %zu bytes echoed in %lld ns\n", r, bytes, now_ns() - t0);
    }

    if (shutdown(fd, SHUT_WR) < 0)
        die("shutdown");
    for (;;) {
        ssize_t n = read(fd, in, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            die("read");
        if (n == 0)
            break;
        fail("unexpected bytes after the last round");
    }
    if (close(fd) < 0)
        die("close");
    printf("closed\n");
    free(out);
    free(in);
    return 0;
}
