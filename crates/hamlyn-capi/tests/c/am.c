/* Active messages from C, against a Rust process (the test) on the same daemon: the two
 * register handlers under names, synch, and call each other's handlers by name.
 *
 * The Rust side registers "rust.mul" (reply a * b and the channel), "rust.count" (no
 * reply), "rust.fail" (fails)
 * and "rust.check_mem" (reply 1 if its region holds what C wrote), then starts this
 * program with HAMLYN_RUST_NODE / HAMLYN_RUST_CLIENT (its endpoint) and
 * HAMLYN_RUST_REGION (its memory region's seed).
 *
 * This program registers "c.add" (short: reply a + b), "c.sum" (bulk: checksum of the
 * payload, read in place), "c.count" (no reply: remote completion), "c.twice" (replies
 * twice: an error at the sender) and "c.done", prints
 * its address and its region's seed, calls the Rust handlers, then serves until the Rust
 * side calls "c.done", and checks what the Rust side's memory message left in its
 * region. */
#include <inttypes.h>
#include <time.h>

#include "check.h"

#define ADD_LAYOUT "u64 a, u64 b -> u64 sum"
#define MUL_LAYOUT "u64 a, u64 b -> u64 product, u64 channel"
#define SUM_LAYOUT "u64 seed; payload bytes -> u64 checksum, u64 len"
#define UNIT_LAYOUT "no arguments"

/* What the handlers saw (their user data). */
struct state {
    hamlyn_am *am;
    int adds;
    int sums;
    int counts;
    int done;
    int in_handler_refused;
    int reply_twice_refused;
};

/* FNV-1a, 64 bits: the checksum the Rust side computes over the bulk payload. */
static uint64_t fnv(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * 0x100000001b3ull;
    }
    return h;
}

static int32_t on_add(hamlyn_am_ctx *ctx, void *user) {
    struct state *s = user;
    uint64_t a[4];
    if (hamlyn_am_ctx_args(ctx, a) != HAMLYN_RESULT_OK) {
        return 1;
    }
    /* A short message has no payload. */
    const uint8_t *p = (const uint8_t *)1;
    size_t n = 1;
    if (hamlyn_am_ctx_payload(ctx, &p, &n) != HAMLYN_RESULT_OK || p != NULL || n != 0) {
        return 2;
    }
    /* The endpoint is busy running this handler: calls on it are refused, not a
     * deadlock. */
    size_t handled = 0;
    if (hamlyn_am_poll(s->am, 0, &handled) == HAMLYN_RESULT_IN_HANDLER) {
        s->in_handler_refused++;
    }
    uint64_t r[4] = {a[0] + a[1], 0, 0, 0};
    if (hamlyn_am_ctx_reply(ctx, r) != HAMLYN_RESULT_OK) {
        return 3;
    }
    s->adds++;
    return 0;
}

/* Replies twice: the second is refused here, and the sender gets an error (a token used
 * twice is the handler's failure). */
static int32_t on_twice(hamlyn_am_ctx *ctx, void *user) {
    struct state *s = user;
    uint64_t r[4] = {1, 0, 0, 0};
    if (hamlyn_am_ctx_reply(ctx, r) != HAMLYN_RESULT_OK) {
        return 1;
    }
    if (hamlyn_am_ctx_reply(ctx, r) == HAMLYN_RESULT_REPLY_TWICE) {
        s->reply_twice_refused++;
    }
    return 0;
}

static int32_t on_sum(hamlyn_am_ctx *ctx, void *user) {
    struct state *s = user;
    const uint8_t *p = NULL;
    size_t n = 0;
    if (hamlyn_am_ctx_payload(ctx, &p, &n) != HAMLYN_RESULT_OK || p == NULL || n == 0) {
        return 1;
    }
    /* The view in place and a copy agree. */
    uint8_t *copy = malloc(n);
    if (copy == NULL) {
        return 2;
    }
    int ok = hamlyn_am_ctx_read_payload(ctx, 0, copy, n) == HAMLYN_RESULT_OK &&
             memcmp(copy, p, n) == 0 &&
             hamlyn_am_ctx_read_payload(ctx, 1, copy, n) == HAMLYN_RESULT_OUT_OF_RANGE;
    free(copy);
    if (!ok) {
        return 3;
    }
    uint64_t r[4] = {fnv(p, n), n, 0, 0};
    s->sums++;
    return hamlyn_am_ctx_reply(ctx, r) == HAMLYN_RESULT_OK ? 0 : 4;
}

static int32_t on_count(hamlyn_am_ctx *ctx, void *user) {
    (void)ctx;
    ((struct state *)user)->counts++;
    return 0;
}

static int32_t on_done(hamlyn_am_ctx *ctx, void *user) {
    (void)ctx;
    ((struct state *)user)->done = 1;
    return 0;
}

static uint64_t fp(const char *layout) {
    uint64_t f = 0;
    OK(hamlyn_am_fingerprint(layout, &f));
    return f;
}

static uint64_t env_u64(const char *name) {
    return strtoull(env(name), NULL, 10);
}

int main(void) {
    hamlyn_node *node;
    OK(hamlyn_node_connect(env("HAMLYN_SOCKET"), &node));
    struct state s = {0};
    OK(hamlyn_am_new(node, NULL, &s.am));
    hamlyn_am *am = s.am;

    OK(hamlyn_am_register(am, "c.add", fp(ADD_LAYOUT), on_add, &s));
    OK(hamlyn_am_register(am, "c.sum", fp(SUM_LAYOUT), on_sum, &s));
    OK(hamlyn_am_register(am, "c.count", fp(UNIT_LAYOUT), on_count, &s));
    OK(hamlyn_am_register(am, "c.done", fp(UNIT_LAYOUT), on_done, &s));
    OK(hamlyn_am_register(am, "c.twice", fp(UNIT_LAYOUT), on_twice, &s));
    /* The Rust side has "rust.mul" with another layout: refused at synch, the others
     * are registered. */
    OK(hamlyn_am_register(am, "rust.mul", fp("u32 wrong"), on_count, &s));
    EXPECT(hamlyn_am_synch(am), HAMLYN_RESULT_COLLISION);
    char why[256];
    OK(hamlyn_last_error(why, sizeof why, NULL));
    ASSERT(strstr(why, "rust.mul") != NULL);
    OK(hamlyn_am_synch(am));

    hamlyn_am_region *region;
    OK(hamlyn_am_region_new(am, 4096, &region));
    char seed[HAMLYN_SEED_TEXT_MAX];
    OK(hamlyn_am_region_seed(region, seed, sizeof seed, NULL));
    hamlyn_am_addr me;
    OK(hamlyn_am_addr_of(am, &me));
    printf("%u %u\n%s\n", me.node, me.client, seed);
    fflush(stdout);

    /* Call the Rust handlers by name. */
    hamlyn_am_addr rust = {(uint32_t)env_u64("HAMLYN_RUST_NODE"), (uint32_t)env_u64("HAMLYN_RUST_CLIENT")};
    hamlyn_am_handler_id mul, fail, check, echo, add;
    OK(hamlyn_am_handler_by_name(am, "rust.mul", &mul));
    OK(hamlyn_am_handler_by_name(am, "rust.fail", &fail));
    OK(hamlyn_am_handler_by_name(am, "rust.check_mem", &check));
    OK(hamlyn_am_handler_by_name(am, "hamlyn.echo", &echo));
    OK(hamlyn_am_handler_by_name(am, "c.add", &add));
    hamlyn_am_handler_id none;
    EXPECT(hamlyn_am_handler_by_name(am, "nobody.here", &none), HAMLYN_RESULT_UNKNOWN_HANDLER);

    uint64_t args[4] = {6, 7, 0, 0};
    uint64_t reply[4];
    OK(hamlyn_am_call(am, rust, mul, 0, args, WAIT_MS, reply));
    ASSERT(reply[0] == 42 && reply[1] == 0);

    /* On a logical channel of its own: the channel travels with the message. */
    uint16_t ch = 0;
    OK(hamlyn_am_open_channel(am, 1, &ch));
    ASSERT(ch == 1);
    uint64_t call = 0;
    args[0] = 11;
    args[1] = 3;
    OK(hamlyn_am_send_short(am, rust, mul, ch, args, HAMLYN_AM_WANT_REPLY, &call));
    uint32_t outcome = 0;
    OK(hamlyn_am_wait(am, call, WAIT_MS, &outcome, reply));
    ASSERT(outcome == HAMLYN_AM_OUTCOME_REPLY && reply[0] == 33 && reply[1] == ch);
    EXPECT(hamlyn_am_wait(am, call, 0, &outcome, reply), HAMLYN_RESULT_NO_CALL);
    EXPECT(hamlyn_am_send_short(am, rust, mul, 7, args, HAMLYN_AM_WANT_REPLY, &call),
           HAMLYN_RESULT_NO_CHANNEL);

    /* Remote completion of a handler that does not reply. */
    hamlyn_am_handler_id count;
    OK(hamlyn_am_handler_by_name(am, "rust.count", &count));
    OK(hamlyn_am_send_short(am, rust, count, 0, args, HAMLYN_AM_WANT_ACK, &call));
    OK(hamlyn_am_wait(am, call, WAIT_MS, &outcome, NULL));
    ASSERT(outcome == HAMLYN_AM_OUTCOME_DONE);

    /* A handler that fails: an error completion, waited for or not. */
    OK(hamlyn_am_send_short(am, rust, fail, 0, args, HAMLYN_AM_WANT_REPLY, &call));
    EXPECT(hamlyn_am_wait(am, call, WAIT_MS, &outcome, reply), HAMLYN_RESULT_HANDLER_FAILED);
    uint64_t lost = 0;
    OK(hamlyn_am_send_short(am, rust, fail, 0, args, HAMLYN_AM_WANT_NOTHING, &lost));
    uint64_t failed_call = 0;
    hamlyn_result code = HAMLYN_RESULT_OK;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        hamlyn_result r = hamlyn_am_next_failure(am, &failed_call, &code);
        if (r == HAMLYN_RESULT_OK) {
            break;
        }
        ASSERT(r == HAMLYN_RESULT_EMPTY);
        OK(hamlyn_am_poll(am, 10, NULL));
        clock_gettime(CLOCK_MONOTONIC, &now);
        ASSERT(now.tv_sec - start.tv_sec < WAIT_MS / 1000);
    }
    ASSERT(failed_call == lost && code == HAMLYN_RESULT_HANDLER_FAILED);

    /* An engine-resident handler: the node's engine echoes the arguments. */
    hamlyn_am_addr engine = {me.node, HAMLYN_AM_ENGINE_CLIENT};
    uint64_t e[4] = {1, 2, 3, 4};
    OK(hamlyn_am_call(am, engine, echo, 0, e, WAIT_MS, reply));
    ASSERT(reply[0] == 1 && reply[1] == 2 && reply[2] == 3 && reply[3] == 4);

    /* A memory message into the Rust side's region, then its handler checks it. */
    hamlyn_am_target *target;
    EXPECT(hamlyn_am_target_new(am, "not a seed", &target), HAMLYN_RESULT_BAD_SEED);
    OK(hamlyn_am_target_new(am, env("HAMLYN_RUST_REGION"), &target));
    const char *words = "written by C";
    hamlyn_send *sent;
    OK(hamlyn_am_target_write(target, 100, (const uint8_t *)words, strlen(words), &sent));
    hamlyn_status st;
    OK(hamlyn_send_wait(sent, WAIT_MS, &st));
    ASSERT(st.state == HAMLYN_STATUS_SENT);
    hamlyn_send_free(sent);
    /* Outside the region's ticket: refused before it is sent. */
    sent = NULL;
    EXPECT(hamlyn_am_target_write(target, 4090, (const uint8_t *)words, strlen(words), &sent),
           HAMLYN_RESULT_BAD_TICKET);
    ASSERT(sent == NULL);
    hamlyn_am_target_free(target);
    args[0] = 100;
    args[1] = strlen(words);
    OK(hamlyn_am_call(am, rust, check, 0, args, WAIT_MS, reply));
    ASSERT(reply[0] == 1);

    /* Serve the Rust side until it calls c.done. */
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (!s.done) {
        OK(hamlyn_am_poll(am, 100, NULL));
        clock_gettime(CLOCK_MONOTONIC, &now);
        ASSERT(now.tv_sec - start.tv_sec < WAIT_MS / 1000);
    }
    ASSERT(s.adds == 1 && s.sums == 1 && s.counts == 3);
    ASSERT(s.in_handler_refused == 1 && s.reply_twice_refused == 1);
    hamlyn_am_handler_counters hc;
    OK(hamlyn_am_handler_counters_of(am, "c.add", &hc));
    ASSERT(hc.calls == 1 && hc.replies == 1 && hc.errors == 0);
    EXPECT(hamlyn_am_handler_counters_of(am, "rust.mul", &hc), HAMLYN_RESULT_UNKNOWN_HANDLER);
    hamlyn_am_counters c;
    OK(hamlyn_am_counters_of(am, &c));
    ASSERT(c.handled == 7 && c.malformed == 0);

    /* What the Rust side's memory message left. */
    char got[32] = {0};
    OK(hamlyn_am_region_read(region, 8, (uint8_t *)got, strlen("written by Rust")));
    ASSERT(strcmp(got, "written by Rust") == 0);

    hamlyn_am_region_free(region);
    hamlyn_am_free(am);
    hamlyn_node_free(node);
    printf("am: ok\n");
    return 0;
}
