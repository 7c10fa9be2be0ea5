/* A process whose wall clock is off and whose monotonic clock is not, as on a host whose
 * clock is wrong: LD_PRELOAD=clockshift.so CLOCKSHIFT_SECONDS=-60 <command>.
 *
 * Only the wall clock (CLOCK_REALTIME and its coarse variant, gettimeofday, time) moves
 * by CLOCKSHIFT_SECONDS; sleeps and timed waits are untouched. Debian's libfaketime 0.9.10
 * with FAKETIME_DONT_FAKE_MONOTONIC=1 makes Python's time.sleep fail with EINVAL (it
 * shifts clock_nanosleep's absolute monotonic deadline), and without it every timed wait
 * blocks for years; the clock-skew tests need neither. Built by tests/conftest.py. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long shift_seconds(void) {
    static int read;
    static long shift;
    if (!read) {
        const char *text = getenv("CLOCKSHIFT_SECONDS");
        shift = text ? strtol(text, NULL, 10) : 0;
        read = 1;
    }
    return shift;
}

static int real_clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real)
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    return real(id, ts);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = real_clock_gettime(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
        ts->tv_sec += shift_seconds();
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return -1;
    if (tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
