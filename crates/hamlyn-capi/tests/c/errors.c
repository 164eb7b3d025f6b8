/* Every error case from C gets a result code, never a crash; through a daemon
 * (HAMLYN_SOCKET), plus one embedded node. Also: the version macros against the library,
 * statistics, the registry, a direct slot and the event descriptor. */
#include <poll.h>

#include "check.h"

static void version(void) {
    uint32_t want = (HAMLYN_VERSION_MAJOR << 16) | (HAMLYN_VERSION_MINOR << 8) | HAMLYN_VERSION_PATCH;
    ASSERT(hamlyn_version_number() == want);
    char text[64];
    snprintf(text, sizeof text, "hamlyn/%d.%d.%d", HAMLYN_VERSION_MAJOR, HAMLYN_VERSION_MINOR,
             HAMLYN_VERSION_PATCH);
    ASSERT(strcmp(hamlyn_version(), text) == 0);
    ASSERT(strcmp(hamlyn_result_name(HAMLYN_RESULT_OK), "HAMLYN_RESULT_OK") == 0);
    ASSERT(strcmp(hamlyn_result_name(HAMLYN_RESULT_FULL), "HAMLYN_RESULT_FULL") == 0);
    ASSERT(strcmp(hamlyn_result_name(HAMLYN_RESULT_ENTRIES_BUSY), "HAMLYN_RESULT_ENTRIES_BUSY") == 0);
    ASSERT(HAMLYN_RESULT_ENTRIES_BUSY != HAMLYN_RESULT_FULL);
    ASSERT(strcmp(hamlyn_result_name(123456), "HAMLYN_RESULT_UNKNOWN") == 0);
    ASSERT(strcmp(hamlyn_result_name(HAMLYN_RESULT_IN_HANDLER), "HAMLYN_RESULT_IN_HANDLER") == 0);
    ASSERT(strcmp(hamlyn_result_name(HAMLYN_RESULT_END_OF_STREAM), "HAMLYN_RESULT_END_OF_STREAM") == 0);
}

static void nulls(void) {
    hamlyn_node *node = NULL;
    EXPECT(hamlyn_node_connect(NULL, &node), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_node_connect("/nonexistent/hamlyn.sock", NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_node_embedded(NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    ASSERT(node == NULL);
    hamlyn_area *area = NULL;
    EXPECT(hamlyn_area_new(NULL, 64, &area), HAMLYN_RESULT_NULL_ARGUMENT);
    ASSERT(area == NULL);
    hamlyn_notification n;
    EXPECT(hamlyn_queue_poll(NULL, &n), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_queue_wait(NULL, 0, &n), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_ticket_from_seed(NULL, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_terminus_send_inline(NULL, NULL, NULL, NULL, 0, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    hamlyn_status st;
    EXPECT(hamlyn_send_wait(NULL, 0, &st), HAMLYN_RESULT_NULL_ARGUMENT);
    /* Freeing NULL does nothing. */
    hamlyn_node_free(NULL);
    hamlyn_area_free(NULL);
    hamlyn_meta_area_free(NULL);
    hamlyn_slot_free(NULL);
    hamlyn_ticket_free(NULL);
    hamlyn_terminus_free(NULL);
    hamlyn_send_free(NULL);
    hamlyn_queue_free(NULL);
    hamlyn_direct_free(NULL);
    /* No engine there. */
    EXPECT(hamlyn_node_connect("/nonexistent/hamlyn.sock", &node), HAMLYN_RESULT_CONNECT);
    ASSERT(node == NULL);
}

static void seeds(const hamlyn_ticket *t) {
    hamlyn_ticket *out = NULL;
    EXPECT(hamlyn_ticket_from_seed("hello", &out), HAMLYN_RESULT_BAD_SEED);
    EXPECT(hamlyn_ticket_from_seed("", &out), HAMLYN_RESULT_BAD_SEED);
    EXPECT(hamlyn_ticket_from_seed("hmseed1-\xff\xfe", &out), HAMLYN_RESULT_BAD_SEED);
    ASSERT(out == NULL);

    /* Too small a buffer: the length needed, the buffer untouched. */
    char small[4] = {'x', 'x', 'x', 'x'};
    size_t need = 0;
    EXPECT(hamlyn_ticket_to_seed(t, small, sizeof small, &need), HAMLYN_RESULT_BUFFER_TOO_SMALL);
    ASSERT(need > sizeof small && need <= HAMLYN_SEED_TEXT_MAX);
    ASSERT(small[0] == 'x');
    EXPECT(hamlyn_ticket_to_seed(t, NULL, 0, &need), HAMLYN_RESULT_BUFFER_TOO_SMALL);
    char *text = malloc(need);
    ASSERT(text != NULL);
    OK(hamlyn_ticket_to_seed(t, text, need, NULL));
    ASSERT(strlen(text) + 1 == need);

    /* A typo and a cut string fail the checksum. */
    size_t mid = need / 2;
    char was = text[mid];
    text[mid] = was == 'a' ? 'b' : 'a';
    EXPECT(hamlyn_ticket_from_seed(text, &out), HAMLYN_RESULT_BAD_SEED);
    text[mid] = was;
    OK(hamlyn_ticket_from_seed(text, &out));
    hamlyn_ticket_free(out);
    text[need - 2] = '\0';
    EXPECT(hamlyn_ticket_from_seed(text, &out), HAMLYN_RESULT_BAD_SEED);
    free(text);
}

/* Seeds of several tickets (a group's parts), both ways, and their errors. */
static void multi_ticket_seeds(const hamlyn_ticket *t) {
    hamlyn_ticket *parts[3];
    OK(hamlyn_ticket_split(t, 3, parts));
    const hamlyn_ticket *in[3] = {parts[0], parts[1], parts[2]};
    size_t need = 0;
    EXPECT(hamlyn_seed_from_tickets(in, 0, NULL, 0, &need), HAMLYN_RESULT_INVALID_ARGUMENT);
    EXPECT(hamlyn_seed_from_tickets(in, HAMLYN_SEED_TICKETS_MAX + 1, NULL, 0, &need),
           HAMLYN_RESULT_INVALID_ARGUMENT);
    EXPECT(hamlyn_seed_from_tickets(NULL, 3, NULL, 0, &need), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_seed_from_tickets(in, 3, NULL, 0, &need), HAMLYN_RESULT_BUFFER_TOO_SMALL);
    ASSERT(need > HAMLYN_SEED_TEXT_MAX / 2);
    char *text = malloc(need);
    ASSERT(text != NULL);
    OK(hamlyn_seed_from_tickets(in, 3, text, need, NULL));

    hamlyn_ticket *out[3] = {NULL, NULL, NULL};
    size_t count = 0;
    EXPECT(hamlyn_seed_tickets(text, out, 2, &count), HAMLYN_RESULT_BUFFER_TOO_SMALL);
    ASSERT(count == 3 && out[0] == NULL);
    EXPECT(hamlyn_seed_tickets("not a seed", out, 3, &count), HAMLYN_RESULT_BAD_SEED);
    OK(hamlyn_seed_tickets(text, out, 3, &count));
    ASSERT(count == 3);
    for (int i = 0; i < 3; i++) {
        hamlyn_ticket_info a, b;
        OK(hamlyn_ticket_get_info(parts[i], &a));
        OK(hamlyn_ticket_get_info(out[i], &b));
        ASSERT(a.offset == b.offset && a.len == b.len && a.slot == b.slot);
        hamlyn_ticket_free(out[i]);
        hamlyn_ticket_free(parts[i]);
    }
    /* A one-ticket seed is a seed of one. */
    char one[HAMLYN_SEED_TEXT_MAX];
    OK(hamlyn_ticket_to_seed(t, one, sizeof one, NULL));
    OK(hamlyn_seed_tickets(one, out, 3, &count));
    ASSERT(count == 1);
    hamlyn_ticket_free(out[0]);
    free(text);
}

/* Node options, and the socket path a second connection finds the engine by. */
static void node_options(hamlyn_node *node) {
    char path[4096];
    size_t need = 0;
    EXPECT(hamlyn_node_socket_path(node, path, 1, &need), HAMLYN_RESULT_BUFFER_TOO_SMALL);
    ASSERT(need > 1 && need <= sizeof path);
    OK(hamlyn_node_socket_path(node, path, sizeof path, NULL));
    ASSERT(strlen(path) + 1 == need);

    hamlyn_node_options o = {0};
    o.queues = 2;
    o.queue_cap = 100; /* not a power of two */
    hamlyn_node *other = NULL;
    EXPECT(hamlyn_node_connect_with(path, &o, &other), HAMLYN_RESULT_INVALID_ARGUMENT);
    ASSERT(other == NULL);
    o.queue_cap = 128;
    OK(hamlyn_node_connect_with(path, &o, &other));
    hamlyn_queue *q;
    OK(hamlyn_queue_new(other, 1, &q));
    hamlyn_queue *beyond = NULL;
    EXPECT(hamlyn_queue_new(other, 2, &beyond), HAMLYN_RESULT_NO_SUCH_QUEUE);
    hamlyn_queue_free(q);
    hamlyn_node_free(other);
    OK(hamlyn_node_connect_with(path, NULL, &other));
    hamlyn_node_free(other);
}

/* Active messages: every error case of the hamlyn_am_* calls. The endpoint is freed by
 * the caller after the node, so calls on it are CLOSED then. */
static int32_t noop(hamlyn_am_ctx *ctx, void *user) {
    (void)ctx;
    (void)user;
    return 0;
}

static hamlyn_am *am_errors(hamlyn_node *node, hamlyn_am_region **out_region) {
    hamlyn_am *am = NULL;
    EXPECT(hamlyn_am_new(NULL, NULL, &am), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_am_new(node, NULL, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    hamlyn_am_options o = {0};
    o.short_credits = 99;
    EXPECT(hamlyn_am_new(node, &o, &am), HAMLYN_RESULT_INVALID_ARGUMENT);
    ASSERT(am == NULL);
    OK(hamlyn_am_new(node, NULL, &am));

    uint64_t fp = 0;
    EXPECT(hamlyn_am_fingerprint(NULL, &fp), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_am_fingerprint("u64", NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    OK(hamlyn_am_fingerprint("u64", &fp));
    /* FNV-1a of "u64", as Rust's hamlyn_am::fingerprint gives it. */
    ASSERT(fp == 0x4d35d3193e8d66f2ull);

    EXPECT(hamlyn_am_register(NULL, "x", fp, noop, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_am_register(am, NULL, fp, noop, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_am_register(am, "x", fp, NULL, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_am_register(am, "", fp, noop, NULL), HAMLYN_RESULT_INVALID_ARGUMENT);
    EXPECT(hamlyn_am_register(am, "errors.\xff", fp, noop, NULL), HAMLYN_RESULT_INVALID_ARGUMENT);
    OK(hamlyn_am_register(am, "errors.x", fp, noop, NULL));
    EXPECT(hamlyn_am_register(am, "errors.x", fp, noop, NULL), HAMLYN_RESULT_INVALID_ARGUMENT);
    OK(hamlyn_am_synch(am));
    EXPECT(hamlyn_am_synch(NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_am_refresh(NULL), HAMLYN_RESULT_NULL_ARGUMENT);

    hamlyn_am_handler_id h;
    EXPECT(hamlyn_am_handler_by_name(am, "errors.nobody", &h), HAMLYN_RESULT_UNKNOWN_HANDLER);
    EXPECT(hamlyn_am_handler_by_name(am, "errors.x", NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    OK(hamlyn_am_handler_by_name(am, "errors.x", &h));
    hamlyn_am_addr me;
    EXPECT(hamlyn_am_addr_of(am, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    OK(hamlyn_am_addr_of(am, &me));

    /* Sends: bad want, no arguments, a channel never opened, a payload too long. */
    uint64_t args[4] = {1, 2, 3, 4}, call = 0, reply[4];
    EXPECT(hamlyn_am_send_short(am, me, h, 0, args, 9, &call), HAMLYN_RESULT_INVALID_ARGUMENT);
    EXPECT(hamlyn_am_send_short(am, me, h, 0, NULL, HAMLYN_AM_WANT_ACK, &call),
           HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_am_send_short(am, me, h, 3, args, HAMLYN_AM_WANT_ACK, &call), HAMLYN_RESULT_NO_CHANNEL);
    EXPECT(hamlyn_am_send_bulk(am, me, h, 0, args, NULL, 8, HAMLYN_AM_WANT_ACK, &call),
           HAMLYN_RESULT_NULL_ARGUMENT);
    uint8_t *huge = calloc(1, 1 << 20);
    ASSERT(huge != NULL);
    EXPECT(hamlyn_am_send_bulk(am, me, h, 0, args, huge, 1 << 20, HAMLYN_AM_WANT_ACK, &call),
           HAMLYN_RESULT_TOO_LONG);
    free(huge);
    char why[8];
    size_t need = 0;
    EXPECT(hamlyn_last_error(why, sizeof why, &need), HAMLYN_RESULT_BUFFER_TOO_SMALL);
    ASSERT(need > sizeof why);
    char *text = malloc(need);
    ASSERT(text != NULL);
    OK(hamlyn_last_error(text, need, NULL));
    ASSERT(strstr(text, "1048576") != NULL);
    free(text);

    /* A message to itself: its handler runs in the poll inside the wait. */
    OK(hamlyn_am_send_short(am, me, h, 0, args, HAMLYN_AM_WANT_ACK, &call));
    uint32_t outcome = 0;
    EXPECT(hamlyn_am_wait(am, call, WAIT_MS, NULL, reply), HAMLYN_RESULT_NULL_ARGUMENT);
    OK(hamlyn_am_wait(am, call, WAIT_MS, &outcome, reply));
    ASSERT(outcome == HAMLYN_AM_OUTCOME_DONE);
    EXPECT(hamlyn_am_wait(am, call, 0, &outcome, reply), HAMLYN_RESULT_NO_CALL);
    EXPECT(hamlyn_am_wait(am, 123456789, 0, &outcome, reply), HAMLYN_RESULT_NO_CALL);
    /* Wanting a reply from a handler that gives none is a failure of the handler. */
    OK(hamlyn_am_send_short(am, me, h, 0, args, HAMLYN_AM_WANT_REPLY, &call));
    EXPECT(hamlyn_am_wait(am, call, WAIT_MS, &outcome, reply), HAMLYN_RESULT_HANDLER_FAILED);
    /* Unregistered here: the sender hears the handler is gone. */
    OK(hamlyn_am_unregister(am, "errors.x"));
    EXPECT(hamlyn_am_unregister(am, "errors.x"), HAMLYN_RESULT_UNKNOWN_HANDLER);
    OK(hamlyn_am_send_short(am, me, h, 0, args, HAMLYN_AM_WANT_ACK, &call));
    EXPECT(hamlyn_am_wait(am, call, WAIT_MS, &outcome, reply), HAMLYN_RESULT_HANDLER_GONE);
    uint64_t fcall;
    hamlyn_result code;
    EXPECT(hamlyn_am_next_failure(am, &fcall, &code), HAMLYN_RESULT_EMPTY);
    EXPECT(hamlyn_am_next_failure(am, NULL, &code), HAMLYN_RESULT_NULL_ARGUMENT);
    size_t handled;
    EXPECT(hamlyn_am_poll(NULL, 0, &handled), HAMLYN_RESULT_NULL_ARGUMENT);
    OK(hamlyn_am_poll(am, 0, NULL));
    uint16_t ch;
    EXPECT(hamlyn_am_open_channel(am, 0, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    hamlyn_am_counters c;
    EXPECT(hamlyn_am_counters_of(am, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    OK(hamlyn_am_counters_of(am, &c));
    ASSERT(c.unknown_handler == 1);
    hamlyn_am_handler_counters hc;
    EXPECT(hamlyn_am_handler_counters_of(am, "errors.nobody", &hc), HAMLYN_RESULT_UNKNOWN_HANDLER);
    (void)ch;

    /* A context outside a handler is NULL here: refused. */
    uint16_t chan;
    const uint8_t *view;
    size_t vlen;
    EXPECT(hamlyn_am_ctx_args(NULL, reply), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_am_ctx_channel(NULL, &chan), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_am_ctx_src(NULL, &me), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_am_ctx_payload(NULL, &view, &vlen), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_am_ctx_read_payload(NULL, 0, NULL, 0), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_am_ctx_reply(NULL, args), HAMLYN_RESULT_NULL_ARGUMENT);

    /* Memory messages: seeds too long for the buffer, targets of things that are not
     * regions, reads past the end. */
    hamlyn_am_region *region;
    EXPECT(hamlyn_am_region_new(am, 64, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    OK(hamlyn_am_region_new(am, 64, &region));
    char small[4] = {'x', 'x', 'x', 'x'};
    EXPECT(hamlyn_am_region_seed(region, small, sizeof small, &need), HAMLYN_RESULT_BUFFER_TOO_SMALL);
    ASSERT(need > sizeof small && need <= HAMLYN_SEED_TEXT_MAX && small[0] == 'x');
    uint8_t b[8];
    EXPECT(hamlyn_am_region_read(region, 60, b, 8), HAMLYN_RESULT_OUT_OF_RANGE);
    EXPECT(hamlyn_am_region_read(region, 0, NULL, 8), HAMLYN_RESULT_NULL_ARGUMENT);
    OK(hamlyn_am_region_read(region, 56, b, 8));
    hamlyn_am_target *target = NULL;
    EXPECT(hamlyn_am_target_new(am, "hmseed1-nonsense", &target), HAMLYN_RESULT_BAD_SEED);
    EXPECT(hamlyn_am_target_new(am, NULL, &target), HAMLYN_RESULT_NULL_ARGUMENT);
    ASSERT(target == NULL);
    EXPECT(hamlyn_am_target_write(NULL, 0, b, 8, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    hamlyn_am_target_free(NULL);
    hamlyn_am_region_free(NULL);
    hamlyn_am_free(NULL);
    *out_region = region;
    return am;
}

/* RPC and the job layer: NULLs, wrong handles, buffers too small, bad launcher variables;
 * a job of one (no launcher) through the daemon. Returns a job joined through `node`,
 * which the caller checks is closed once the node is freed. */
static int32_t proc_noop(hamlyn_rpc_ctx *ctx, const uint8_t *args, size_t args_len, uint8_t *result,
                         size_t result_cap, size_t *result_len, void *user) {
    (void)ctx, (void)args, (void)args_len, (void)result, (void)result_cap, (void)user;
    *result_len = 0;
    return 0;
}

static hamlyn_job *rpc_job_errors(hamlyn_node *node) {
    hamlyn_rpc_procedure p[] = {{"noop", proc_noop, NULL}};
    hamlyn_rpc_server *server = NULL;
    EXPECT(hamlyn_rpc_server_new(NULL, "capi-errors", p, 1, &server), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rpc_server_new(node, NULL, p, 1, &server), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rpc_server_new(node, "capi-errors", NULL, 1, &server), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rpc_server_new(node, "capi-errors", p, 1, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    hamlyn_rpc_procedure unnamed[] = {{"", proc_noop, NULL}};
    EXPECT(hamlyn_rpc_server_new(node, "capi-errors", unnamed, 1, &server), HAMLYN_RESULT_INVALID_ARGUMENT);
    ASSERT(server == NULL);
    uint32_t handled;
    EXPECT(hamlyn_rpc_server_serve(NULL, 0, &handled), HAMLYN_RESULT_NULL_ARGUMENT);
    hamlyn_rpc_server_counters sc;
    EXPECT(hamlyn_rpc_server_counters_of(NULL, &sc, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rpc_server_set_protect(NULL, 1), HAMLYN_RESULT_NULL_ARGUMENT);
    hamlyn_rpc_client *client = NULL;
    EXPECT(hamlyn_rpc_client_connect(NULL, "capi-errors", 0, &client), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rpc_client_connect(node, NULL, 0, &client), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rpc_client_connect(node, "capi-errors-nobody", 0, &client), HAMLYN_RESULT_NOT_FOUND);
    ASSERT(client == NULL);
    uint8_t buf[16];
    size_t len;
    uint64_t call, seglen;
    EXPECT(hamlyn_rpc_client_call(NULL, "noop", buf, 1, buf, sizeof buf, &len), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rpc_client_start(NULL, "noop", buf, 1, &call), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rpc_client_finish(NULL, 1, buf, sizeof buf, &len), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rpc_client_set_timeout(NULL, 1), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rpc_ctx_segment_len(NULL, &seglen), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rpc_ctx_read(NULL, 0, buf, 1), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rpc_ctx_write(NULL, 0, buf, 1), HAMLYN_RESULT_NULL_ARGUMENT);
    hamlyn_rpc_server_free(NULL);
    hamlyn_rpc_client_free(NULL);

    /* A server publishes its service until it is freed. */
    OK(hamlyn_rpc_server_new(node, "capi-errors", p, 1, &server));
    size_t clients = 9;
    OK(hamlyn_rpc_server_counters_of(server, &sc, &clients));
    ASSERT(clients == 0 && sc.calls == 0);
    hamlyn_rpc_server_free(server);
    /* Gone with its server: the service is not published any more. */
    EXPECT(hamlyn_rpc_client_connect(node, "capi-errors", 0, &client), HAMLYN_RESULT_NOT_FOUND);

    /* The job layer. */
    hamlyn_job *job = NULL;
    EXPECT(hamlyn_job_init(NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_job_join(NULL, &job), HAMLYN_RESULT_NULL_ARGUMENT);
    uint32_t v;
    EXPECT(hamlyn_job_rank(NULL, &v), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_job_size(NULL, &v), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_job_barrier(NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_job_all_gather(NULL, "x"), HAMLYN_RESULT_NULL_ARGUMENT);
    hamlyn_job_free(NULL);
    /* Launcher variables that make no sense. */
    setenv("HAMLYN_RANK", "5", 1);
    setenv("HAMLYN_SIZE", "2", 1);
    EXPECT(hamlyn_job_init(&job), HAMLYN_RESULT_INVALID_ARGUMENT);
    ASSERT(job == NULL);
    unsetenv("HAMLYN_RANK");
    unsetenv("HAMLYN_SIZE");
    /* No launcher: a job of one. */
    OK(hamlyn_job_init(&job));
    OK(hamlyn_job_rank(job, &v));
    ASSERT(v == 0);
    OK(hamlyn_job_size(job, &v));
    ASSERT(v == 1);
    OK(hamlyn_job_launcher(job, &v));
    ASSERT(v == HAMLYN_LAUNCHER_ALONE);
    EXPECT(hamlyn_job_set_timeout(job, 0), HAMLYN_RESULT_INVALID_ARGUMENT);
    OK(hamlyn_job_barrier(job));
    char seed[HAMLYN_SEED_TEXT_MAX];
    size_t need = 0;
    EXPECT(hamlyn_job_gathered(job, 0, seed, sizeof seed, &need), HAMLYN_RESULT_STATE);
    EXPECT(hamlyn_job_all_gather(job, "not a seed"), HAMLYN_RESULT_BAD_SEED);
    hamlyn_area *area;
    hamlyn_slot *slot;
    hamlyn_ticket *t;
    hamlyn_meta_area *meta;
    hamlyn_slot_config cfg = {0};
    OK(hamlyn_area_new(node, 4096, &area));
    OK(hamlyn_meta_area_new(node, 1, &meta));
    OK(hamlyn_slot_new(node, area, meta, &cfg, &slot));
    OK(hamlyn_slot_ticket_all(slot, &t));
    char *mine = seed_of(t);
    OK(hamlyn_job_all_gather(job, mine));
    EXPECT(hamlyn_job_gathered(job, 0, seed, 4, &need), HAMLYN_RESULT_BUFFER_TOO_SMALL);
    ASSERT(need == strlen(mine) + 1);
    OK(hamlyn_job_gathered(job, 0, seed, sizeof seed, NULL));
    ASSERT(strcmp(seed, mine) == 0);
    EXPECT(hamlyn_job_gathered(job, 1, seed, sizeof seed, NULL), HAMLYN_RESULT_OUT_OF_RANGE);
    free(mine);
    hamlyn_ticket_free(t);
    hamlyn_slot_free(slot);
    hamlyn_meta_area_free(meta);
    hamlyn_area_free(area);
    hamlyn_job_free(job);
    /* Joined through this node: closed with it. */
    OK(hamlyn_job_join(node, &job));
    return job;
}

/* The protocol level: NULLs, seeds of the wrong kind or none, buffers too small, calls
 * out of turn. Returns a tagged server, which the caller checks is closed once the node
 * is freed (and frees). */
static hamlyn_rats_tagged_server *rats_errors(hamlyn_node *node, hamlyn_rats **out_rats) {
    hamlyn_rats *rats = NULL;
    EXPECT(hamlyn_rats_new(NULL, &rats), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rats_new(node, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    ASSERT(rats == NULL);
    OK(hamlyn_rats_new(node, &rats));

    hamlyn_rats_tagged_server *tagged = NULL;
    EXPECT(hamlyn_rats_tagged_server_new(NULL, 4096, &tagged), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rats_tagged_server_new(rats, 4096, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    OK(hamlyn_rats_tagged_server_new(rats, 4096, &tagged));
    char small[4] = {'x', 'x', 'x', 'x'};
    size_t need = 0;
    EXPECT(hamlyn_rats_tagged_server_seed(tagged, small, sizeof small, &need), HAMLYN_RESULT_BUFFER_TOO_SMALL);
    ASSERT(need > sizeof small && small[0] == 'x');
    char *seed = malloc(need);
    ASSERT(seed != NULL);
    OK(hamlyn_rats_tagged_server_seed(tagged, seed, need, NULL));
    hamlyn_rats_tag tag;
    EXPECT(hamlyn_rats_tagged_get_tag(tagged, 0, &tag), HAMLYN_RESULT_EMPTY);
    EXPECT(hamlyn_rats_tagged_get_tag(tagged, 1, &tag), HAMLYN_RESULT_TIMEOUT);
    EXPECT(hamlyn_rats_tagged_get_tag(tagged, 0, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    uint8_t b[16];
    EXPECT(hamlyn_rats_tagged_read(tagged, 0, NULL, 8), HAMLYN_RESULT_NULL_ARGUMENT);

    /* Seeds: none, not a seed, another protocol's. */
    hamlyn_rats_tagged_client *tc = NULL;
    hamlyn_rats_datagram_sender *ds = NULL;
    hamlyn_rats_stream_sender *ss = NULL;
    hamlyn_rats_simple_client *sc = NULL;
    hamlyn_rats_request_client *rc = NULL;
    EXPECT(hamlyn_rats_tagged_client_new(rats, NULL, &tc), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rats_tagged_client_new(rats, "hmseed1-nonsense", &tc), HAMLYN_RESULT_BAD_SEED);
    EXPECT(hamlyn_rats_datagram_sender_new(rats, seed, &ds), HAMLYN_RESULT_BAD_SEED);
    EXPECT(hamlyn_rats_stream_sender_new(rats, seed, &ss), HAMLYN_RESULT_BAD_SEED);
    EXPECT(hamlyn_rats_simple_client_new(rats, seed, &sc), HAMLYN_RESULT_BAD_SEED);
    EXPECT(hamlyn_rats_request_client_new(rats, seed, 64, &rc), HAMLYN_RESULT_BAD_SEED);
    ASSERT(tc == NULL && ds == NULL && ss == NULL && sc == NULL && rc == NULL);
    free(seed);

    /* Datagrams: no buffers; a datagram never received is not held. */
    hamlyn_rats_datagram_receiver *dr = NULL;
    EXPECT(hamlyn_rats_datagram_receiver_new(rats, 0, 64, &dr), HAMLYN_RESULT_INVALID_ARGUMENT);
    ASSERT(dr == NULL);
    OK(hamlyn_rats_datagram_receiver_new(rats, 1, 64, &dr));
    hamlyn_rats_datagram d;
    EXPECT(hamlyn_rats_datagram_recv(dr, 0, &d), HAMLYN_RESULT_TIMEOUT);
    EXPECT(hamlyn_rats_datagram_release(dr, 42), HAMLYN_RESULT_STATE);
    EXPECT(hamlyn_rats_datagram_read(dr, 42, 0, b, 1), HAMLYN_RESULT_STATE);
    hamlyn_rats_datagram_receiver_free(dr);

    /* Simple datagram: nothing received, nothing to answer. */
    hamlyn_rats_simple *simple;
    OK(hamlyn_rats_simple_new(rats, 64, &simple));
    hamlyn_rats_simple_message m;
    EXPECT(hamlyn_rats_simple_recv(simple, 0, &m), HAMLYN_RESULT_EMPTY);
    EXPECT(hamlyn_rats_simple_reply(simple, b, 1, 0, NULL), HAMLYN_RESULT_STATE);
    hamlyn_rats_simple_free(simple);

    /* Request/response: nothing held. */
    hamlyn_rats_request_server *rs;
    OK(hamlyn_rats_request_server_new(rats, 64, &rs));
    EXPECT(hamlyn_rats_request_release(rs), HAMLYN_RESULT_STATE);
    EXPECT(hamlyn_rats_request_read(rs, 0, b, 1), HAMLYN_RESULT_STATE);
    EXPECT(hamlyn_rats_request_reply(rs, b, 1, NULL), HAMLYN_RESULT_STATE);
    EXPECT(hamlyn_rats_request_client_lookup(rats, "capi-errors-no-server", 64, &rc), HAMLYN_RESULT_NOT_FOUND);
    hamlyn_rats_request_server_free(rs);

    /* Stream: a ring too small; a read mode that does not exist. */
    hamlyn_rats_stream_receiver *sr = NULL;
    EXPECT(hamlyn_rats_stream_receiver_new(rats, 64, 1, &sr), HAMLYN_RESULT_INVALID_ARGUMENT);
    OK(hamlyn_rats_stream_receiver_new(rats, 65536, 4, &sr));
    size_t len;
    EXPECT(hamlyn_rats_stream_read(sr, 2, 0, b, sizeof b, &len, NULL), HAMLYN_RESULT_INVALID_ARGUMENT);
    EXPECT(hamlyn_rats_stream_read(sr, 0, 0, b, sizeof b, &len, NULL), HAMLYN_RESULT_TIMEOUT);
    EXPECT(hamlyn_rats_stream_read(sr, 0, 0, b, sizeof b, NULL, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    hamlyn_rats_stream_receiver_free(sr);

    /* Remote write and remote read: NULL arguments, each other's seed, reads out of
     * turn. */
    hamlyn_rats_remote_write_server *rws = NULL;
    hamlyn_rats_remote_write_client *rwc = NULL;
    hamlyn_rats_remote_read_server *rrs = NULL;
    hamlyn_rats_remote_read_client *rrc = NULL;
    EXPECT(hamlyn_rats_remote_write_server_new(NULL, 64, &rws), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rats_remote_write_server_new(rats, 64, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rats_remote_read_server_new(rats, 64, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    ASSERT(rws == NULL);
    OK(hamlyn_rats_remote_write_server_new(rats, 64, &rws));
    OK(hamlyn_rats_remote_read_server_new(rats, 64, &rrs));
    char *wseed = malloc(HAMLYN_SEED_TEXT_MAX), *rseed = malloc(HAMLYN_SEED_TEXT_MAX);
    ASSERT(wseed != NULL && rseed != NULL);
    OK(hamlyn_rats_remote_write_server_seed(rws, wseed, HAMLYN_SEED_TEXT_MAX, NULL));
    OK(hamlyn_rats_remote_read_server_seed(rrs, rseed, HAMLYN_SEED_TEXT_MAX, NULL));
    EXPECT(hamlyn_rats_remote_write_client_new(rats, NULL, &rwc), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rats_remote_write_client_new(rats, rseed, &rwc), HAMLYN_RESULT_BAD_SEED);
    EXPECT(hamlyn_rats_remote_read_client_new(rats, wseed, 64, &rrc), HAMLYN_RESULT_BAD_SEED);
    ASSERT(rwc == NULL && rrc == NULL);
    OK(hamlyn_rats_remote_write_client_new(rats, wseed, &rwc));
    OK(hamlyn_rats_remote_read_client_new(rats, rseed, 64, &rrc));
    EXPECT(hamlyn_rats_remote_write(rwc, 0, NULL, 1, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rats_remote_write_client_len(rwc, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rats_remote_write_gather(rwc, 0, NULL, 1, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rats_remote_write_server_read(rws, 0, NULL, 1), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rats_remote_write_server_read(rws, 60, b, 8), HAMLYN_RESULT_OUT_OF_RANGE);
    EXPECT(hamlyn_rats_remote_read_server_write(rrs, 0, NULL, 1), HAMLYN_RESULT_NULL_ARGUMENT);
    uint32_t ready = 7;
    size_t got = 7;
    EXPECT(hamlyn_rats_remote_read_ready(rrc, &ready), HAMLYN_RESULT_STATE);
    EXPECT(hamlyn_rats_remote_read_ready(rrc, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_rats_remote_read_take(rrc, b, sizeof b, &got), HAMLYN_RESULT_STATE);
    EXPECT(hamlyn_rats_remote_read_take(rrc, b, sizeof b, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    ASSERT(ready == 7 && got == 7);
    uint8_t past[65];
    EXPECT(hamlyn_rats_remote_read(rrc, 0, sizeof past, WAIT_MS, past), HAMLYN_RESULT_TOO_LONG);
    hamlyn_rats_remote_read_client_free(rrc);
    hamlyn_rats_remote_read_server_free(rrs);
    hamlyn_rats_remote_write_client_free(rwc);
    hamlyn_rats_remote_write_server_free(rws);
    free(wseed);
    free(rseed);

    hamlyn_rats_remote_write_server_free(NULL);
    hamlyn_rats_remote_write_client_free(NULL);
    hamlyn_rats_remote_read_server_free(NULL);
    hamlyn_rats_remote_read_client_free(NULL);
    hamlyn_rats_tagged_server_free(NULL);
    hamlyn_rats_tagged_client_free(NULL);
    hamlyn_rats_datagram_receiver_free(NULL);
    hamlyn_rats_datagram_sender_free(NULL);
    hamlyn_rats_simple_free(NULL);
    hamlyn_rats_simple_client_free(NULL);
    hamlyn_rats_request_server_free(NULL);
    hamlyn_rats_request_client_free(NULL);
    hamlyn_rats_stream_receiver_free(NULL);
    hamlyn_rats_stream_sender_free(NULL);
    hamlyn_rats_free(NULL);
    *out_rats = rats;
    return tagged;
}

int main(void) {
    version();
    nulls();

    hamlyn_node *node;
    OK(hamlyn_node_connect_default(&node));
    hamlyn_area *area;
    EXPECT(hamlyn_area_new(node, 0, &area), HAMLYN_RESULT_INVALID_ARGUMENT);
    OK(hamlyn_area_new(node, 1 << 20, &area));
    hamlyn_meta_area *meta;
    OK(hamlyn_meta_area_new(node, 4, &meta));

    /* Out-of-range values from C. */
    hamlyn_slot *slot = NULL;
    hamlyn_slot_config cfg = {0};
    cfg.mode = 99;
    EXPECT(hamlyn_slot_new(node, area, meta, &cfg, &slot), HAMLYN_RESULT_INVALID_ARGUMENT);
    cfg.mode = HAMLYN_SLOT_NORMAL;
    cfg.perms = 0x80;
    EXPECT(hamlyn_slot_new(node, area, meta, &cfg, &slot), HAMLYN_RESULT_INVALID_ARGUMENT);
    cfg.perms = 0;
    cfg.offset = 1 << 20;
    cfg.len = 64;
    EXPECT(hamlyn_slot_new(node, area, meta, &cfg, &slot), HAMLYN_RESULT_OUT_OF_RANGE);
    cfg.mode = HAMLYN_SLOT_NORMAL;
    cfg.offset = 0;
    cfg.len = 0;
    EXPECT(hamlyn_slot_new(node, area, NULL, &cfg, &slot), HAMLYN_RESULT_INVALID_ARGUMENT);
    ASSERT(slot == NULL);
    cfg.flags = HAMLYN_SLOT_QUEUE;
    OK(hamlyn_slot_new(node, area, meta, &cfg, &slot));
    hamlyn_ticket *ticket;
    EXPECT(hamlyn_slot_ticket(slot, 0, 2 << 20, 0, 1, &ticket), HAMLYN_RESULT_OUT_OF_RANGE);
    EXPECT(hamlyn_slot_ticket(slot, 0, 64, 3, 5, &ticket), HAMLYN_RESULT_OUT_OF_RANGE);
    OK(hamlyn_slot_ticket_all(slot, &ticket));
    seeds(ticket);
    multi_ticket_seeds(ticket);
    node_options(node);
    /* Progress by a polling loop: callable any time; NULLs refused. */
    uint8_t did = 2;
    EXPECT(hamlyn_node_progress(NULL, &did), HAMLYN_RESULT_NULL_ARGUMENT);
    EXPECT(hamlyn_node_progress(node, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    for (int i = 0; i < 100; i++) {
        OK(hamlyn_node_progress(node, &did));
        ASSERT(did == 0 || did == 1);
    }
    hamlyn_am_region *am_region;
    hamlyn_am *am = am_errors(node, &am_region);
    hamlyn_job *job = rpc_job_errors(node);
    hamlyn_rats *rats;
    hamlyn_rats_tagged_server *rats_tagged = rats_errors(node, &rats);

    hamlyn_queue *queue, *again = NULL;
    OK(hamlyn_queue_new(node, 0, &queue));
    EXPECT(hamlyn_queue_new(node, 0, &again), HAMLYN_RESULT_QUEUE_TAKEN);
    EXPECT(hamlyn_queue_new(node, 999, &again), HAMLYN_RESULT_NO_SUCH_QUEUE);
    ASSERT(again == NULL);
    hamlyn_notification n;
    EXPECT(hamlyn_queue_poll(queue, &n), HAMLYN_RESULT_EMPTY);
    EXPECT(hamlyn_queue_wait(queue, 0, &n), HAMLYN_RESULT_TIMEOUT);
    hamlyn_terminus *term;
    OK(hamlyn_terminus_new(node, 0, &term));

    /* Bad send arguments: nothing queued. */
    uint8_t big[HAMLYN_MAX_INLINE + 1] = {0};
    EXPECT(hamlyn_terminus_send_inline(term, ticket, NULL, big, sizeof big, NULL),
           HAMLYN_RESULT_INLINE_TOO_LONG);
    EXPECT(hamlyn_terminus_send_inline(term, ticket, NULL, NULL, 8, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    hamlyn_send_options o = {0};
    o.flags = 0x100;
    EXPECT(hamlyn_terminus_send_inline(term, ticket, &o, big, 8, NULL), HAMLYN_RESULT_INVALID_ARGUMENT);
    o.flags = 0;
    o.offset = 1 << 20;
    EXPECT(hamlyn_terminus_send_inline(term, ticket, &o, big, 8, NULL), HAMLYN_RESULT_BAD_TICKET);
    EXPECT(hamlyn_terminus_send_area(term, ticket, NULL, area, (1 << 20) - 4, 8, NULL),
           HAMLYN_RESULT_OUT_OF_RANGE);

    /* A message with metadata, then the metadata out through a buffer. */
    o.offset = 0;
    o.tag = 7;
    o.meta = (const uint8_t *)"meta!";
    o.meta_len = 5;
    hamlyn_send *s;
    OK(hamlyn_terminus_send_inline(term, ticket, &o, (const uint8_t *)"hello", 5, &s));
    hamlyn_status st;
    OK(hamlyn_send_wait(s, WAIT_MS, &st));
    ASSERT(st.state == HAMLYN_STATUS_SENT);
    hamlyn_send_free(s);
    n = next(queue, HAMLYN_NOTIFY_MESSAGE);
    ASSERT(n.word == 7 && n.meta_index == 0);
    uint8_t md[60];
    size_t md_len = 0;
    EXPECT(hamlyn_meta_area_metadata(meta, 0, md, 2, &md_len), HAMLYN_RESULT_BUFFER_TOO_SMALL);
    ASSERT(md_len == 5);
    OK(hamlyn_meta_area_metadata(meta, 0, md, sizeof md, &md_len));
    ASSERT(md_len == 5 && memcmp(md, "meta!", 5) == 0);
    EXPECT(hamlyn_meta_area_metadata(meta, 4, md, sizeof md, &md_len), HAMLYN_RESULT_OUT_OF_RANGE);

    /* The wrong key: a ticket from before a rekey fails with BAD_KEY. */
    OK(hamlyn_slot_rekey(slot));
    OK(hamlyn_terminus_send_inline(term, ticket, NULL, (const uint8_t *)"stale", 5, &s));
    OK(hamlyn_send_wait(s, WAIT_MS, &st));
    ASSERT(st.state == HAMLYN_STATUS_FAILED);
    ASSERT(st.reason == HAMLYN_REJECT_BAD_KEY);
    hamlyn_send_free(s);
    hamlyn_ticket_free(ticket);
    OK(hamlyn_slot_ticket_all(slot, &ticket));

    /* FULL: 1 MiB sends (several packets each) fill the work queue faster than the engine
     * empties it; nothing is dropped, every queued send completes. With the default entry
     * choice, the ticket's entries may all be busy with a long message first
     * (ENTRIES_BUSY, also nothing queued): back-pressure either way. */
    int full = 0;
    o = (hamlyn_send_options){0};
    o.flags = HAMLYN_SEND_NO_NOTIFY;
    for (int i = 0; i < 100000 && !full; i++) {
        hamlyn_result r = hamlyn_terminus_send_area(term, ticket, &o, area, 0, 1 << 20, NULL);
        if (r == HAMLYN_RESULT_FULL || r == HAMLYN_RESULT_ENTRIES_BUSY) {
            full = 1;
        } else if (r != HAMLYN_RESULT_OK) {
            FAIL("send returned %s", hamlyn_result_name(r));
        }
    }
    ASSERT(full);
    uint32_t idle = 0;
    OK(hamlyn_terminus_wait_idle(term, WAIT_MS, &idle));
    ASSERT(idle == 1);
    /* An idle terminus has room at once. */
    uint32_t room = 0;
    OK(hamlyn_terminus_wait_room(term, 0, &room));
    ASSERT(room == 1);
    EXPECT(hamlyn_terminus_wait_room(term, WAIT_MS, NULL), HAMLYN_RESULT_NULL_ARGUMENT);

    /* The registry. */
    hamlyn_ticket *found = NULL;
    EXPECT(hamlyn_node_lookup(node, "capi-errors-nobody", &found), HAMLYN_RESULT_NOT_FOUND);
    ASSERT(found == NULL);
    OK(hamlyn_node_publish(node, "capi-errors", ticket));
    OK(hamlyn_node_lookup(node, "capi-errors", &found));
    hamlyn_ticket_info a, b;
    OK(hamlyn_ticket_get_info(ticket, &a));
    OK(hamlyn_ticket_get_info(found, &b));
    ASSERT(a.slot == b.slot && a.len == b.len && (b.flags & HAMLYN_TICKET_WRITE));
    hamlyn_ticket_free(found);
    OK(hamlyn_node_unpublish(node, "capi-errors"));
    EXPECT(hamlyn_node_unpublish(node, "capi-errors"), HAMLYN_RESULT_NOT_FOUND);

    /* Statistics. */
    hamlyn_stats stats;
    OK(hamlyn_node_stats(node, &stats));
    ASSERT(stats.packets > 0 && stats.areas >= 2 && stats.slots >= 1);
    EXPECT(hamlyn_node_stats(node, NULL), HAMLYN_RESULT_NULL_ARGUMENT);

    /* A fast direct slot: deposited in this process; the event descriptor says so. */
    hamlyn_area *darea;
    OK(hamlyn_area_new(node, 4096, &darea));
    hamlyn_slot_config dcfg = {0};
    dcfg.mode = HAMLYN_SLOT_FAST;
    dcfg.flags = HAMLYN_SLOT_QUEUE | HAMLYN_SLOT_DANGER_DIRECT;
    dcfg.queue = 0;
    hamlyn_slot *dslot;
    OK(hamlyn_slot_new(node, darea, NULL, &dcfg, &dslot));
    hamlyn_ticket *dt;
    OK(hamlyn_slot_ticket_all(dslot, &dt));
    hamlyn_direct *direct;
    OK(hamlyn_direct_open(node, dt, &direct));
    int32_t fd;
    OK(hamlyn_node_event_fd(node, &fd));
    uint32_t ready = 1;
    OK(hamlyn_queue_arm(queue, &ready));
    ASSERT(ready == 0);
    o = (hamlyn_send_options){0};
    o.tag = 0xFA57;
    o.offset = 8;
    OK(hamlyn_direct_send(direct, &o, (const uint8_t *)"fast", 4));
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ASSERT(poll(&p, 1, WAIT_MS) == 1);
    uint64_t pokes = 0;
    OK(hamlyn_node_drain_event_fd(node, &pokes));
    ASSERT(pokes >= 1);
    OK(hamlyn_queue_poll(queue, &n));
    ASSERT(n.kind == HAMLYN_NOTIFY_FAST && n.word == 0xFA57 && n.meta_index == HAMLYN_NO_META_INDEX);
    char fast[4];
    OK(hamlyn_area_read(darea, 8, (uint8_t *)fast, 4));
    ASSERT(memcmp(fast, "fast", 4) == 0);

    /* A paranoid one-shot slot: an entry takes one message, then refuses until re-armed. */
    hamlyn_area *parea;
    OK(hamlyn_area_new(node, 4096, &parea));
    hamlyn_meta_area *pmeta;
    OK(hamlyn_meta_area_new(node, 2, &pmeta));
    hamlyn_slot_config pcfg = {0};
    pcfg.mode = HAMLYN_SLOT_PARANOID_ONE_SHOT;
    pcfg.flags = HAMLYN_SLOT_QUEUE;
    hamlyn_slot *pslot;
    OK(hamlyn_slot_new(node, parea, pmeta, &pcfg, &pslot));
    hamlyn_ticket *pt;
    EXPECT(hamlyn_slot_ticket(pslot, 0, 64, 0, 0, &pt), HAMLYN_RESULT_INVALID_ARGUMENT);
    OK(hamlyn_slot_ticket(pslot, 0, 64, 1, 1, &pt));
    uint32_t armed = 0;
    OK(hamlyn_meta_area_is_armed(pmeta, 1, &armed));
    ASSERT(armed == 1);
    OK(hamlyn_terminus_send_inline(term, pt, NULL, (const uint8_t *)"one", 3, &s));
    OK(hamlyn_send_wait(s, WAIT_MS, &st));
    ASSERT(st.state == HAMLYN_STATUS_SENT);
    hamlyn_send_free(s);
    n = next(queue, HAMLYN_NOTIFY_MESSAGE);
    ASSERT(n.meta_index == 1);
    OK(hamlyn_meta_area_is_armed(pmeta, 1, &armed));
    ASSERT(armed == 0);
    OK(hamlyn_terminus_send_inline(term, pt, NULL, (const uint8_t *)"two", 3, &s));
    OK(hamlyn_send_wait(s, WAIT_MS, &st));
    ASSERT(st.state == HAMLYN_STATUS_FAILED && st.reason == HAMLYN_REJECT_DISARMED);
    hamlyn_send_free(s);
    OK(hamlyn_meta_area_arm(pmeta, 1));
    OK(hamlyn_terminus_send_inline(term, pt, NULL, (const uint8_t *)"two", 3, &s));
    OK(hamlyn_send_wait(s, WAIT_MS, &st));
    ASSERT(st.state == HAMLYN_STATUS_SENT);
    hamlyn_send_free(s);
    next(queue, HAMLYN_NOTIFY_MESSAGE);
    hamlyn_ticket_free(pt);
    hamlyn_slot_free(pslot);
    hamlyn_meta_area_free(pmeta);
    hamlyn_area_free(parea);

    /* Freeing the node closes its handles: CLOSED, never a crash; they are still freed. */
    hamlyn_node_free(node);
    EXPECT(hamlyn_area_write(area, 0, (const uint8_t *)"x", 1), HAMLYN_RESULT_CLOSED);
    uint8_t *mem;
    uint64_t len;
    EXPECT(hamlyn_area_memory(area, &mem, &len), HAMLYN_RESULT_CLOSED);
    EXPECT(hamlyn_queue_poll(queue, &n), HAMLYN_RESULT_CLOSED);
    EXPECT(hamlyn_terminus_send_inline(term, ticket, NULL, (const uint8_t *)"x", 1, NULL),
           HAMLYN_RESULT_CLOSED);
    hamlyn_ticket *t2 = NULL;
    EXPECT(hamlyn_slot_ticket_all(slot, &t2), HAMLYN_RESULT_CLOSED);
    ASSERT(t2 == NULL);
    EXPECT(hamlyn_slot_rekey(slot), HAMLYN_RESULT_CLOSED);
    EXPECT(hamlyn_meta_area_arm(meta, 0), HAMLYN_RESULT_CLOSED);
    EXPECT(hamlyn_direct_send(direct, NULL, (const uint8_t *)"x", 1), HAMLYN_RESULT_CLOSED);
    EXPECT(hamlyn_am_synch(am), HAMLYN_RESULT_CLOSED);
    EXPECT(hamlyn_am_poll(am, 0, NULL), HAMLYN_RESULT_CLOSED);
    uint8_t rb[4];
    EXPECT(hamlyn_am_region_read(am_region, 0, rb, 4), HAMLYN_RESULT_CLOSED);
    hamlyn_am_region_free(am_region);
    hamlyn_am_free(am);
    EXPECT(hamlyn_job_barrier(job), HAMLYN_RESULT_CLOSED);
    hamlyn_job_free(job);
    hamlyn_rats_tag tag;
    EXPECT(hamlyn_rats_tagged_get_tag(rats_tagged, 0, &tag), HAMLYN_RESULT_CLOSED);
    hamlyn_rats_tagged_server_free(rats_tagged);
    hamlyn_rats_free(rats);
    /* A ticket is a value: still usable. */
    size_t need;
    EXPECT(hamlyn_ticket_to_seed(ticket, NULL, 0, &need), HAMLYN_RESULT_BUFFER_TOO_SMALL);

    hamlyn_direct_free(direct);
    hamlyn_ticket_free(dt);
    hamlyn_slot_free(dslot);
    hamlyn_area_free(darea);
    hamlyn_terminus_free(term);
    hamlyn_queue_free(queue);
    hamlyn_ticket_free(ticket);
    hamlyn_slot_free(slot);
    hamlyn_meta_area_free(meta);
    hamlyn_area_free(area);

    /* An embedded engine, in this process. */
    hamlyn_node *embedded;
    OK(hamlyn_node_embedded(&embedded));
    uint32_t id = 99;
    OK(hamlyn_node_id(embedded, &id));
    ASSERT(id == 0);
    hamlyn_node_free(embedded);

    printf("errors: every case answered with its code\n");
    return 0;
}
