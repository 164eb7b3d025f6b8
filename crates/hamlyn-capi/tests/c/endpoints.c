/* Receive endpoints through a daemon (HAMLYN_SOCKET): messages land in posted buffers in
 * order; with no buffer posted a message is discarded and counted (and, on a reporting
 * endpoint, fails its send with HAMLYN_REJECT_NO_BUFFER); a buffer not held cannot be
 * posted; a terminus's rate limit can be set and lifted. */
#include "check.h"

static hamlyn_status send_wait(const hamlyn_terminus *t, const hamlyn_ticket *to, uint64_t tag,
                               const char *text) {
    hamlyn_send_options o = {0};
    o.tag = tag;
    hamlyn_send *s;
    OK(hamlyn_terminus_send_inline(t, to, &o, (const uint8_t *)text, strlen(text), &s));
    hamlyn_status st;
    OK(hamlyn_send_wait(s, WAIT_MS, &st));
    hamlyn_send_free(s);
    return st;
}

int main(void) {
    hamlyn_node *node;
    OK(hamlyn_node_connect_default(&node));
    hamlyn_terminus *t;
    OK(hamlyn_terminus_new(node, 0, &t));

    hamlyn_endpoint_config cfg = {0};
    cfg.buf_size = 100; /* not a multiple of 64 */
    cfg.buffers = 2;
    hamlyn_endpoint *ep;
    EXPECT(hamlyn_endpoint_new(node, &cfg, &ep), HAMLYN_RESULT_INVALID_ARGUMENT);
    EXPECT(hamlyn_endpoint_new(node, NULL, &ep), HAMLYN_RESULT_NULL_ARGUMENT);
    cfg.buf_size = 64;
    OK(hamlyn_endpoint_new(node, &cfg, &ep));
    hamlyn_ticket *to;
    OK(hamlyn_endpoint_ticket(ep, &to));

    uint32_t b;
    OK(hamlyn_endpoint_alloc(ep, &b));
    OK(hamlyn_endpoint_post(ep, b));
    EXPECT(hamlyn_endpoint_post(ep, b), HAMLYN_RESULT_INVALID_ARGUMENT); /* posted already */
    EXPECT(hamlyn_endpoint_post(ep, 7), HAMLYN_RESULT_INVALID_ARGUMENT);

    ASSERT(send_wait(t, to, 1, "first").state == HAMLYN_STATUS_SENT);
    /* No buffer posted: discarded and counted, the sender told nothing. */
    ASSERT(send_wait(t, to, 2, "second").state == HAMLYN_STATUS_SENT);

    hamlyn_endpoint_message m;
    OK(hamlyn_endpoint_receive(ep, &m));
    ASSERT(m.buffer == b && m.word == 1 && m.len == 5);
    char got[6] = {0};
    OK(hamlyn_endpoint_read(ep, m.buffer, (uint8_t *)got, 5));
    ASSERT(strcmp(got, "first") == 0);
    EXPECT(hamlyn_endpoint_receive(ep, &m), HAMLYN_RESULT_EMPTY);
    uint64_t discards;
    OK(hamlyn_endpoint_take_discards(ep, &discards));
    ASSERT(discards == 1);
    OK(hamlyn_endpoint_take_discards(ep, &discards));
    ASSERT(discards == 0);

    /* Post it again and everything else: the next message lands. */
    OK(hamlyn_endpoint_post(ep, m.buffer));
    uint32_t posted;
    OK(hamlyn_endpoint_post_all(ep, &posted));
    ASSERT(posted == 1);
    ASSERT(send_wait(t, to, 3, "third").state == HAMLYN_STATUS_SENT);
    OK(hamlyn_endpoint_receive(ep, &m));
    ASSERT(m.word == 3);

    /* A reporting endpoint fails the sender. */
    cfg.flags = HAMLYN_ENDPOINT_REPORT_DISCARDS;
    hamlyn_endpoint *rep;
    OK(hamlyn_endpoint_new(node, &cfg, &rep));
    hamlyn_ticket *to_rep;
    OK(hamlyn_endpoint_ticket(rep, &to_rep));
    hamlyn_status st = send_wait(t, to_rep, 4, "nowhere");
    ASSERT(st.state == HAMLYN_STATUS_FAILED && st.reason == HAMLYN_REJECT_NO_BUFFER);

    /* A rate limit set and lifted. */
    OK(hamlyn_terminus_set_rate(node, t, 1000000, 100000));
    ASSERT(send_wait(t, to, 5, "limited").state == HAMLYN_STATUS_SENT);
    OK(hamlyn_terminus_set_rate(node, t, 0, 0));

    hamlyn_ticket_free(to_rep);
    hamlyn_endpoint_free(rep);
    hamlyn_ticket_free(to);
    hamlyn_endpoint_free(ep);
    hamlyn_terminus_free(t);
    hamlyn_node_free(node);
    printf("endpoints: ok\n");
    return 0;
}
