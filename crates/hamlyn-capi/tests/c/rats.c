/* The protocol level from C, across two processes. `rats serve` makes a tagged server,
 * a datagram receiver, a simple datagram instance and a stream receiver, prints their
 * seeds (one line each), publishes a request/response server as $HAMLYN_SERVICE, and
 * takes what `rats call` (the seeds in $HAMLYN_SEEDS, one per line) sends through each,
 * in that order. */
#include <time.h>

#include "check.h"

static hamlyn_rats *rats;

static char *seed_line(hamlyn_result (*get)(const void *, char *, size_t, size_t *), const void *obj) {
    char *buf = malloc(HAMLYN_SEED_TEXT_MAX);
    ASSERT(buf != NULL);
    OK(get(obj, buf, HAMLYN_SEED_TEXT_MAX, NULL));
    return buf;
}

/* Adapters, so one helper prints every kind of seed. */
static hamlyn_result tagged_seed(const void *o, char *b, size_t c, size_t *n) {
    return hamlyn_rats_tagged_server_seed(o, b, c, n);
}
static hamlyn_result datagram_seed(const void *o, char *b, size_t c, size_t *n) {
    return hamlyn_rats_datagram_receiver_seed(o, 2, b, c, n);
}
static hamlyn_result simple_seed(const void *o, char *b, size_t c, size_t *n) {
    return hamlyn_rats_simple_seed(o, b, c, n);
}
static hamlyn_result stream_seed(const void *o, char *b, size_t c, size_t *n) {
    return hamlyn_rats_stream_receiver_seed(o, b, c, n);
}

static void datagram_is(const hamlyn_rats_datagram_receiver *r, const hamlyn_rats_datagram *d,
                        const char *want) {
    char got[16] = {0};
    ASSERT(d->len == strlen(want));
    OK(hamlyn_rats_datagram_read(r, d->id, 0, (uint8_t *)got, d->len));
    ASSERT(memcmp(got, want, d->len) == 0);
    EXPECT(hamlyn_rats_datagram_read(r, d->id, 1, (uint8_t *)got, d->len), HAMLYN_RESULT_OUT_OF_RANGE);
}

static int serve(void) {
    hamlyn_rats_tagged_server *tagged;
    hamlyn_rats_datagram_receiver *dgrams;
    hamlyn_rats_simple *simple;
    hamlyn_rats_stream_receiver *stream;
    hamlyn_rats_request_server *requests;
    OK(hamlyn_rats_tagged_server_new(rats, 4096, &tagged));
    OK(hamlyn_rats_datagram_receiver_new(rats, 2, 256, &dgrams));
    OK(hamlyn_rats_simple_new(rats, 256, &simple));
    OK(hamlyn_rats_stream_receiver_new(rats, 65536, 8, &stream));
    OK(hamlyn_rats_request_server_new(rats, 256, &requests));
    OK(hamlyn_rats_request_server_publish(requests, env("HAMLYN_SERVICE")));
    char *seeds[4] = {seed_line(tagged_seed, tagged), seed_line(datagram_seed, dgrams),
                      seed_line(simple_seed, simple), seed_line(stream_seed, stream)};
    for (int i = 0; i < 4; i++) {
        printf("%s\n", seeds[i]);
        free(seeds[i]);
    }
    fflush(stdout);

    /* Tagged write: tag 7, "hello" at 64. */
    hamlyn_rats_tag tag;
    OK(hamlyn_rats_tagged_get_tag(tagged, WAIT_MS, &tag));
    ASSERT(tag.tag == 7 && tag.offset == 64 && tag.len == 5);
    char hello[6] = {0};
    OK(hamlyn_rats_tagged_read(tagged, 64, (uint8_t *)hello, 5));
    ASSERT(strcmp(hello, "hello") == 0);
    EXPECT(hamlyn_rats_tagged_get_tag(tagged, 0, &tag), HAMLYN_RESULT_EMPTY);

    /* Datagrams: two (the sender's credits), then a third once one is released. */
    hamlyn_rats_datagram d1, d2, d3;
    OK(hamlyn_rats_datagram_recv(dgrams, WAIT_MS, &d1));
    datagram_is(dgrams, &d1, "one");
    OK(hamlyn_rats_datagram_recv(dgrams, WAIT_MS, &d2));
    datagram_is(dgrams, &d2, "two");
    OK(hamlyn_rats_datagram_release(dgrams, d1.id));
    EXPECT(hamlyn_rats_datagram_release(dgrams, d1.id), HAMLYN_RESULT_STATE);
    OK(hamlyn_rats_datagram_recv(dgrams, WAIT_MS, &d3));
    datagram_is(dgrams, &d3, "three");
    OK(hamlyn_rats_datagram_release(dgrams, d2.id));
    OK(hamlyn_rats_datagram_release(dgrams, d3.id));

    /* Simple datagram: "ping" with a reply seed; answered "pong" through it. */
    hamlyn_rats_simple_message m;
    OK(hamlyn_rats_simple_recv(simple, WAIT_MS, &m));
    ASSERT(m.len == 4 && m.has_reply == 1);
    char ping[5] = {0};
    OK(hamlyn_rats_simple_read(simple, m.offset, (uint8_t *)ping, 4));
    ASSERT(strcmp(ping, "ping") == 0);
    OK(hamlyn_rats_simple_reply(simple, (const uint8_t *)"pong", 4, 0, NULL));

    /* Stream: three records, then its end; a buffer too small gets the same record
     * again. */
    const char *records[3] = {"first record", "second", "the third record"};
    for (int i = 0; i < 3; i++) {
        char rec[64] = {0};
        size_t len = 0;
        uint32_t end = 0;
        if (i == 0) {
            EXPECT(hamlyn_rats_stream_read(stream, 1, WAIT_MS, (uint8_t *)rec, 2, &len, &end),
                   HAMLYN_RESULT_BUFFER_TOO_SMALL);
            ASSERT(len == strlen(records[0]));
        }
        OK(hamlyn_rats_stream_read(stream, 1, WAIT_MS, (uint8_t *)rec, sizeof rec - 1, &len, &end));
        ASSERT(len == strlen(records[i]) && memcmp(rec, records[i], len) == 0 && end == 1);
    }
    size_t len;
    EXPECT(hamlyn_rats_stream_read(stream, 1, WAIT_MS, NULL, 0, &len, NULL), HAMLYN_RESULT_END_OF_STREAM);

    /* Request/response: three requests, each answered in capitals. */
    for (int i = 0; i < 3; i++) {
        hamlyn_rats_request r;
        OK(hamlyn_rats_request_recv(requests, WAIT_MS, &r));
        EXPECT(hamlyn_rats_request_recv(requests, 0, &r), HAMLYN_RESULT_STATE);
        char q[64] = {0};
        ASSERT(r.len < sizeof q);
        OK(hamlyn_rats_request_read(requests, 0, (uint8_t *)q, r.len));
        EXPECT(hamlyn_rats_request_read(requests, 1, (uint8_t *)q, r.len), HAMLYN_RESULT_OUT_OF_RANGE);
        for (size_t k = 0; k < r.len; k++) {
            if (q[k] >= 'a' && q[k] <= 'z') {
                q[k] = (char)(q[k] - 'a' + 'A');
            }
        }
        OK(hamlyn_rats_request_reply(requests, (const uint8_t *)q, r.len, NULL));
        OK(hamlyn_rats_request_release(requests));
        EXPECT(hamlyn_rats_request_release(requests), HAMLYN_RESULT_STATE);
    }

    hamlyn_rats_request_server_free(requests);
    hamlyn_rats_stream_receiver_free(stream);
    hamlyn_rats_simple_free(simple);
    hamlyn_rats_datagram_receiver_free(dgrams);
    hamlyn_rats_tagged_server_free(tagged);
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
    ASSERT(st.state == HAMLYN_STATUS_SENT);
    hamlyn_send_free(s);
}

static int call(void) {
    char *seed;
    hamlyn_send *s;

    /* Tagged write. */
    hamlyn_rats_tagged_client *tc;
    seed = seed_at(0);
    OK(hamlyn_rats_tagged_client_new(rats, seed, &tc));
    free(seed);
    OK(hamlyn_rats_tagged_write(tc, 64, (const uint8_t *)"hello", 5, 7, &s));
    sent(s);
    hamlyn_rats_tagged_client_free(tc);

    /* Datagrams: two credits; the third waits for one to come back. */
    hamlyn_rats_datagram_sender *ds;
    seed = seed_at(1);
    EXPECT(hamlyn_rats_tagged_client_new(rats, seed, &tc), HAMLYN_RESULT_BAD_SEED);
    OK(hamlyn_rats_datagram_sender_new(rats, seed, &ds));
    free(seed);
    OK(hamlyn_rats_datagram_send(ds, (const uint8_t *)"one", 3, NULL));
    OK(hamlyn_rats_datagram_send(ds, (const uint8_t *)"two", 3, NULL));
    EXPECT(hamlyn_rats_datagram_send(ds, (const uint8_t *)"three", 5, NULL), HAMLYN_RESULT_FULL);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        hamlyn_result r = hamlyn_rats_datagram_send(ds, (const uint8_t *)"three", 5, NULL);
        if (r == HAMLYN_RESULT_OK) {
            break;
        }
        ASSERT(r == HAMLYN_RESULT_FULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        ASSERT(now.tv_sec - start.tv_sec < WAIT_MS / 1000);
    }

    /* Simple datagram with a reply seed: "ping" there, "pong" back here. */
    hamlyn_rats_simple *mine;
    hamlyn_rats_simple_client *sc;
    OK(hamlyn_rats_simple_new(rats, 256, &mine));
    seed = seed_at(2);
    OK(hamlyn_rats_simple_client_new(rats, seed, &sc));
    free(seed);
    OK(hamlyn_rats_simple_client_send(sc, (const uint8_t *)"ping", 4, mine, &s));
    sent(s);
    hamlyn_rats_simple_message m;
    OK(hamlyn_rats_simple_recv(mine, WAIT_MS, &m));
    ASSERT(m.len == 4 && m.has_reply == 0);
    char pong[5] = {0};
    OK(hamlyn_rats_simple_read(mine, m.offset, (uint8_t *)pong, 4));
    ASSERT(strcmp(pong, "pong") == 0);
    /* The answer carried no reply seed: nothing to answer through. */
    EXPECT(hamlyn_rats_simple_reply(mine, (const uint8_t *)"x", 1, 0, NULL), HAMLYN_RESULT_STATE);
    hamlyn_rats_simple_client_free(sc);
    hamlyn_rats_simple_free(mine);

    /* Stream: three records, then closed. */
    hamlyn_rats_stream_sender *ss;
    seed = seed_at(3);
    OK(hamlyn_rats_stream_sender_new(rats, seed, &ss));
    free(seed);
    OK(hamlyn_rats_stream_write(ss, (const uint8_t *)"first record", 12, 1));
    OK(hamlyn_rats_stream_write(ss, (const uint8_t *)"sec", 3, 0));
    OK(hamlyn_rats_stream_write(ss, (const uint8_t *)"ond", 3, 1));
    OK(hamlyn_rats_stream_flush(ss));
    OK(hamlyn_rats_stream_write(ss, (const uint8_t *)"the third record", 16, 1));
    EXPECT(hamlyn_rats_stream_write(ss, (const uint8_t *)"x", 1, 2), HAMLYN_RESULT_INVALID_ARGUMENT);
    OK(hamlyn_rats_stream_close(ss));
    hamlyn_rats_stream_sender_free(ss);

    /* Request/response, found by name. */
    hamlyn_rats_request_client *rc;
    EXPECT(hamlyn_rats_request_client_lookup(rats, "capi-rats-nobody", 256, &rc), HAMLYN_RESULT_NOT_FOUND);
    OK(hamlyn_rats_request_client_lookup(rats, env("HAMLYN_SERVICE"), 256, &rc));
    char reply[64];
    size_t len = 0;
    OK(hamlyn_rats_request_call(rc, (const uint8_t *)"hello there", 11, WAIT_MS, (uint8_t *)reply, sizeof reply, &len));
    ASSERT(len == 11 && memcmp(reply, "HELLO THERE", 11) == 0);
    EXPECT(hamlyn_rats_request_call(rc, (const uint8_t *)"abc", 3, WAIT_MS, (uint8_t *)reply, 2, &len),
           HAMLYN_RESULT_BUFFER_TOO_SMALL);
    ASSERT(len == 3);
    OK(hamlyn_rats_request_call(rc, (const uint8_t *)"last", 4, WAIT_MS, (uint8_t *)reply, sizeof reply, &len));
    ASSERT(len == 4 && memcmp(reply, "LAST", 4) == 0);
    hamlyn_rats_request_client_free(rc);
    /* Freed last: the receiver's credits for it may still be on their way. */
    hamlyn_rats_datagram_sender_free(ds);
    printf("rats: ok\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        FAIL("usage: rats serve|call");
    }
    hamlyn_node *node;
    OK(hamlyn_node_connect(env("HAMLYN_SOCKET"), &node));
    OK(hamlyn_rats_new(node, &rats));
    int rc = strcmp(argv[1], "serve") == 0 ? serve() : call();
    hamlyn_rats_free(rats);
    hamlyn_node_free(node);
    return rc;
}
