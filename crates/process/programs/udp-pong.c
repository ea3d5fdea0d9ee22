/* A test program for managed processes: a UDP echo responder.
 *
 * usage: udp-pong PORT COUNT
 *
 * Binds a UDP socket to 0.0.0.0:PORT and sends each of COUNT datagrams back, byte for byte, to
 * the address it came from; then prints "answered COUNT datagrams" and exits 0. Any failure
 * ends it with a message on stderr and status 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 3) {
        fprintf(stderr, "usage: udp-pong PORT COUNT\n");
        return 2;
    }
    int port = (int)num(argv[1], 1, 65535, "port");
    long count = num(argv[2], 0, 100000000, "count");
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0)
        die("socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0)
        die("bind");
    printf("listening on udp port %d\n", port);

    static char buf[65536];
    for (long k = 0; k < count; k++) {
        struct sockaddr_in from;
        socklen_t len = sizeof from;
        ssize_t n = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &len);
        if (n < 0)
            die("recvfrom");
        ssize_t w = sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&from, len);
        if (w < 0)
            die("sendto");
        if (w != n) {
            fprintf(stderr, "udp-pong: sent %zd of %zd bytes\n", w, n);
            return 1;
        }
    }
    if (close(fd) < 0)
        die("close");
    printf("answered %ld datagrams\n", count);
    return 0;
}
