"""Rats remote write and remote read from Python, across processes (issue 10): reads of
0 B to 2 MiB, blocking and asynchronous, byte-exact; plain, scattered and gathered
writes from another process that land byte for byte, nothing else changed; and the
errors: a seed of another protocol, a read too long, past the slot or out of turn, a
write outside the slot."""

import time

import pytest

import hamlyn
from peer import (
    MIB,
    RATS_READ_SLOT,
    RATS_WRITE_SLOT,
    rats_pattern,
    rats_remote_slot,
)

WAIT = 30.0


def test_remote_reads_of_another_processs_slot_blocking_and_polled(node, peers):
    p = peers.start("rats-remote-read-serve", stdin=True)
    seed = peers.line(p)
    rats = hamlyn.Rats(node)
    with pytest.raises(hamlyn.BadSeedError, match="protocol"):
        rats.remote_write_client(seed)  # a remote-read seed is not a remote-write one
    reader = rats.remote_read_client(seed, 2 * MIB)
    assert reader.max_len == 2 * MIB
    want = rats_pattern(0, RATS_READ_SLOT)
    for size in (0, 1, 4099, MIB + 5, 2 * MIB):
        got = reader.remote_read(3, size, timeout=WAIT)
        assert got == want[3: 3 + size], size

    # Started, polled (bounded), taken.
    reader.async_remote_read(12345, 70000)
    with pytest.raises(hamlyn.StateError):
        reader.async_remote_read(0, 1)  # one read at a time
    with pytest.raises(hamlyn.StateError):
        reader.remote_read(0, 1)
    deadline = time.monotonic() + WAIT
    while not reader.ready():
        assert time.monotonic() < deadline, "no answer"
    assert reader.take() == want[12345: 12345 + 70000]
    with pytest.raises(hamlyn.StateError):
        reader.take()  # taken: the read is over
    with pytest.raises(hamlyn.StateError):
        reader.ready()

    # Errors, and the reader keeps working after each.
    with pytest.raises(hamlyn.TooLongError):
        reader.remote_read(0, 2 * MIB + 1)
    with pytest.raises(hamlyn.OutsideTicketError):
        reader.remote_read(RATS_READ_SLOT - 10, 100, timeout=WAIT)
    assert reader.remote_read(RATS_READ_SLOT - 10, 10, timeout=WAIT) == want[-10:]
    p.stdin.write("done\n")
    p.stdin.flush()
    peers.finish(p)


def test_remote_writes_from_another_process_land_byte_for_byte(node, peers):
    rats = hamlyn.Rats(node)
    server = rats.remote_write_server(RATS_WRITE_SLOT)
    assert server.length == RATS_WRITE_SLOT
    assert server.read(0, RATS_WRITE_SLOT) == bytes(RATS_WRITE_SLOT)
    p = peers.start("rats-remote-write", env={"HAMLYN_SEED": server.seed})
    assert peers.finish(p).strip() == "written"
    # Nothing tells the server: it looks, bounded, until its slot is what was written.
    want = rats_remote_slot()
    deadline = time.monotonic() + WAIT
    while (got := server.read(0, RATS_WRITE_SLOT)) != want:
        assert time.monotonic() < deadline, next(
            i for i in range(len(want)) if got[i] != want[i]
        )
        time.sleep(0.01)
    with pytest.raises(hamlyn.InvalidArgumentError):
        server.read(RATS_WRITE_SLOT - 1, 2)


def test_remote_write_errors_and_a_reply_read_in_one_process(node):
    rats = hamlyn.Rats(node)
    server = rats.remote_write_server(4096)
    client = rats.remote_write_client(server.seed)
    assert client.length == 4096
    with pytest.raises(hamlyn.BadSeedError, match="protocol"):
        rats.remote_read_client(server.seed, 64)
    with pytest.raises(hamlyn.BadSeedError):
        rats.remote_write_client("hmseed1-not-a-seed")
    with pytest.raises(hamlyn.BadTicketError):
        client.write(4090, b"12345678")  # outside the slot: nothing sent
    with pytest.raises(hamlyn.TooLongError):
        client.write_gather(0, [b"x" * 4000, b"y" * 100])
    with pytest.raises(hamlyn.InvalidArgumentError):
        client.write(0, 12345)  # not a bytes-like object
    sends = client.write_scatter([(0, b"first"), (4091, bytearray(b"last!"))])
    for s in sends:
        s.result(timeout=WAIT)
    client.write_gather(100, [b"a", memoryview(b"bc"), b""]).result(timeout=WAIT)
    deadline = time.monotonic() + WAIT
    while (server.read(0, 5), server.read(4091, 5), server.read(100, 3)) != (
        b"first", b"last!", b"abc"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert server.read(5, 95) == bytes(95), "nothing else changed"

    # A remote-read server in this process, and its limits.
    rs = rats.remote_read_server(256)
    assert rs.length == 256
    rs.write(0, bytearray(range(256)))
    with pytest.raises(hamlyn.InvalidArgumentError):
        rs.write(250, b"1234567")
    reader = rats.remote_read_client(rs.seed, 256)
    assert reader.remote_read(10, 20, timeout=WAIT) == bytes(range(10, 30))
