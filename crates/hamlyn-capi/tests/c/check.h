/* Test helpers shared by the C test programs: every call is checked, and a failure
 * names the call, its result code and the line. */
#ifndef HAMLYN_TEST_CHECK_H
#define HAMLYN_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hamlyn.h>

/* Bounded waits: long enough for valgrind, never part of what is tested. */
#define WAIT_MS 60000

#define FAIL(...)                                                                       \
    do {                                                                                \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                 \
        fprintf(stderr, __VA_ARGS__);                                                   \
        fprintf(stderr, "\n");                                                          \
        exit(1);                                                                        \
    } while (0)

/* EXPECT(call, code): `call` returns `code`. */
#define EXPECT(call, code)                                                              \
    do {                                                                                \
        hamlyn_result r_ = (call);                                                      \
        if (r_ != (hamlyn_result)(code)) {                                              \
            FAIL("%s returned %s, expected %s", #call, hamlyn_result_name(r_),          \
                 hamlyn_result_name(code));                                             \
        }                                                                               \
    } while (0)

#define OK(call) EXPECT(call, HAMLYN_RESULT_OK)

#define ASSERT(cond)                                                                    \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            FAIL("assertion failed: %s", #cond);                                        \
        }                                                                               \
    } while (0)

/* The seed text of `t` in a fresh buffer of HAMLYN_SEED_TEXT_MAX bytes (caller frees). */
static inline char *seed_of(const hamlyn_ticket *t) {
    char *buf = malloc(HAMLYN_SEED_TEXT_MAX);
    ASSERT(buf != NULL);
    OK(hamlyn_ticket_to_seed(t, buf, HAMLYN_SEED_TEXT_MAX, NULL));
    return buf;
}

/* Waits (bounded) for the next notification of `q` and checks its kind. */
static inline hamlyn_notification next(const hamlyn_queue *q, uint32_t kind) {
    hamlyn_notification n;
    OK(hamlyn_queue_wait(q, WAIT_MS, &n));
    if (n.kind != kind) {
        FAIL("notification of kind %u, expected %u", n.kind, kind);
    }
    return n;
}

/* The environment variable `name`, which must be set. */
static inline const char *env(const char *name) {
    const char *v = getenv(name);
    if (v == NULL) {
        FAIL("%s is not set", name);
    }
    return v;
}

#endif
