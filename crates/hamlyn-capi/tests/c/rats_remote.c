/* Rats remote write and remote read from C, across two processes. `rats_remote serve`
 * makes a remote-write server (zeroed) and a remote-read server (filled with a
 * pattern), prints their two seeds (one line each) and waits, bounded, until its slot
 * holds exactly what `rats_remote call` writes (the server is never told: it looks).
 * `rats_remote call` (the seeds in $HAMLYN_SEEDS, one per line) reads the pattern back
 * in several sizes, blocking and asynchronously, then writes plainly, scattered and
 * gathered; and checks the errors: seeds of the wrong protocol or no seed, a read too
 * long, past the slot or out of turn, a write outside the slot. */
#include <time.h>

#include "check.h"

#define WRITE_SLOT (3u << 20)
#define READ_SLOT ((2u << 20) + 64)
#define MIB (1u << 20)

static hamlyn_rats *rats;

/* The pattern byte at `i` of stream `k`. */
static uint8_t pattern(uint32_t k, size_t i) {
    return (uint8_t)(i * 31 + i / 253 + k * 7 + 1);
}

static void fill(uint8_t *buf, uint32_t k, size_t len) {
    for (size_t i = 0; i < len; i++) {
        buf[i] = pattern(k, i);
    }
}

/* What `call` writes into the remote-write slot, laid out in `want` (WRITE_SLOT bytes,
 * zero elsewhere). */
static void expected(uint8_t *want) {
    memset(want, 0, WRITE_SLOT);
    want[0] = 0xA5;                     /* 1 B at 0 */
    fill(want + 16, 1, 4099);           /* 4099 B at 16 */
    fill(want + 8192, 2, MIB + 5);      /* 1 MiB + 5 at 8192 */
    memcpy(want + 2 * MIB, "scatter-a", 9);
    fill(want + 2 * MIB + 100, 3, 1000);
    fill(want + 2 * MIB + 5000, 4, MIB / 2);
    /* Gathered: "gather-", 3000 pattern bytes, "-end", contiguous. */
    uint8_t *g = want + 2 * MIB + 4096 + MIB / 2 + 8192;
    memcpy(g, "gather-", 7);
    fill(g + 7, 5, 3000);
    memcpy(g + 3007, "-end", 4);
}

static void pause_a_little(void) {
    struct timespec t = {0, 10 * 1000 * 1000};
    nanosleep(&t, NULL);
}

static long elapsed_ms(const struct timespec *start) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

static int serve(void) {
    hamlyn_rats_remote_write_server *w;
    hamlyn_rats_remote_read_server *r;
    OK(hamlyn_rats_remote_write_server_new(rats, WRITE_SLOT, &w));
    OK(hamlyn_rats_remote_read_server_new(rats, READ_SLOT, &r));
    uint8_t *data = malloc(READ_SLOT);
    ASSERT(data != NULL);
    fill(data, 0, READ_SLOT);
    OK(hamlyn_rats_remote_read_server_write(r, 0, data, READ_SLOT));
    EXPECT(hamlyn_rats_remote_read_server_write(r, READ_SLOT - 1, data, 2), HAMLYN_RESULT_OUT_OF_RANGE);
    free(data);

    char seed[HAMLYN_SEED_TEXT_MAX];
    size_t needed = 0;
    EXPECT(hamlyn_rats_remote_write_server_seed(w, seed, 4, &needed), HAMLYN_RESULT_BUFFER_TOO_SMALL);
    ASSERT(needed > 4 && needed <= sizeof seed);
    OK(hamlyn_rats_remote_write_server_seed(w, seed, sizeof seed, NULL));
    printf("%s\n", seed);
    OK(hamlyn_rats_remote_read_server_seed(r, seed, sizeof seed, NULL));
    printf("%s\n", seed);
    fflush(stdout);

    /* Nothing tells the server: it looks until its slot is what the client wrote. */
    uint8_t *want = malloc(WRITE_SLOT), *got = malloc(WRITE_SLOT);
    ASSERT(want != NULL && got != NULL);
    expected(want);
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        OK(hamlyn_rats_remote_write_server_read(w, 0, got, WRITE_SLOT));
        if (memcmp(got, want, WRITE_SLOT) == 0) {
            break;
        }
        if (elapsed_ms(&start) > WAIT_MS) {
            size_t i = 0;
            while (got[i] == want[i]) {
                i++;
            }
            FAIL("the slot differs at %zu: %u, expected %u", i, got[i], want[i]);
        }
        pause_a_little();
    }
    EXPECT(hamlyn_rats_remote_write_server_read(w, WRITE_SLOT - 1, got, 2), HAMLYN_RESULT_OUT_OF_RANGE);
    free(want);
    free(got);
    hamlyn_rats_remote_read_server_free(r);
    hamlyn_rats_remote_write_server_free(w);
    printf("rats_remote serve: ok\n");
    return 0;
}

/* Line `i` of $HAMLYN_SEEDS, in a fresh buffer (caller frees). */
static char *seed_at(int i) {
    const char *all = env("HAMLYN_SEEDS");
    for (int k = 0; k < i; k++) {
        all = strchr(all, '\n');
        ASSERT(all != NULL);
        all++;
    }
    size_t n = strcspn(all, "\n");
    char *s = malloc(n + 1);
    ASSERT(s != NULL);
    memcpy(s, all, n);
    s[n] = '\0';
    return s;
}

static void sent(hamlyn_send *s) {
    hamlyn_status st;
    OK(hamlyn_send_wait(s, WAIT_MS, &st));
    hamlyn_send_free(s);
    if (st.state != HAMLYN_STATUS_SENT) {
        FAIL("a write ended in state %u (reason %u)", st.state, st.reason);
    }
}

static void reads(const char *seed) {
    hamlyn_rats_remote_read_client *c;
    OK(hamlyn_rats_remote_read_client_new(rats, seed, 2 * MIB, &c));
    uint8_t *want = malloc(READ_SLOT), *got = malloc(2 * MIB);
    ASSERT(want != NULL && got != NULL);
    fill(want, 0, READ_SLOT);

    /* Blocking, several sizes, at an odd offset. */
    const size_t sizes[] = {0, 1, 4099, MIB + 5, 2 * MIB};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        memset(got, 0, 2 * MIB);
        OK(hamlyn_rats_remote_read(c, 3, sizes[k], WAIT_MS, got));
        if (memcmp(got, want + 3, sizes[k]) != 0) {
            FAIL("a read of %zu bytes differs", sizes[k]);
        }
    }

    /* Asynchronous: start, poll for ready, take (a buffer too small keeps the answer). */
    OK(hamlyn_rats_remote_read_start(c, 12345, 70000));
    EXPECT(hamlyn_rats_remote_read_start(c, 0, 1), HAMLYN_RESULT_STATE);
    EXPECT(hamlyn_rats_remote_read(c, 0, 1, WAIT_MS, got), HAMLYN_RESULT_STATE);
    uint32_t ready = 0;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        OK(hamlyn_rats_remote_read_ready(c, &ready));
        if (ready) {
            break;
        }
        ASSERT(elapsed_ms(&start) < WAIT_MS);
    }
    size_t len = 0;
    EXPECT(hamlyn_rats_remote_read_take(c, got, 100, &len), HAMLYN_RESULT_BUFFER_TOO_SMALL);
    ASSERT(len == 70000);
    OK(hamlyn_rats_remote_read_ready(c, &ready));
    ASSERT(ready == 1);
    len = 0;
    OK(hamlyn_rats_remote_read_take(c, got, 2 * MIB, &len));
    ASSERT(len == 70000 && memcmp(got, want + 12345, len) == 0);
    EXPECT(hamlyn_rats_remote_read_take(c, got, 2 * MIB, &len), HAMLYN_RESULT_STATE);
    EXPECT(hamlyn_rats_remote_read_ready(c, &ready), HAMLYN_RESULT_STATE);

    /* Errors: longer than the reply buffer; past the server's slot (refused there); the
     * reader keeps working after each. */
    EXPECT(hamlyn_rats_remote_read(c, 0, 2 * MIB + 1, WAIT_MS, got), HAMLYN_RESULT_TOO_LONG);
    EXPECT(hamlyn_rats_remote_read_start(c, 0, 2 * MIB + 1), HAMLYN_RESULT_TOO_LONG);
    EXPECT(hamlyn_rats_remote_read(c, READ_SLOT - 10, 100, WAIT_MS, got), HAMLYN_RESULT_OUTSIDE_TICKET);
    OK(hamlyn_rats_remote_read(c, READ_SLOT - 10, 10, WAIT_MS, got));
    ASSERT(memcmp(got, want + READ_SLOT - 10, 10) == 0);
    EXPECT(hamlyn_rats_remote_read(c, 0, 1, WAIT_MS, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    free(want);
    free(got);
    hamlyn_rats_remote_read_client_free(c);
}

static void writes(const char *seed) {
    hamlyn_rats_remote_write_client *c;
    hamlyn_send *s;
    OK(hamlyn_rats_remote_write_client_new(rats, seed, &c));
    uint64_t slot = 0;
    OK(hamlyn_rats_remote_write_client_len(c, &slot));
    ASSERT(slot == WRITE_SLOT);
    uint8_t *buf = malloc(MIB + 5);
    ASSERT(buf != NULL);

    /* Plain writes: 0 B (anywhere in the slot, its end included), 1 B, 4099 B, 1 MiB + 5. */
    OK(hamlyn_rats_remote_write(c, 0, NULL, 0, &s));
    sent(s);
    OK(hamlyn_rats_remote_write(c, WRITE_SLOT, NULL, 0, NULL));
    const uint8_t one = 0xA5;
    OK(hamlyn_rats_remote_write(c, 0, &one, 1, &s));
    sent(s);
    fill(buf, 1, 4099);
    OK(hamlyn_rats_remote_write(c, 16, buf, 4099, &s));
    sent(s);
    fill(buf, 2, MIB + 5);
    OK(hamlyn_rats_remote_write(c, 8192, buf, MIB + 5, &s));
    /* The bytes were copied before the call returned: C's buffer is free at once. */
    memset(buf, 0, MIB + 5);
    sent(s);

    /* Scatter: three pieces (one of them 0 B), each at its own offset. */
    uint8_t *a = malloc(1000), *b = malloc(MIB / 2);
    ASSERT(a != NULL && b != NULL);
    fill(a, 3, 1000);
    fill(b, 4, MIB / 2);
    hamlyn_rats_scatter_piece scatter[4] = {
        {2 * MIB, (const uint8_t *)"scatter-a", 9},
        {2 * MIB + 100, a, 1000},
        {2 * MIB + 7, NULL, 0},
        {2 * MIB + 5000, b, MIB / 2},
    };
    hamlyn_send *handles[4] = {NULL, NULL, NULL, NULL};
    OK(hamlyn_rats_remote_write_scatter(c, scatter, 4, handles));
    for (int i = 0; i < 4; i++) {
        ASSERT(handles[i] != NULL);
        sent(handles[i]);
    }
    OK(hamlyn_rats_remote_write_scatter(c, NULL, 0, NULL));
    EXPECT(hamlyn_rats_remote_write_scatter(c, NULL, 1, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rats_remote_write_scatter(c, scatter, HAMLYN_RATS_MAX_PIECES + 1, NULL),
           HAMLYN_RESULT_INVALID_ARGUMENT);

    /* Gather: four pieces (one of them 0 B) land contiguously as one message. */
    uint8_t *mid = malloc(3000);
    ASSERT(mid != NULL);
    fill(mid, 5, 3000);
    hamlyn_rats_gather_piece gather[4] = {
        {(const uint8_t *)"gather-", 7},
        {NULL, 0},
        {mid, 3000},
        {(const uint8_t *)"-end", 4},
    };
    OK(hamlyn_rats_remote_write_gather(c, 2 * MIB + 4096 + MIB / 2 + 8192, gather, 4, &s));
    sent(s);
    /* More than the whole slot. */
    hamlyn_rats_gather_piece huge[3] = {{buf, MIB + 5}, {buf, MIB + 5}, {buf, MIB + 5}};
    EXPECT(hamlyn_rats_remote_write_gather(c, 0, huge, 3, NULL), HAMLYN_RESULT_TOO_LONG);

    /* Outside the slot: refused before anything is sent; nothing lands. */
    s = NULL;
    EXPECT(hamlyn_rats_remote_write(c, WRITE_SLOT - 4, (const uint8_t *)"12345678", 8, &s),
           HAMLYN_RESULT_BAD_TICKET);
    ASSERT(s == NULL);
    EXPECT(hamlyn_rats_remote_write_gather(c, WRITE_SLOT - 2, gather, 4, NULL), HAMLYN_RESULT_BAD_TICKET);

    free(mid);
    free(a);
    free(b);
    free(buf);
    hamlyn_rats_remote_write_client_free(c);
}

static int call(void) {
    char *wseed = seed_at(0), *rseed = seed_at(1);
    hamlyn_rats_remote_write_client *wc = NULL;
    hamlyn_rats_remote_read_client *rc = NULL;
    /* Each protocol refuses the other's seed, and text that is no seed. */
    EXPECT(hamlyn_rats_remote_write_client_new(rats, rseed, &wc), HAMLYN_RESULT_BAD_SEED);
    char why[256];
    OK(hamlyn_last_error(why, sizeof why, NULL));
    if (strstr(why, "protocol") == NULL) {
        FAIL("the error says \"%s\", not which protocol", why);
    }
    EXPECT(hamlyn_rats_remote_read_client_new(rats, wseed, 64, &rc), HAMLYN_RESULT_BAD_SEED);
    EXPECT(hamlyn_rats_remote_write_client_new(rats, "hmseed1-nonsense", &wc), HAMLYN_RESULT_BAD_SEED);
    EXPECT(hamlyn_rats_remote_read_client_new(rats, "hmseed1-nonsense", 64, &rc), HAMLYN_RESULT_BAD_SEED);
    ASSERT(wc == NULL && rc == NULL);

    reads(rseed);
    writes(wseed);
    free(wseed);
    free(rseed);
    printf("rats_remote call: ok\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        FAIL("usage: rats_remote serve|call");
    }
    hamlyn_node *node;
    OK(hamlyn_node_connect(env("HAMLYN_SOCKET"), &node));
    OK(hamlyn_rats_new(node, &rats));
    int rc = strcmp(argv[1], "serve") == 0 ? serve() : call();
    hamlyn_rats_free(rats);
    hamlyn_node_free(node);
    return rc;
}
