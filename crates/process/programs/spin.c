/* A test program for managed processes: says so, then spins forever without a system call, as
 * a program stuck in a busy loop would. onionlab must stop it after its stall limit, and kill
 * it when the run is stopped. */
#include <stdio.h>

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("spinning\n");
    volatile unsigned long n = 0;
    for (;;)
        n++;
}
