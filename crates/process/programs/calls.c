/* A benchmark program for managed processes: makes COUNT system calls of one kind in a tight
 * loop and prints how many it made, so that the cost of a call through the shim can be set
 * against the same call made natively (run it outside onionlab for that).
 *   calls KIND COUNT
 * KIND: `local` (getppid: trapped and answered by the shim itself), `native` (fstat on
 * standard output: trapped and made natively by the shim), `served` (uname: trapped and
 * answered by onionlab, a round trip through the shared page). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: calls local|native|served COUNT\n");
        return 2;
    }
    long count = atol(argv[2]);
    struct stat st;
    struct utsname u;
    for (long i = 0; i < count; i++) {
        if (!strcmp(argv[1], "local"))
            getppid();
        else if (!strcmp(argv[1], "native"))
            fstat(1, &st);
        else if (!strcmp(argv[1], "served"))
            uname(&u);
        else {
            fprintf(stderr, "calls: unknown kind %s\n", argv[1]);
            return 2;
        }
    }
    printf("%ld %s calls\n", count, argv[1]);
    return 0;
}
