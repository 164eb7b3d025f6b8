/* RPC from C: `rpc serve` publishes a service of C procedures (HAMLYN_SERVICE) and serves
 * until its last call; `rpc call` connects by the service's name and calls: plain calls,
 * every error case, all frames outstanding at once, a call by reference, and last a call
 * that times out (the server's procedure for it returns only once the client timed out:
 * HAMLYN_STALL_FILE appears). */
#include <inttypes.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

struct server_state {
    int stalled;
    int calls;
};

static int32_t add(hamlyn_rpc_ctx *ctx, const uint8_t *args, size_t args_len, uint8_t *result,
                   size_t result_cap, size_t *result_len, void *user) {
    (void)ctx;
    uint64_t ab[2];
    if (args_len != sizeof ab || result_cap < sizeof(uint64_t)) {
        return 1;
    }
    memcpy(ab, args, sizeof ab);
    uint64_t sum = ab[0] + ab[1];
    memcpy(result, &sum, sizeof sum);
    *result_len = sizeof sum;
    ((struct server_state *)user)->calls++;
    return 0;
}

static int32_t echo(hamlyn_rpc_ctx *ctx, const uint8_t *args, size_t args_len, uint8_t *result,
                    size_t result_cap, size_t *result_len, void *user) {
    (void)ctx;
    if (args_len > result_cap) {
        return 1;
    }
    memcpy(result, args, args_len);
    *result_len = args_len;
    ((struct server_state *)user)->calls++;
    return 0;
}

static int32_t fail(hamlyn_rpc_ctx *ctx, const uint8_t *args, size_t args_len, uint8_t *result,
                    size_t result_cap, size_t *result_len, void *user) {
    (void)ctx, (void)args, (void)args_len, (void)result, (void)result_cap, (void)result_len;
    ((struct server_state *)user)->calls++;
    return 7;
}

/* Call by reference: sums the caller's segment's bytes and writes the sum (u64) at its
 * offset 0. */
static int32_t sum_ref(hamlyn_rpc_ctx *ctx, const uint8_t *args, size_t args_len, uint8_t *result,
                       size_t result_cap, size_t *result_len, void *user) {
    (void)args, (void)args_len, (void)result_cap;
    uint64_t len = 0;
    if (hamlyn_rpc_ctx_segment_len(ctx, &len) != HAMLYN_RESULT_OK || len < 16 || len > 65536) {
        return 1;
    }
    uint8_t *seg = malloc(len);
    if (seg == NULL) {
        return 2;
    }
    int ok = hamlyn_rpc_ctx_read(ctx, 0, seg, len) == HAMLYN_RESULT_OK &&
             hamlyn_rpc_ctx_read(ctx, len - 4, seg, 8) == HAMLYN_RESULT_REJECTED;
    uint64_t sum = 0;
    for (uint64_t i = 8; i < len; i++) {
        sum += seg[i];
    }
    free(seg);
    if (!ok || hamlyn_rpc_ctx_write(ctx, 0, (const uint8_t *)&sum, sizeof sum) != HAMLYN_RESULT_OK) {
        return 3;
    }
    memcpy(result, &len, sizeof len);
    *result_len = sizeof len;
    ((struct server_state *)user)->calls++;
    return 0;
}

/* Returns only once the client has timed out on this call (the file appears). */
static int32_t stall(hamlyn_rpc_ctx *ctx, const uint8_t *args, size_t args_len, uint8_t *result,
                     size_t result_cap, size_t *result_len, void *user) {
    (void)ctx, (void)args, (void)args_len, (void)result, (void)result_cap;
    const char *file = env("HAMLYN_STALL_FILE");
    for (int i = 0; i < WAIT_MS / 10 && access(file, F_OK) != 0; i++) {
        usleep(10000);
    }
    *result_len = 0;
    ((struct server_state *)user)->stalled = 1;
    return 0;
}

static int serve(hamlyn_node *node) {
    struct server_state s = {0};
    hamlyn_rpc_procedure procs[] = {
        {"add", add, &s}, {"echo", echo, &s}, {"fail", fail, &s}, {"sum_ref", sum_ref, &s}, {"stall", stall, &s},
    };
    hamlyn_rpc_server *server = NULL;
    hamlyn_rpc_procedure dup[] = {{"add", add, &s}, {"add", echo, &s}};
    EXPECT(hamlyn_rpc_server_new(node, "x", dup, 2, &server), HAMLYN_RESULT_INVALID_ARGUMENT);
    EXPECT(hamlyn_rpc_server_new(node, "x", procs, 0, &server), HAMLYN_RESULT_INVALID_ARGUMENT);
    hamlyn_rpc_procedure nofn[] = {{"add", NULL, &s}};
    EXPECT(hamlyn_rpc_server_new(node, "x", nofn, 1, &server), HAMLYN_RESULT_NULL_ARGUMENT);
    ASSERT(server == NULL);
    OK(hamlyn_rpc_server_new(node, env("HAMLYN_SERVICE"), procs, sizeof procs / sizeof procs[0], &server));
    printf("ready\n");
    fflush(stdout);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (!s.stalled) {
        uint32_t handled;
        OK(hamlyn_rpc_server_serve(server, 100, &handled));
        clock_gettime(CLOCK_MONOTONIC, &now);
        ASSERT(now.tv_sec - start.tv_sec < 2 * WAIT_MS / 1000);
    }
    hamlyn_rpc_server_counters c;
    size_t clients = 0;
    OK(hamlyn_rpc_server_counters_of(server, &c, &clients));
    /* add, echo x2 + 8 outstanding echoes + the too-small one, fail, sum_ref, stall. */
    ASSERT(c.connected == 1 && clients == 1);
    ASSERT(c.calls == 14 && c.failed == 1 && c.unknown_procedure == 0 && c.bad_frames == 0);
    ASSERT(s.calls == 13);
    hamlyn_rpc_server_free(server);
    return 0;
}

static int call(hamlyn_node *node) {
    const char *service = env("HAMLYN_SERVICE");
    hamlyn_rpc_client *client = NULL;
    EXPECT(hamlyn_rpc_client_connect(node, "capi-no-such-service", 1000, &client), HAMLYN_RESULT_NOT_FOUND);
    ASSERT(client == NULL);
    OK(hamlyn_rpc_client_connect(node, service, WAIT_MS, &client));
    OK(hamlyn_rpc_client_set_timeout(client, WAIT_MS));
    EXPECT(hamlyn_rpc_client_set_timeout(client, 0), HAMLYN_RESULT_INVALID_ARGUMENT);

    char name[16];
    size_t need = 0;
    OK(hamlyn_rpc_client_procedure(client, 3, name, sizeof name, NULL));
    ASSERT(strcmp(name, "sum_ref") == 0);
    EXPECT(hamlyn_rpc_client_procedure(client, 0, name, 2, &need), HAMLYN_RESULT_BUFFER_TOO_SMALL);
    ASSERT(need == 4);
    EXPECT(hamlyn_rpc_client_procedure(client, 5, name, sizeof name, NULL), HAMLYN_RESULT_OUT_OF_RANGE);

    /* A plain call. */
    uint64_t ab[2] = {40, 2}, sum = 0;
    size_t len = 0;
    OK(hamlyn_rpc_client_call(client, "add", (const uint8_t *)ab, sizeof ab, (uint8_t *)&sum, sizeof sum, &len));
    ASSERT(len == sizeof sum && sum == 42);

    /* The largest arguments there are, and one byte more. */
    static uint8_t big[HAMLYN_RPC_MAX_ARGS + 1], back[HAMLYN_RPC_MAX_RESULT];
    for (size_t i = 0; i < sizeof big; i++) {
        big[i] = (uint8_t)(i * 13);
    }
    OK(hamlyn_rpc_client_call(client, "echo", big, HAMLYN_RPC_MAX_ARGS, back, sizeof back, &len));
    ASSERT(len == HAMLYN_RPC_MAX_ARGS && memcmp(back, big, len) == 0);
    EXPECT(hamlyn_rpc_client_call(client, "echo", big, sizeof big, back, sizeof back, &len), HAMLYN_RESULT_TOO_LONG);

    /* Errors: no such procedure, a failing one, a result buffer too small (the result's
     * length is said; the call is over), NULLs. */
    EXPECT(hamlyn_rpc_client_call(client, "nope", big, 1, back, sizeof back, &len), HAMLYN_RESULT_UNKNOWN_HANDLER);
    EXPECT(hamlyn_rpc_client_call(client, "fail", big, 1, back, sizeof back, &len), HAMLYN_RESULT_HANDLER_FAILED);
    char why[128];
    OK(hamlyn_last_error(why, sizeof why, NULL));
    ASSERT(strstr(why, "returned 7") != NULL);
    len = 0;
    EXPECT(hamlyn_rpc_client_call(client, "echo", big, 100, back, 10, &len), HAMLYN_RESULT_BUFFER_TOO_SMALL);
    ASSERT(len == 100);
    EXPECT(hamlyn_rpc_client_call(client, "echo", big, 100, back, sizeof back, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rpc_client_call(client, NULL, big, 100, back, sizeof back, &len), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rpc_client_call(NULL, "echo", big, 100, back, sizeof back, &len), HAMLYN_RESULT_NULL_ARGUMENT);

    /* Every frame outstanding at once, one more refused, finished out of order. */
    uint64_t calls[HAMLYN_RPC_FRAMES], extra;
    for (size_t i = 0; i < HAMLYN_RPC_FRAMES; i++) {
        uint64_t v = 1000 + i;
        OK(hamlyn_rpc_client_start(client, "echo", (const uint8_t *)&v, sizeof v, &calls[i]));
    }
    EXPECT(hamlyn_rpc_client_start(client, "echo", big, 8, &extra), HAMLYN_RESULT_FULL);
    for (size_t k = 0; k < HAMLYN_RPC_FRAMES; k++) {
        size_t i = HAMLYN_RPC_FRAMES - 1 - k;
        uint64_t v = 0;
        OK(hamlyn_rpc_client_finish(client, calls[i], (uint8_t *)&v, sizeof v, &len));
        ASSERT(len == sizeof v && v == 1000 + i);
    }
    EXPECT(hamlyn_rpc_client_finish(client, calls[0], back, sizeof back, &len), HAMLYN_RESULT_NO_CALL);
    EXPECT(hamlyn_rpc_client_finish(client, 999999, back, sizeof back, &len), HAMLYN_RESULT_NO_CALL);

    /* By reference: the procedure reads our area and writes the sum into it. */
    hamlyn_area *area;
    uint64_t seglen = 0;
    OK(hamlyn_area_new(node, 4096, &area));
    /* An area of another connection than the client's own. */
    EXPECT(hamlyn_rpc_client_call_by_ref(client, "sum_ref", NULL, 0, area, (uint8_t *)&seglen, sizeof seglen, &len),
           HAMLYN_RESULT_FOREIGN_OBJECT);
    hamlyn_area_free(area);
    OK(hamlyn_rpc_client_area_new(client, 4096, &area));
    uint8_t fill[4088];
    uint64_t want = 0;
    for (size_t i = 0; i < sizeof fill; i++) {
        fill[i] = (uint8_t)(i * 7 + 1);
        want += fill[i];
    }
    OK(hamlyn_area_write(area, 8, fill, sizeof fill));
    OK(hamlyn_rpc_client_call_by_ref(client, "sum_ref", NULL, 0, area, (uint8_t *)&seglen, sizeof seglen, &len));
    ASSERT(len == sizeof seglen && seglen == 4096);
    uint64_t got = 0;
    OK(hamlyn_area_read(area, 0, (uint8_t *)&got, sizeof got));
    ASSERT(got == want);
    hamlyn_area_free(area);

    /* Last: a call that times out (the server's procedure waits for the file this
     * writes after the timeout). */
    OK(hamlyn_rpc_client_set_timeout(client, 200));
    EXPECT(hamlyn_rpc_client_call(client, "stall", NULL, 0, back, sizeof back, &len), HAMLYN_RESULT_TIMEOUT);
    FILE *f = fopen(env("HAMLYN_STALL_FILE"), "w");
    ASSERT(f != NULL);
    fclose(f);
    hamlyn_rpc_client_free(client);
    printf("rpc: ok\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        FAIL("usage: rpc serve|call");
    }
    hamlyn_node *node;
    OK(hamlyn_node_connect(env("HAMLYN_SOCKET"), &node));
    int rc = strcmp(argv[1], "serve") == 0 ? serve(node) : call(node);
    hamlyn_node_free(node);
    return rc;
}
