/* A test program for managed processes: prints the simulated time around sleeps of each kind,
 * random bytes from getrandom and from /dev/urandom, the host's name, the machine (sysinfo) and
 * its descriptor limit, and what an unsupported call (inotify_init1) returns; exits with
 * status 3. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/sysinfo.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static void show_time(const char *what) {
    struct timespec rt, mono;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    printf("%s: realtime %lld.%09ld monotonic %lld.%09ld gettimeofday %lld.%06ld time %lld\n",
           what, (long long)rt.tv_sec, rt.tv_nsec, (long long)mono.tv_sec, mono.tv_nsec,
           (long long)tv.tv_sec, (long)tv.tv_usec, (long long)time(NULL));
}

static void hex(const char *what, const unsigned char *b, size_t n) {
    printf("%s:", what);
    for (size_t i = 0; i < n; i++)
        printf(" %02x", b[i]);
    printf("\n");
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    show_time("start");
    struct timespec d = {1, 500000000};
    nanosleep(&d, NULL);
    show_time("after nanosleep 1.5 s");
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct timespec at = {now.tv_sec + 2, 250};
    clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &at, NULL);
    show_time("after clock_nanosleep to +2 s 250 ns");
    usleep(20000);
    show_time("after usleep 20 ms");
    unsigned char r[16];
    printf("getrandom returned %zd\n", getrandom(r, sizeof r, 0));
    hex("getrandom", r, sizeof r);
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    printf("urandom read returned %zd\n", read(fd, r, sizeof r));
    hex("urandom", r, sizeof r);
    close(fd);
    struct utsname u;
    uname(&u);
    printf("uname: %s %s %s\n", u.sysname, u.nodename, u.machine);
    char name[128];
    gethostname(name, sizeof name);
    printf("hostname: %s pid %d ppid %d\n", name, (int)getpid(), (int)getppid());
    struct sysinfo si;
    sysinfo(&si);
    printf("sysinfo: uptime %ld s, memory %lu MiB, free %lu MiB\n", si.uptime,
           si.totalram * si.mem_unit >> 20, si.freeram * si.mem_unit >> 20);
    struct rlimit nofile;
    getrlimit(RLIMIT_NOFILE, &nofile);
    printf("descriptor limit %llu %llu\n", (unsigned long long)nofile.rlim_cur,
           (unsigned long long)nofile.rlim_max);
    int s = inotify_init1(0);
    printf("inotify_init1 returned %d errno %s\n", s, s < 0 ? strerror(errno) : "none");
    FILE *f = fopen("note.txt", "w");
    fprintf(f, "written natively in the process's directory\n");
    fclose(f);
    show_time("end");
    return 3;
}
