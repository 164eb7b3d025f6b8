/* One-sided operations through a daemon (HAMLYN_SOCKET): a remote read, compare-and-swap
 * (one that swaps, one that does not) and fetch-and-add on a slot granting reads and
 * atomics, answered into a reply slot with a queue; each answer names its request. */
#include "check.h"

static hamlyn_notification answer(const hamlyn_queue *q, uint32_t kind, const hamlyn_send *s) {
    hamlyn_notification n = next(q, kind);
    uint16_t terminus;
    uint32_t seq;
    OK(hamlyn_send_request(s, &terminus, &seq));
    ASSERT(n.has_request == 1);
    ASSERT(n.request_terminus == terminus && n.request_seq == seq);
    hamlyn_status st;
    OK(hamlyn_send_wait(s, WAIT_MS, &st));
    ASSERT(st.state == HAMLYN_STATUS_SENT);
    return n;
}

static uint64_t word(const hamlyn_area *a, uint64_t off) {
    uint64_t v;
    OK(hamlyn_area_read(a, off, (uint8_t *)&v, 8));
    return v;
}

int main(void) {
    hamlyn_node *node;
    OK(hamlyn_node_connect_default(&node));

    /* The target: a word at 0 and bytes at 64, readable and atomically updatable. */
    hamlyn_area *target;
    OK(hamlyn_area_new(node, 4096, &target));
    hamlyn_meta_area *tmeta;
    OK(hamlyn_meta_area_new(node, 1, &tmeta));
    hamlyn_slot_config tcfg = {0};
    tcfg.perms = HAMLYN_PERM_READ | HAMLYN_PERM_ATOMIC;
    hamlyn_slot *tslot;
    OK(hamlyn_slot_new(node, target, tmeta, &tcfg, &tslot));
    hamlyn_ticket *tt;
    OK(hamlyn_slot_ticket_all(tslot, &tt));
    uint64_t v = 41;
    OK(hamlyn_area_write(target, 0, (const uint8_t *)&v, 8));
    OK(hamlyn_area_write(target, 64, (const uint8_t *)"remote bytes", 12));

    /* Where answers land. */
    hamlyn_area *reply;
    OK(hamlyn_area_new(node, 4096, &reply));
    hamlyn_meta_area *rmeta;
    OK(hamlyn_meta_area_new(node, 1, &rmeta));
    hamlyn_slot_config rcfg = {0};
    rcfg.flags = HAMLYN_SLOT_QUEUE;
    rcfg.queue = 1;
    hamlyn_slot *rslot;
    OK(hamlyn_slot_new(node, reply, rmeta, &rcfg, &rslot));
    hamlyn_ticket *rt;
    OK(hamlyn_slot_ticket_all(rslot, &rt));
    hamlyn_queue *q;
    OK(hamlyn_queue_new(node, 1, &q));
    hamlyn_terminus *t;
    OK(hamlyn_terminus_new(node, 0, &t));

    hamlyn_send *s;
    OK(hamlyn_terminus_read(t, tt, 64, 12, rt, 128, &s));
    answer(q, HAMLYN_NOTIFY_READ_DONE, s);
    hamlyn_send_free(s);
    char got[12];
    OK(hamlyn_area_read(reply, 128, (uint8_t *)got, 12));
    ASSERT(memcmp(got, "remote bytes", 12) == 0);

    OK(hamlyn_terminus_compare_swap(t, tt, 0, 41, 42, rt, 0, &s));
    ASSERT(answer(q, HAMLYN_NOTIFY_ATOMIC_DONE, s).word == 41);
    hamlyn_send_free(s);
    ASSERT(word(target, 0) == 42 && word(reply, 0) == 41);

    OK(hamlyn_terminus_compare_swap(t, tt, 0, 41, 99, rt, 8, &s));
    ASSERT(answer(q, HAMLYN_NOTIFY_ATOMIC_DONE, s).word == 42);
    hamlyn_send_free(s);
    ASSERT(word(target, 0) == 42);

    OK(hamlyn_terminus_fetch_add(t, tt, 0, 8, rt, 16, &s));
    ASSERT(answer(q, HAMLYN_NOTIFY_ATOMIC_DONE, s).word == 42);
    hamlyn_send_free(s);
    ASSERT(word(target, 0) == 50 && word(reply, 16) == 42);

    /* A ticket that grants writes only cannot read. */
    EXPECT(hamlyn_terminus_read(t, rt, 0, 8, rt, 0, &s), HAMLYN_RESULT_NOT_GRANTED);

    hamlyn_terminus_free(t);
    hamlyn_queue_free(q);
    hamlyn_ticket_free(rt);
    hamlyn_slot_free(rslot);
    hamlyn_meta_area_free(rmeta);
    hamlyn_area_free(reply);
    hamlyn_ticket_free(tt);
    hamlyn_slot_free(tslot);
    hamlyn_meta_area_free(tmeta);
    hamlyn_area_free(target);
    hamlyn_node_free(node);
    printf("rma: read, compare-and-swap, fetch-and-add\n");
    return 0;
}
