/* A test program for managed processes: UDP round trips, one at a time.
 *
 * usage: udp-ping HOST PORT COUNT SIZE
 *
 * Resolves HOST (getaddrinfo, AF_INET) and sends it COUNT datagrams of SIZE bytes, each once the
 * reply to the one before has come; byte i of datagram K (from 1) is (i*7 + K) & 0xff. Checks
 * each reply's content and prints "ping K: T ns", its round trip time (CLOCK_MONOTONIC), and at
 * the end "COUNT replies". A reply that does not come within 5 s (of simulated time, when
 * simulated) is a failure: UDP does not resend. Any failure ends it with a message on stderr
 * and status 1. */
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
    if (argc != 5) {
        fprintf(stderr, "usage: udp-ping HOST PORT COUNT SIZE\n");
        return 2;
    }
    num(argv[2], 1, 65535, "port");
    long count = num(argv[3], 0, 100000000, "count");
    size_t size = (size_t)num(argv[4], 0, 65507, "size"); /* the largest IPv4 UDP payload */
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai;
    int e = getaddrinfo(argv[1], argv[2], &hints, &ai);
    if (e != 0) {
        fprintf(stderr, "udp-ping: cannot resolve %s: %s\n", argv[1], gai_strerror(e));
        return 1;
    }
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0)
        die("socket");

    static char out[65536], in[65536];
    for (long k = 1; k <= count; k++) {
        for (size_t i = 0; i < size; i++)
            out[i] = (char)((i * 7 + (size_t)k) & 0xff);
        long long t0 = now_ns();
        ssize_t w = sendto(fd, out, size, 0, ai->ai_addr, ai->ai_addrlen);
        if (w < 0)
            die("sendto");
        if ((size_t)w != size) {
            fprintf(stderr, "udp-ping: sent %zd of %zu bytes\n", w, size);
            return 1;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, 5000);
        if (r < 0)
            die("poll");
        if (r == 0) {
            fprintf(stderr, "udp-ping: no reply to ping %ld within 5 s\n", k);
            return 1;
        }
        ssize_t n = recvfrom(fd, in, sizeof in, 0, NULL, NULL);
        if (n < 0)
            die("recvfrom");
        if ((size_t)n != size || memcmp(in, out, size) != 0) {
            fprintf(stderr, "udp-ping: reply %ld differs from what was sent\n", k);
            return 1;
        }
        printf("ping %ld: %lld ns\n", k, now_ns() - t0);
    }
    freeaddrinfo(ai);
    if (close(fd) < 0)
        die("close");
    printf("%ld replies\n", count);
    return 0;
}
