/* RPC from C with a process killed in the middle of a call (the test kills it by its
 * pid once the procedure runs: the server prints "running" from inside it).
 *
 *   rpc_kill serve-hang   serves $HAMLYN_SERVICE: "echo", and "hang", which prints
 *                         "running" and never returns (the server is killed in it)
 *   rpc_kill call-hang    calls "echo", then "hang": the call must end with
 *                         HAMLYN_RESULT_PEER_GONE within the client's timeout (never
 *                         HAMLYN_RESULT_TIMEOUT, never a hang), and so must the next
 *   rpc_kill serve-frees  serves $HAMLYN_SERVICE: "echo", and "slow", which prints
 *                         "running" and returns once $HAMLYN_RELEASE_FILE exists; counts
 *                         the engine's slots before any client, and ends once the killed
 *                         client's frames are freed: the server's counters say so and
 *                         the engine has as many slots as before it came
 *   rpc_kill call-slow    calls "echo", starts "slow", and waits to be killed */
#include <time.h>
#include <unistd.h>

#include "check.h"

static long elapsed_ms(const struct timespec *start) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

static int32_t echo(hamlyn_rpc_ctx *ctx, const uint8_t *args, size_t args_len, uint8_t *result,
                    size_t result_cap, size_t *result_len, void *user) {
    (void)ctx, (void)user;
    if (args_len > result_cap) {
        return 1;
    }
    memcpy(result, args, args_len);
    *result_len = args_len;
    return 0;
}

/* Never returns: the test kills the server in it (bounded, should it not). */
static int32_t hang(hamlyn_rpc_ctx *ctx, const uint8_t *args, size_t args_len, uint8_t *result,
                    size_t result_cap, size_t *result_len, void *user) {
    (void)ctx, (void)args, (void)args_len, (void)result, (void)result_cap, (void)user;
    printf("running\n");
    fflush(stdout);
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (elapsed_ms(&start) < 2 * WAIT_MS) {
        usleep(10000);
    }
    FAIL("the server was not killed within %d ms", 2 * WAIT_MS);
    *result_len = 0;
    return 0;
}

/* Returns once the test, having killed the caller, lets it. */
static int32_t slow(hamlyn_rpc_ctx *ctx, const uint8_t *args, size_t args_len, uint8_t *result,
                    size_t result_cap, size_t *result_len, void *user) {
    (void)ctx, (void)user;
    printf("running\n");
    fflush(stdout);
    const char *file = env("HAMLYN_RELEASE_FILE");
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (access(file, F_OK) != 0) {
        if (elapsed_ms(&start) > WAIT_MS) {
            FAIL("%s did not appear within %d ms", file, WAIT_MS);
        }
        usleep(10000);
    }
    if (args_len > result_cap) {
        return 1;
    }
    memcpy(result, args, args_len);
    *result_len = args_len;
    return 0;
}

static hamlyn_rpc_server *publish(hamlyn_node *node, hamlyn_rpc_procedure *procs, size_t n) {
    hamlyn_rpc_server *server;
    OK(hamlyn_rpc_server_new(node, env("HAMLYN_SERVICE"), procs, n, &server));
    return server;
}

static int serve_hang(hamlyn_node *node) {
    hamlyn_rpc_procedure procs[] = {{"echo", echo, NULL}, {"hang", hang, NULL}};
    hamlyn_rpc_server *server = publish(node, procs, 2);
    printf("ready\n");
    fflush(stdout);
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (elapsed_ms(&start) < 2 * WAIT_MS) {
        OK(hamlyn_rpc_server_serve(server, 100, NULL));
    }
    FAIL("no call of hang within %d ms", 2 * WAIT_MS);
}

static hamlyn_rpc_client *connect_client(hamlyn_node *node) {
    hamlyn_rpc_client *c;
    OK(hamlyn_rpc_client_connect(node, env("HAMLYN_SERVICE"), WAIT_MS, &c));
    uint8_t out[16];
    size_t len = 0;
    OK(hamlyn_rpc_client_call(c, "echo", (const uint8_t *)"alive?", 6, out, sizeof out, &len));
    ASSERT(len == 6 && memcmp(out, "alive?", 6) == 0);
    return c;
}

static int call_hang(hamlyn_node *node) {
    hamlyn_rpc_client *c = connect_client(node);
    /* The timeout is long: the server's death must be seen before it, as such. */
    OK(hamlyn_rpc_client_set_timeout(c, WAIT_MS));
    uint64_t call;
    OK(hamlyn_rpc_client_start(c, "hang", NULL, 0, &call));
    uint8_t out[16];
    size_t len = 0;
    EXPECT(hamlyn_rpc_client_finish(c, call, out, sizeof out, &len), HAMLYN_RESULT_PEER_GONE);
    EXPECT(hamlyn_rpc_client_call(c, "echo", (const uint8_t *)"?", 1, out, sizeof out, &len),
           HAMLYN_RESULT_PEER_GONE);
    hamlyn_rpc_client_free(c);
    printf("call-hang: the killed server is an error, not a hang\n");
    return 0;
}

static uint64_t slots(hamlyn_node *node) {
    hamlyn_stats st;
    OK(hamlyn_node_stats(node, &st));
    return st.slots;
}

static int serve_frees(hamlyn_node *node) {
    hamlyn_rpc_procedure procs[] = {{"echo", echo, NULL}, {"slow", slow, NULL}};
    hamlyn_rpc_server *server = publish(node, procs, 2);
    uint64_t before = slots(node);
    printf("ready\n");
    fflush(stdout);
    /* Serve the client's calls; once it is killed mid-call, its frames must go. */
    hamlyn_rpc_server_counters c;
    size_t clients = 0;
    uint64_t most = before;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        OK(hamlyn_rpc_server_serve(server, 50, NULL));
        OK(hamlyn_rpc_server_counters_of(server, &c, &clients));
        uint64_t now = slots(node);
        if (now > most) {
            most = now;
        }
        if (c.clients_freed == 1 && clients == 0 && now == before) {
            break;
        }
        if (elapsed_ms(&start) > 2 * WAIT_MS) {
            FAIL("not freed: %zu clients, %llu freed, %llu slots (%llu before the client)", clients,
                 (unsigned long long)c.clients_freed, (unsigned long long)now,
                 (unsigned long long)before);
        }
    }
    /* The client had its frames (and slots of its own) while connected. */
    ASSERT(most >= before + HAMLYN_RPC_FRAMES);
    ASSERT(c.connected == 1 && c.calls == 2 && c.failed == 0);
    hamlyn_rpc_server_free(server);
    printf("serve-frees: the killed client's %d frames were freed\n", HAMLYN_RPC_FRAMES);
    return 0;
}

static int call_slow(hamlyn_node *node) {
    hamlyn_rpc_client *c = connect_client(node);
    uint64_t call;
    OK(hamlyn_rpc_client_start(c, "slow", (const uint8_t *)"late", 4, &call));
    sleep(2 * WAIT_MS / 1000);
    FAIL("the client was not killed within %d ms", 2 * WAIT_MS);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        FAIL("usage: rpc_kill serve-hang|call-hang|serve-frees|call-slow");
    }
    hamlyn_node *node;
    OK(hamlyn_node_connect(env("HAMLYN_SOCKET"), &node));
    int rc;
    if (strcmp(argv[1], "serve-hang") == 0) {
        rc = serve_hang(node);
    } else if (strcmp(argv[1], "call-hang") == 0) {
        rc = call_hang(node);
    } else if (strcmp(argv[1], "serve-frees") == 0) {
        rc = serve_frees(node);
    } else if (strcmp(argv[1], "call-slow") == 0) {
        rc = call_slow(node);
    } else {
        FAIL("unknown role %s", argv[1]);
    }
    hamlyn_node_free(node);
    return rc;
}
