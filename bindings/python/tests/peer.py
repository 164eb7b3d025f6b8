"""The other processes of the tests: each role is a program run with the test's
interpreter, connecting to the engine at $HAMLYN_SOCKET; seeds travel as text on stdout
and in environment variables. Every wait is bounded: a lost peer fails, never hangs.

    peer.py pong              prints its inbox's seed, then answers each 8-byte ping n
                              with n + 1 until a goodbye
    peer.py ping              $HAMLYN_PEER_SEED is the pong's seed; sends its own seed
                              (from an area, no copy), then $HAMLYN_ROUNDS pings
    peer.py group-receive N   one slot of N * 64 bytes and one metadata entry; prints the
                              N seeds of its ticket split N ways; waits for the single
                              notification that says every part arrived
    peer.py group-send        $HAMLYN_SEED is one part, $HAMLYN_PART its number: fills
                              its range with bytes of value PART + 1
    peer.py target            a slot granting reads and atomics whose first word is 40;
                              prints its seed, waits for a line on stdin, prints the word
    peer.py send-once         sends 8 bytes to $HAMLYN_SEED; prints the status's reason
    peer.py engine            an embedded engine: prints its socket, then waits for stdin
                              to close (or to be killed)
    peer.py wait-forever      prints a line, then waits on an empty queue with no timeout
    peer.py direct-send       maps the direct slot $HAMLYN_SEED names and deposits 8 bytes
                              with tag 11 in this process
    peer.py endpoint-flood    sends $HAMLYN_COUNT messages to the endpoint $HAMLYN_SEED
                              names, tagged $HAMLYN_SENDER << 32 | i; prints how many were
                              sent and how many refused for want of a buffer
    peer.py rpc-serve NAME    serves RPC service NAME (echo, upper, sum, fails, hold,
                              stop); prints "serving", then, once stopped, its counters
                              as JSON. 'hold' answers only after a line on stdin.
    peer.py rpc-ref-serve NAME  serves RPC service NAME with procedures by reference:
                              'reverse' (args: offset, length as two u64) reads that
                              much of the caller's segment and writes it reversed just
                              after, returning the segment's length and the CRC-32 of
                              what it read; 'stop'. Prints "serving", then, once
                              stopped, its counters as JSON.
    peer.py rats-tag-write    writes "tag N" with tag N (N = 1..$HAMLYN_COUNT) at offset
                              64 * N to the tagged server $HAMLYN_SEED names
    peer.py rats-datagrams N  sends N datagrams "datagram I" (oob: I as one byte) to the
                              receiver $HAMLYN_SEED names, waiting for credit as needed
    peer.py rats-stream N     writes N records of 1000 bytes (record i: byte i % 251) into
                              the stream $HAMLYN_SEED names, then "tail" as bytes; closes
    peer.py rats-simple-pong N  a simple datagram: prints its seed, answers N messages
                              through their reply seeds with the bytes reversed and the
                              oob doubled
    peer.py rats-respond N    a request/response server: prints its seed, answers N
                              requests with their bytes upper-cased, prints "answered N"
    peer.py rats-remote-read-serve  a remote-read server of RATS_READ_SLOT bytes of
                              rats_pattern(0, ...): prints its seed, waits for a line on
                              stdin
    peer.py rats-remote-write  writes rats_remote_writes() (plain, scattered, gathered)
                              into the remote-write server $HAMLYN_SEED names; waits for
                              every send; prints "written"
"""

import os
import struct
import sys

import hamlyn

WAIT = 30.0
TAG_HELLO, TAG_PING, TAG_BYE = 1, 2, 3
HELLO = 1024  # where the hello lands: the pings' words are at 0


MIB = 1 << 20
RATS_READ_SLOT = 2 * MIB + 64
RATS_WRITE_SLOT = 3 * MIB
RATS_GATHER_AT = 2 * MIB + 4096 + MIB // 2 + 8192


def rats_pattern(k: int, n: int) -> bytes:
    """`n` bytes of pattern `k`: a period of 251 (prime), so a shifted copy differs."""
    period = bytes((i * 7 + k * 13 + 1) % 251 for i in range(251))
    return (period * (n // 251 + 1))[:n]


def rats_remote_writes():
    """What `rats-remote-write` writes: plain writes as (offset, data), scattered pieces
    as (offset, data), and gathered pieces with the offset they land at; sizes 0 B to
    1 MiB + 5, bytes-like objects of several kinds."""
    plain = [(0, b""), (RATS_WRITE_SLOT, b""), (0, b"\xa5"), (16, rats_pattern(1, 4099)),
             (8192, bytearray(rats_pattern(2, MIB + 5)))]
    scatter = [(2 * MIB, b"scatter-a"), (2 * MIB + 100, bytearray(rats_pattern(3, 1000))),
               (2 * MIB + 7, b""), (2 * MIB + 5000, memoryview(rats_pattern(4, MIB // 2)))]
    gather = [b"gather-", b"", bytearray(rats_pattern(5, 3000)), memoryview(b"-end")]
    return plain, scatter, (RATS_GATHER_AT, gather)


def rats_remote_slot() -> bytes:
    """The remote-write server's slot once every write of `rats_remote_writes` landed."""
    slot = bytearray(RATS_WRITE_SLOT)
    plain, scatter, (at, gather) = rats_remote_writes()
    for off, data in plain + scatter + [(at, b"".join(bytes(g) for g in gather))]:
        slot[off: off + len(data)] = data
    return bytes(slot)


def fail(why: str) -> None:
    print(f"peer {sys.argv[1:]}: {why}", file=sys.stderr)
    sys.exit(1)


def next_message(queue: hamlyn.Queue) -> hamlyn.Notification:
    n = queue.wait(timeout=WAIT)
    if n is None:
        fail(f"no notification within {WAIT} s")
    if n.kind != "message":
        fail(f"unexpected {n!r}")
    return n


class End:
    """A node with an inbox slot reporting to queue 0, and a terminus."""

    def __init__(self) -> None:
        self.node = hamlyn.Node.connect_default()
        self.area = self.node.area(4096)
        self.meta = self.node.meta_area(4)
        self.slot = self.node.slot(self.area, meta=self.meta, queue=0)
        self.ticket = self.slot.ticket()
        self.queue = self.node.queue(0)
        self.terminus = self.node.terminus()

    def send_word(self, to: hamlyn.Ticket, tag: int, value: int) -> None:
        self.terminus.send(to, struct.pack("<Q", value), tag=tag).result(timeout=WAIT)

    def word(self) -> int:
        return struct.unpack_from("<Q", self.area)[0]


def main() -> None:
    role = sys.argv[1]
    if role == "pong":
        e = End()
        print(e.ticket.seed, flush=True)
        n = next_message(e.queue)
        if n.word != TAG_HELLO:
            fail(f"expected the hello, got {n!r}")
        text = e.area.read(HELLO, n.length).decode()
        peer = hamlyn.Ticket.from_seed(text)
        answered = 0
        while True:
            n = next_message(e.queue)
            if n.word == TAG_BYE:
                break
            if n.word != TAG_PING:
                fail(f"unexpected tag {n.word}")
            e.send_word(peer, TAG_PING, e.word() + 1)
            answered += 1
        print(f"pong: answered {answered}", flush=True)
        e.node.close()
    elif role == "ping":
        e = End()
        peer = hamlyn.Ticket.from_seed(os.environ["HAMLYN_PEER_SEED"])
        rounds = int(os.environ.get("HAMLYN_ROUNDS", "100"))
        with e.node.area(4096) as out:
            seed = e.ticket.seed.encode()
            memoryview(out)[: len(seed)] = seed  # written in place: the area is the buffer
            e.terminus.send_area(peer, out, 0, len(seed), tag=TAG_HELLO, offset=HELLO).result(
                timeout=WAIT
            )
        for i in range(rounds):
            e.send_word(peer, TAG_PING, i * 2)
            n = next_message(e.queue)
            if n.word != TAG_PING or e.word() != i * 2 + 1:
                fail(f"round {i}: {n!r}, word {e.word()}")
        e.send_word(peer, TAG_BYE, 0)
        print(f"ping: {rounds} round trips", flush=True)
        e.node.close()
    elif role == "group-receive":
        parts = int(sys.argv[2])
        with hamlyn.Node.connect_default() as node:
            area = node.area(parts * 64)
            meta = node.meta_area(1)
            slot = node.slot(area, meta=meta, queue=0)
            queue = node.queue(0)
            split = slot.ticket().split(parts)
            for i, t in enumerate(split):
                if (t.offset, t.length) != (i * 64, 64):
                    fail(f"part {i} is {t!r}")
                print(t.seed)
            sys.stdout.flush()
            n = next_message(queue)
            if n.meta_index != 0:
                fail(f"the group's notification names entry {n.meta_index}")
            got = bytes(memoryview(area))
            want = b"".join(bytes([i + 1]) * 64 for i in range(parts))
            if got != want:
                fail(f"the group's bytes are {got!r}")
            if queue.poll() is not None:
                fail("more than one notification for one group")
            print(f"group: {parts} parts, one message", flush=True)
    elif role == "group-send":
        part = int(os.environ["HAMLYN_PART"])
        t = hamlyn.Ticket.from_seed(os.environ["HAMLYN_SEED"])
        with hamlyn.Node.connect_default() as node, node.terminus() as term:
            term.send(t, bytes([part + 1]) * t.length).result(timeout=WAIT)
    elif role == "target":
        with hamlyn.Node.connect_default() as node:
            area = node.area(4096)
            struct.pack_into("<Q", area, 0, 40)
            area.write(64, b"read me!")
            meta = node.meta_area(1)
            slot = node.slot(area, meta=meta, write=False, read=True, atomic=True)
            print(slot.ticket().seed, flush=True)
            sys.stdin.readline()  # until the test is done with us
            print(struct.unpack_from("<Q", area)[0], flush=True)
    elif role == "send-once":
        t = hamlyn.Ticket.from_seed(os.environ["HAMLYN_SEED"])
        with hamlyn.Node.connect_default() as node, node.terminus() as term:
            status = term.send(t, b"8 bytes!").wait(timeout=WAIT)
            print(status.reason if status.failed else status.state, flush=True)
    elif role == "engine":
        with hamlyn.Node.embedded() as node:
            print(node.socket_path, flush=True)
            sys.stdin.read()
    elif role == "wait-forever":
        with hamlyn.Node.connect_default() as node, node.queue(0) as q:
            print("waiting", flush=True)
            q.wait()
    elif role == "direct-send":
        t = hamlyn.Ticket.from_seed(os.environ["HAMLYN_SEED"])
        with hamlyn.Node.connect_default() as node, node.open_direct(t) as target:
            target.send(b"directly", tag=11)
    elif role == "endpoint-flood":
        t = hamlyn.Ticket.from_seed(os.environ["HAMLYN_SEED"])
        sender, count = int(os.environ["HAMLYN_SENDER"]), int(os.environ["HAMLYN_COUNT"])
        with hamlyn.Node.connect_default() as node, node.terminus() as term:
            sends = []
            for i in range(count):
                data = struct.pack("<IQ", sender, i)
                try:
                    sends.append(term.send(t, data, tag=sender << 32 | i))
                except hamlyn.FullError:
                    # Back-pressure: wait for the queue to drain, then the same again.
                    if not term.wait_idle(timeout=WAIT):
                        fail(f"the terminus did not drain within {WAIT} s")
                    sends.append(term.send(t, data, tag=sender << 32 | i))
            sent = refused = 0
            for s in sends:
                st = s.wait(timeout=WAIT)
                if st.sent:
                    sent += 1
                elif st.reason == "no_buffer":
                    refused += 1
                else:
                    fail(f"a send ended {st!r}")
            print(f"flood: sent {sent} refused {refused}", flush=True)
    elif role == "rpc-serve":
        import json

        stopped = []

        def hold(args):
            sys.stdin.readline()  # until the test lets it go (or closes stdin)
            return args

        def fails(args):
            raise ValueError(f"refusing {args!r}")

        procedures = {
            "echo": lambda args: args,
            "upper": lambda args: args.upper(),
            "sum": lambda args: struct.pack(
                "<Q", sum(struct.unpack(f"<{len(args) // 8}Q", args))
            ),
            "fails": fails,
            "hold": hold,
            "stop": lambda args: stopped.append(True),
        }
        with hamlyn.Node.connect_default() as node, hamlyn.RpcServer(
            node, sys.argv[2], procedures
        ) as server:
            print("serving", flush=True)
            server.serve(until=lambda: bool(stopped), timeout=120)
            if not stopped:
                fail("not stopped within 120 s")
            # The stop call's reply goes out with the next turn: serve a little more.
            server.serve(timeout=0.2)
            print(json.dumps(server.counters()), flush=True)
    elif role == "rpc-ref-serve":
        import json
        import zlib

        stopped = []

        def reverse(args, ctx):
            off, n = struct.unpack("<QQ", args)
            data = ctx.read(off, n)
            ctx.write(off + n, data[::-1])
            return struct.pack("<QI", ctx.segment_len, zlib.crc32(data))

        procedures = {"reverse": reverse, "stop": lambda args: stopped.append(True)}
        with hamlyn.Node.connect_default() as node, hamlyn.RpcServer(
            node, sys.argv[2], procedures
        ) as server:
            print("serving", flush=True)
            server.serve(until=lambda: bool(stopped), timeout=120)
            if not stopped:
                fail("not stopped within 120 s")
            server.serve(timeout=0.2)
            print(json.dumps(server.counters()), flush=True)
    elif role == "rats-tag-write":
        with hamlyn.Node.connect_default() as node:
            client = hamlyn.Rats(node).tagged_client(os.environ["HAMLYN_SEED"])
            for n in range(1, int(os.environ["HAMLYN_COUNT"]) + 1):
                client.write(64 * n, b"tag %d" % n, n).result(timeout=WAIT)
    elif role == "rats-datagrams":
        with hamlyn.Node.connect_default() as node:
            sender = hamlyn.Rats(node).datagram_sender(os.environ["HAMLYN_SEED"])
            for i in range(int(sys.argv[2])):
                sender.send_wait(b"datagram %d" % i, bytes([i]), timeout=WAIT).result(
                    timeout=WAIT
                )
    elif role == "rats-stream":
        with hamlyn.Node.connect_default() as node:
            sender = hamlyn.Rats(node).stream_sender(os.environ["HAMLYN_SEED"])
            for i in range(int(sys.argv[2])):
                sender.write_record(bytes([i % 251]) * 1000)
            sender.write_bytes(b"tail")
            sender.close().result(timeout=WAIT)
    elif role == "rats-simple-pong":
        with hamlyn.Node.connect_default() as node:
            me = hamlyn.Rats(node).simple_datagram(4096)
            print(me.seed, flush=True)
            for _ in range(int(sys.argv[2])):
                got = me.recv(timeout=WAIT)
                if got is None:
                    fail(f"no message within {WAIT} s")
                data, oob = got
                me.reply(data[::-1], oob * 2).result(timeout=WAIT)
    elif role == "rats-respond":
        count = int(sys.argv[2])
        with hamlyn.Node.connect_default() as node:
            server = hamlyn.Rats(node).request_server(4096)
            print(server.seed, flush=True)
            for _ in range(count):
                r = server.recv(timeout=WAIT)
                if r is None:
                    fail(f"no request within {WAIT} s")
                server.reply(r, r.data.upper()).result(timeout=WAIT)
            print(f"answered {count}", flush=True)
    elif role == "rats-remote-read-serve":
        with hamlyn.Node.connect_default() as node:
            server = hamlyn.Rats(node).remote_read_server(RATS_READ_SLOT)
            server.write(0, rats_pattern(0, RATS_READ_SLOT))
            print(server.seed, flush=True)
            sys.stdin.readline()  # until the test is done reading
    elif role == "rats-remote-write":
        with hamlyn.Node.connect_default() as node:
            client = hamlyn.Rats(node).remote_write_client(os.environ["HAMLYN_SEED"])
            plain, scatter, (at, gather) = rats_remote_writes()
            sends = [client.write(off, data) for off, data in plain]
            sends += client.write_scatter(scatter)
            sends.append(client.write_gather(at, gather))
            for s in sends:
                status = s.wait(timeout=WAIT)
                if not status.sent:
                    fail(f"a write ended {status!r}")
            print("written", flush=True)
    else:
        fail(f"unknown role {role}")


if __name__ == "__main__":
    main()
