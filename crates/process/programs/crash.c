/* A test program for managed processes: says so, then dies of a segmentation fault, as a
 * program with a bug would. onionlab must record the signal and go on with the run. */
#include <stdio.h>

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("about to crash\n");
    volatile int *nowhere = (int *)16;
    *nowhere = 1;
    return 0;
}
