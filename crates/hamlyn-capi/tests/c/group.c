/* Group receive with split tickets across processes, through a daemon (HAMLYN_SOCKET).
 *
 *   group receive N   makes one message slot of N * 64 bytes with one metadata entry,
 *                     splits its ticket N ways and prints the N seeds, one a line; then
 *                     waits for the one notification that says every part arrived
 *   group send        HAMLYN_SEED is one part, HAMLYN_PART its number: fills its range
 *                     with bytes of value PART + 1
 */
#include "check.h"

enum { PART = 64, MAX_PARTS = 16 };

static int receive(size_t parts) {
    ASSERT(parts > 0 && parts <= MAX_PARTS);
    hamlyn_node *node;
    OK(hamlyn_node_connect_default(&node));
    hamlyn_area *area;
    OK(hamlyn_area_new(node, parts * PART, &area));
    hamlyn_meta_area *meta;
    OK(hamlyn_meta_area_new(node, 1, &meta));
    hamlyn_slot_config cfg = {0};
    cfg.flags = HAMLYN_SLOT_QUEUE;
    hamlyn_slot *slot;
    OK(hamlyn_slot_new(node, area, meta, &cfg, &slot));
    hamlyn_queue *queue;
    OK(hamlyn_queue_new(node, 0, &queue));
    hamlyn_ticket *whole;
    OK(hamlyn_slot_ticket_all(slot, &whole));

    hamlyn_ticket *part[MAX_PARTS];
    EXPECT(hamlyn_ticket_split(whole, 0, part), HAMLYN_RESULT_SPLIT);
    EXPECT(hamlyn_ticket_split(whole, parts, NULL), HAMLYN_RESULT_NULL_ARGUMENT);
    OK(hamlyn_ticket_split(whole, parts, part));
    for (size_t i = 0; i < parts; i++) {
        hamlyn_ticket_info info;
        OK(hamlyn_ticket_get_info(part[i], &info));
        ASSERT(info.offset == i * PART && info.len == PART);
        char *seed = seed_of(part[i]);
        printf("%s\n", seed);
        free(seed);
        hamlyn_ticket_free(part[i]);
    }
    fflush(stdout);

    /* One message, complete only when every part is in. */
    hamlyn_notification n = next(queue, HAMLYN_NOTIFY_MESSAGE);
    ASSERT(n.meta_index == 0);
    for (size_t i = 0; i < parts; i++) {
        uint8_t got[PART];
        OK(hamlyn_area_read(area, i * PART, got, PART));
        for (size_t j = 0; j < PART; j++) {
            if (got[j] != (uint8_t)(i + 1)) {
                FAIL("byte %zu of part %zu is %u", j, i, got[j]);
            }
        }
    }
    EXPECT(hamlyn_queue_poll(queue, &n), HAMLYN_RESULT_EMPTY);

    hamlyn_ticket_free(whole);
    hamlyn_queue_free(queue);
    hamlyn_slot_free(slot);
    hamlyn_meta_area_free(meta);
    hamlyn_area_free(area);
    hamlyn_node_free(node);
    printf("group: %zu parts, one message\n", parts);
    return 0;
}

static int send_part(void) {
    int index = atoi(env("HAMLYN_PART"));
    hamlyn_ticket *t;
    OK(hamlyn_ticket_from_seed(env("HAMLYN_SEED"), &t));
    hamlyn_ticket_info info;
    OK(hamlyn_ticket_get_info(t, &info));
    ASSERT(info.len == PART);
    uint8_t bytes[PART];
    memset(bytes, index + 1, sizeof bytes);

    hamlyn_node *node;
    OK(hamlyn_node_connect_default(&node));
    hamlyn_terminus *term;
    OK(hamlyn_terminus_new(node, 0, &term));
    hamlyn_send *s;
    OK(hamlyn_terminus_send_inline(term, t, NULL, bytes, sizeof bytes, &s));
    hamlyn_status st;
    OK(hamlyn_send_wait(s, WAIT_MS, &st));
    ASSERT(st.state == HAMLYN_STATUS_SENT);
    hamlyn_send_free(s);
    hamlyn_terminus_free(term);
    hamlyn_node_free(node);
    hamlyn_ticket_free(t);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "receive") == 0) {
        return receive((size_t)atoi(argv[2]));
    }
    if (argc == 2 && strcmp(argv[1], "send") == 0) {
        return send_part();
    }
    fprintf(stderr, "usage: group receive N | group send\n");
    return 2;
}
