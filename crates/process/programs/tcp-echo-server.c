/* A test program for managed processes: a blocking TCP echo server.
 *
 * usage: tcp-echo-server PORT COUNT
 *
 * Listens on 0.0.0.0:PORT (SO_REUSEADDR), accepts COUNT connections one after another and echoes
 * every byte of each back until its peer closes, printing "connection N: echoed B bytes" for
 * each; then exits 0. Any failing call ends it with a message on stderr and status 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

/* Writes all of buf, as a blocking write may still return short (on a signal). */
static void write_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("write");
        buf += w;
        n -= (size_t)w;
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 3) {
        fprintf(stderr, "usage: tcp-echo-server PORT COUNT\n");
        return 2;
    }
    int port = (int)num(argv[1], 1, 65535, "port");
    long count = num(argv[2], 0, 1000000, "count");

    int ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0)
        die("socket");
    int one = 1;
    if (setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
        die("setsockopt SO_REUSEADDR");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0)
        die("bind");
    if (listen(ls, 16) < 0)
        die("listen");
    printf("listening on port %d\n", port);

    static char buf[65536];
    for (long n = 1; n <= count; n++) {
        int c = accept(ls, NULL, NULL);
        if (c < 0)
            die("accept");
        long long total = 0;
        for (;;) {
            ssize_t r = read(c, buf, sizeof buf);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                die("read");
            if (r == 0)
                break; /* the peer shut its side down: we are done with it */
            write_all(c, buf, (size_t)r);
            total += r;
        }
        if (close(c) < 0)
            die("close");
        printf("connection %ld: echoed %lld bytes\n", n, total);
    }
    if (close(ls) < 0)
        die("close");
    return 0;
}
