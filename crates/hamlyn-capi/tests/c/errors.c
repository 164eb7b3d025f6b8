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
    ASSERT(strcmp(hamlyn_result_name(123456), "HAMLYN_RESULT_UNKNOWN") == 0);
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
     * empties it; nothing is dropped, every queued send completes. */
    int full = 0;
    o = (hamlyn_send_options){0};
    o.flags = HAMLYN_SEND_NO_NOTIFY;
    for (int i = 0; i < 100000 && !full; i++) {
        hamlyn_result r = hamlyn_terminus_send_area(term, ticket, &o, area, 0, 1 << 20, NULL);
        if (r == HAMLYN_RESULT_FULL) {
            full = 1;
        } else if (r != HAMLYN_RESULT_OK) {
            FAIL("send returned %s", hamlyn_result_name(r));
        }
    }
    ASSERT(full);
    uint32_t idle = 0;
    OK(hamlyn_terminus_wait_idle(term, WAIT_MS, &idle));
    ASSERT(idle == 1);

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
