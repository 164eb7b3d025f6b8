"""The objects on one node: the area as a buffer (memoryview, NumPy), metadata, slots of
every mode, seeds, the registry, statistics, the event descriptor."""

import re
import select
import signal
import subprocess
import struct
import threading
import time
from pathlib import Path

import pytest

import hamlyn


def test_an_area_is_a_writable_zero_copy_buffer(node):
    area = node.area(4096)
    view = memoryview(area)
    assert (len(view), view.format, view.itemsize, view.readonly) == (4096, "B", 1, False)
    view[0:5] = b"hello"
    assert area.read(0, 5) == b"hello", "the view is the area's memory"
    area.write(8, b"world")
    assert bytes(view[8:13]) == b"world", "and writes through the area show in the view"
    struct.pack_into("<Q", area, 16, 2**64 - 1)
    assert struct.unpack_from("<Q", area.view(), 16) == (2**64 - 1,)
    view.release()


def test_numpy_frombuffer_sees_the_area_without_a_copy(node):
    np = pytest.importorskip("numpy", reason="numpy is not installed (pip install numpy)")
    area = node.area(4096)
    words = np.frombuffer(area, dtype=np.uint64)
    assert words.shape == (512,) and not words.flags.owndata
    words[3] = 0xDEADBEEF
    assert struct.unpack_from("<Q", area.read(24, 8)) == (0xDEADBEEF,)
    # A message the engine deposits shows in the array.
    slot = node.slot(area, meta=node.meta_area(1), queue=0)
    with node.terminus() as t, node.queue(0) as q:
        t.send(slot.ticket(), struct.pack("<Q", 77), offset=40).result(timeout=30.0)
        assert q.wait(timeout=30.0) is not None
    assert words[5] == 77


def test_a_view_keeps_the_memory_mapped_after_the_area_and_node_close(engine):
    node = hamlyn.Node.connect(engine.socket_path)
    area = node.area(4096)
    view = memoryview(area)
    view[0] = 7
    area.close()
    node.close()
    assert view[0] == 7
    view[1] = 8
    assert bytes(view[:2]) == b"\x07\x08"
    view.release()
    with pytest.raises(hamlyn.ClosedError):
        memoryview(area)


def test_metadata_entries_carry_what_the_sender_deposited(node):
    area = node.area(256)
    meta = node.meta_area(2)
    assert (meta.count, len(meta)) == (2, 2)
    slot = node.slot(area, meta=meta, queue=0)
    with node.terminus() as t, node.queue(0) as q:
        t.send(slot.ticket(), b"body", meta=b"user metadata", entry=1, tag=5).result(30.0)
        n = q.wait(timeout=30.0)
    assert (n.kind, n.meta_index, n.word, n.length) == ("message", 1, 5, 4)
    assert meta.metadata(1) == b"user metadata"


def test_a_paranoid_one_shot_entry_takes_one_message_until_re_armed(node):
    area = node.area(256)
    meta = node.meta_area(1)
    slot = node.slot(area, meta=meta, queue=0, mode="paranoid_one_shot")
    assert slot.mode == "paranoid_one_shot"
    ticket = slot.ticket(0, 64, 0, 1)
    assert meta.is_armed(0)
    with node.terminus() as t, node.queue(0) as q:
        t.send(ticket, b"first").result(timeout=30.0)
        assert q.wait(timeout=30.0).kind == "message"
        assert not meta.is_armed(0)
        assert t.send(ticket, b"second").wait(timeout=30.0).reason == "disarmed"
        meta.arm(0)
        t.send(ticket, b"third").result(timeout=30.0)
        assert q.wait(timeout=30.0).kind == "message"


def test_fast_slots_report_the_word_in_the_notification(node):
    area = node.area(64)
    slot = node.slot(area, queue=0, mode="fast")
    ticket = slot.ticket()
    assert "f" in ticket.grants
    with node.terminus() as t, node.queue(0) as q:
        t.send(ticket, b"12345678", tag=0xABCD, fast=True).result(timeout=30.0)
        n = q.wait(timeout=30.0)
    assert (n.kind, n.word, n.meta_index) == ("fast", 0xABCD, None)


def test_seeds_carry_several_tickets_and_split_tickets_cover_the_whole(node):
    slot = node.slot(node.area(300), meta=node.meta_area(1))
    whole = slot.ticket()
    parts = whole.split(3)
    assert [p.offset for p in parts] == [0, 100, 200]
    assert sum(p.length for p in parts) == 300
    text = hamlyn.seed_from_tickets(parts)
    assert isinstance(text, str) and text.startswith("hmseed1-")
    assert hamlyn.tickets_from_seed(text) == parts
    assert hamlyn.Ticket.from_seed(str(whole)) == whole
    assert len({whole, hamlyn.Ticket.from_seed(whole.seed)}) == 1, "hashable, by value"


def test_publish_lookup_and_unpublish(engine, node):
    slot = node.slot(node.area(64), meta=node.meta_area(1))
    ticket = slot.ticket()
    node.publish("python-test", ticket)
    assert node.lookup("python-test") == ticket
    # The name is this connection's: another one can neither take nor remove it.
    with hamlyn.Node.connect(engine.socket_path) as other:
        assert other.lookup("python-test") == ticket
        with pytest.raises(hamlyn.NotOwnerError):
            other.publish("python-test", ticket)
        with pytest.raises(hamlyn.NotOwnerError):
            other.unpublish("python-test")
    node.unpublish("python-test")
    with pytest.raises(hamlyn.NotFoundError):
        node.lookup("python-test")
    with pytest.raises(hamlyn.NotFoundError):
        node.unpublish("python-test")


def test_statistics_are_a_dict_of_the_engines_counters(node):
    slot = node.slot(node.area(64), meta=node.meta_area(1))
    with node.terminus() as t:
        t.send(slot.ticket(), b"count me").result(timeout=30.0)
    stats = node.stats()
    assert stats["node"] == node.id
    assert stats["engine"]["requests"] >= 1 and stats["engine"]["packets"] >= 1
    assert stats["areas"] >= 2
    assert any(s["slot"] == slot.id for s in stats["slots"])


def test_the_event_fd_becomes_readable_when_an_armed_queue_gets_an_entry(node):
    slot = node.slot(node.area(64), meta=node.meta_area(1), queue=0)
    with node.queue(0) as q, node.terminus() as t:
        assert q.event_fd == node.event_fd == node.fileno()
        assert q.arm() is False
        assert select.select([node], [], [], 0)[0] == []
        t.send(slot.ticket(), b"wake").result(timeout=30.0)
        assert select.select([node], [], [], 30.0)[0] == [node]
        assert node.drain_event_fd() >= 1
        assert q.poll().kind == "message"
        assert q.poll() is None


def test_a_blocking_wait_releases_the_gil(node):
    slot = node.slot(node.area(64), meta=node.meta_area(1), queue=0)
    ticket = slot.ticket()
    got = []
    with node.queue(0) as q, node.terminus() as t:
        waiter = threading.Thread(target=lambda: got.append(q.wait(timeout=30.0)))
        waiter.start()
        # This thread runs Python while the other waits: the send comes from here.
        t.send(ticket, b"from another thread", tag=3).result(timeout=30.0)
        waiter.join(timeout=60.0)
        assert not waiter.is_alive()
    assert got and got[0] is not None and got[0].word == 3


def test_a_daemon_style_connection_sees_the_same_engine(engine, node):
    assert node.id == engine.id
    assert node.client_id != engine.client_id
    assert str(node.socket_path) == str(engine.socket_path)


def test_ctrl_c_interrupts_a_wait_without_a_timeout(peers):
    waiter = peers.start("wait-forever")
    assert peers.line(waiter) == "waiting"
    # Give it time to be inside the wait: a signal before it would raise between
    # bytecodes and prove nothing (too short a pause makes the test vacuous, not wrong).
    time.sleep(0.5)
    waiter.send_signal(signal.SIGINT)
    try:
        waiter.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("SIGINT did not interrupt Queue.wait()")
    assert waiter.returncode != 0, "the wait ended by KeyboardInterrupt, not normally"


def test_the_version_is_the_crates():
    cargo = Path(__file__).resolve().parents[1] / "Cargo.toml"
    # version.workspace = true: the workspace's version.
    root = Path(__file__).resolve().parents[3] / "Cargo.toml"
    assert "version.workspace = true" in cargo.read_text()
    m = re.search(r'^version = "([^"]+)"', root.read_text(), re.M)
    assert m is not None and hamlyn.__version__ == m.group(1)
