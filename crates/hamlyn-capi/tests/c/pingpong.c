/* Two-process ping-pong through a daemon (HAMLYN_SOCKET).
 *
 *   pingpong pong           prints its inbox's seed on stdout, then answers every 8-byte
 *                           ping n with n + 1 until the last one
 *   pingpong ping           HAMLYN_PEER_SEED is the pong's seed; sends its own seed first
 *                           (from an area), then HAMLYN_ROUNDS pings (default 100), and
 *                           prints the mean round trip on stderr (bench/bindings.sh
 *                           compares it with the same loop in Rust, examples/pingpong.rs)
 */
#include <stdint.h>
#include <time.h>

#include "check.h"

/* The hello (the ping's seed) lands at HELLO, the pings' words at 0: the pinger sends its
 * first ping as soon as the hello is sent, perhaps before the ponger has read the hello,
 * so the two must not share bytes (memory is the sender's to manage). */
enum { TAG_HELLO = 1, TAG_PING = 2, TAG_BYE = 3, AREA = 4096, HELLO = 1024 };

struct end {
    hamlyn_node *node;
    hamlyn_area *area;
    hamlyn_meta_area *meta;
    hamlyn_slot *slot;
    hamlyn_ticket *ticket;
    hamlyn_queue *queue;
    hamlyn_terminus *terminus;
};

static struct end open_end(void) {
    struct end e;
    OK(hamlyn_node_connect_default(&e.node));
    OK(hamlyn_area_new(e.node, AREA, &e.area));
    OK(hamlyn_meta_area_new(e.node, 4, &e.meta));
    hamlyn_slot_config cfg = {0};
    cfg.mode = HAMLYN_SLOT_NORMAL;
    cfg.flags = HAMLYN_SLOT_QUEUE;
    cfg.queue = 0;
    OK(hamlyn_slot_new(e.node, e.area, e.meta, &cfg, &e.slot));
    OK(hamlyn_slot_ticket_all(e.slot, &e.ticket));
    OK(hamlyn_queue_new(e.node, 0, &e.queue));
    OK(hamlyn_terminus_new(e.node, 0, &e.terminus));
    return e;
}

static void close_end(struct end *e) {
    hamlyn_terminus_free(e->terminus);
    hamlyn_queue_free(e->queue);
    hamlyn_ticket_free(e->ticket);
    hamlyn_slot_free(e->slot);
    hamlyn_meta_area_free(e->meta);
    hamlyn_area_free(e->area);
    hamlyn_node_free(e->node);
}

/* Sends the 8-byte `value` with `tag` and waits until it is sent. */
static void send_word(struct end *e, const hamlyn_ticket *to, uint64_t tag, uint64_t value) {
    hamlyn_send_options o = {0};
    o.tag = tag;
    hamlyn_send *s;
    OK(hamlyn_terminus_send_inline(e->terminus, to, &o, (const uint8_t *)&value, 8, &s));
    hamlyn_status st;
    OK(hamlyn_send_wait(s, WAIT_MS, &st));
    ASSERT(st.state == HAMLYN_STATUS_SENT);
    hamlyn_send_free(s);
}

static uint64_t word_at_0(struct end *e) {
    uint64_t v;
    OK(hamlyn_area_read(e->area, 0, (uint8_t *)&v, 8));
    return v;
}

static int pong(void) {
    struct end e = open_end();
    char *seed = seed_of(e.ticket);
    printf("%s\n", seed);
    fflush(stdout);
    free(seed);

    /* The ping's seed, as a message. */
    hamlyn_notification n = next(e.queue, HAMLYN_NOTIFY_MESSAGE);
    ASSERT(n.word == TAG_HELLO);
    char text[HAMLYN_SEED_TEXT_MAX];
    ASSERT(n.len <= sizeof text);
    OK(hamlyn_area_read(e.area, HELLO, (uint8_t *)text, n.len));
    ASSERT(text[n.len - 1] == '\0');
    hamlyn_ticket *peer;
    hamlyn_result r = hamlyn_ticket_from_seed(text, &peer);
    if (r != HAMLYN_RESULT_OK) {
        FAIL("%s for the ping's seed (%u bytes): '%s'", hamlyn_result_name(r), n.len, text);
    }

    uint64_t answered = 0;
    for (;;) {
        n = next(e.queue, HAMLYN_NOTIFY_MESSAGE);
        if (n.word == TAG_BYE) {
            break;
        }
        ASSERT(n.word == TAG_PING);
        uint64_t v = word_at_0(&e);
        send_word(&e, peer, TAG_PING, v + 1);
        answered++;
    }
    hamlyn_ticket_free(peer);
    close_end(&e);
    fprintf(stderr, "pong: answered %llu pings\n", (unsigned long long)answered);
    return 0;
}

static int ping(void) {
    struct end e = open_end();
    const char *rounds_text = getenv("HAMLYN_ROUNDS");
    uint64_t rounds = rounds_text ? strtoull(rounds_text, NULL, 10) : 100;
    hamlyn_ticket *peer;
    OK(hamlyn_ticket_from_seed(env("HAMLYN_PEER_SEED"), &peer));

    /* Our seed, sent from an area of ours without a copy. */
    hamlyn_area *out;
    OK(hamlyn_area_new(e.node, AREA, &out));
    uint8_t *mem;
    uint64_t len;
    OK(hamlyn_area_memory(out, &mem, &len));
    ASSERT(len == AREA);
    size_t need;
    OK(hamlyn_ticket_to_seed(e.ticket, (char *)mem, len, &need));
    hamlyn_send_options o = {0};
    o.tag = TAG_HELLO;
    o.offset = HELLO;
    hamlyn_send *s;
    OK(hamlyn_terminus_send_area(e.terminus, peer, &o, out, 0, need, &s));
    hamlyn_status st;
    OK(hamlyn_send_wait(s, WAIT_MS, &st));
    ASSERT(st.state == HAMLYN_STATUS_SENT);
    hamlyn_send_free(s);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint64_t i = 0; i < rounds; i++) {
        send_word(&e, peer, TAG_PING, i * 2);
        hamlyn_notification n = next(e.queue, HAMLYN_NOTIFY_MESSAGE);
        ASSERT(n.word == TAG_PING);
        ASSERT(word_at_0(&e) == i * 2 + 1);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    /* What bench/bindings.sh reads: the mean round trip (no assertion anywhere). */
    fprintf(stderr, "ping: %.1f ns per round trip\n", rounds ? ns / (double)rounds : 0.0);
    send_word(&e, peer, TAG_BYE, 0);
    hamlyn_area_free(out);
    hamlyn_ticket_free(peer);
    close_end(&e);
    printf("ping: %llu round trips\n", (unsigned long long)rounds);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "pong") == 0) {
        return pong();
    }
    if (argc == 2 && strcmp(argv[1], "ping") == 0) {
        return ping();
    }
    fprintf(stderr, "usage: pingpong ping|pong\n");
    return 2;
}
