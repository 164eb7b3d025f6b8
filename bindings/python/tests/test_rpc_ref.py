"""RPC call by reference from Python (issue 13): the client names a segment of its memory
(an area) in the call; the procedure, in a server process of its own (tests/peer.py
rpc-ref-serve), reads it and writes a result into it through its RpcContext. Checked
byte for byte, 0 B to 1 MiB + 5; a write outside the segment, a ticket without write
permission and a plain call to a by-reference procedure are errors at the client, and
the server keeps serving."""

import json
import struct
import uuid
import zlib

import pytest

import hamlyn

WAIT = 30.0
MIB = 1 << 20


def pattern(k: int, n: int) -> bytes:
    period = bytes((i * 11 + k * 5 + 3) % 251 for i in range(251))
    return (period * (n // 251 + 1))[:n]


def test_a_procedure_reads_the_callers_segment_and_writes_its_result_there(engine, peers):
    service = f"pytest-ref-{uuid.uuid4().hex[:12]}"
    p = peers.start("rpc-ref-serve", service)
    assert peers.line(p) == "serving"
    with hamlyn.Node.connect(engine.socket_path) as node, hamlyn.RpcClient(node, service) as c:
        area = node.area(4 * MIB)
        seg = c.segment(area)
        assert seg.length == 4 * MIB and not seg.closed
        view = memoryview(area)
        off = 100
        for k, n in enumerate((0, 1, 70_000, MIB + 5)):  # 70,000: more than one chunk
            data = pattern(k, n)
            view[:] = bytes(4 * MIB)
            view[off: off + n] = data
            out = c.call_by_ref("reverse", struct.pack("<QQ", off, n), seg)
            assert out == struct.pack("<QI", 4 * MIB, zlib.crc32(data)), n
            # The call returned once every write landed: the result is there, whole.
            got = bytes(view)
            assert got[off: off + n] == data, n
            assert got[off + n: off + 2 * n] == data[::-1], n
            assert got[:off] == bytes(off) and got[off + 2 * n:] == bytes(4 * MIB - off - 2 * n)

        # Writing past the segment's end: the procedure's RejectedError is the call's
        # error here, and nothing outside the segment's bytes changed.
        view[:] = bytes(4 * MIB)
        view[4 * MIB - 10:] = b"0123456789"
        with pytest.raises(hamlyn.ProcedureError, match="segment write"):
            c.call_by_ref("reverse", struct.pack("<QQ", 4 * MIB - 10, 10), seg)
        assert bytes(view[4 * MIB - 10:]) == b"0123456789"
        # A plain call to a by-reference procedure: it has no segment to read.
        with pytest.raises(hamlyn.ProcedureError, match="no segment"):
            c.call("reverse", struct.pack("<QQ", 0, 8))
        # A ticket that grants no writes: the read works, the write is refused.
        ro_area = node.area(4096)
        memoryview(ro_area)[:4] = b"abcd"
        ro = node.slot(ro_area, meta=node.meta_area(1), write=False, read=True)
        with pytest.raises(hamlyn.ProcedureError, match="segment write"):
            c.call_by_ticket("reverse", struct.pack("<QQ", 0, 4), ro.ticket())
        assert bytes(memoryview(ro_area)[:8]) == b"abcd" + bytes(4)
        # It keeps serving.
        data = pattern(9, 5000)
        view[:5000] = data
        out = c.call_by_ref("reverse", struct.pack("<QQ", 0, 5000), seg)
        assert out == struct.pack("<QI", 4 * MIB, zlib.crc32(data))
        assert bytes(view[5000:10000]) == data[::-1]
        seg.close()
        assert seg.closed
        with pytest.raises(hamlyn.ClosedError):
            c.call_by_ref("reverse", struct.pack("<QQ", 0, 1), seg)
        c.call("stop", b"")
    counters = json.loads(peers.finish(p).strip().splitlines()[-1])
    assert counters["calls"] == 9 and counters["failed"] == 3, counters


def test_a_context_is_only_valid_while_its_procedure_runs(engine):
    """Both sides in this process: the server on a thread, a procedure that keeps its
    context; using it after the call is a StateError, not a dangling pointer."""
    import threading

    service = f"pytest-ref-{uuid.uuid4().hex[:12]}"
    kept, seen, stop = [], [], []

    def keep(args, ctx):
        kept.append(ctx)
        return struct.pack("<q", -1 if ctx.segment_len is None else ctx.segment_len)

    with hamlyn.Node.connect(engine.socket_path) as snode:
        server = hamlyn.RpcServer(snode, service, {"keep": keep})

        def serve():
            try:
                server.serve(until=lambda: bool(stop), timeout=120)
                for ctx in kept:
                    try:
                        ctx.read(0, 1)
                    except hamlyn.StateError as e:
                        seen.append(str(e))
            except BaseException as e:  # handed to the test
                seen.append(e)

        t = threading.Thread(target=serve)
        t.start()
        try:
            with hamlyn.Node.connect(engine.socket_path) as node, hamlyn.RpcClient(
                node, service
            ) as c:
                assert c.call("keep", b"") == struct.pack("<q", -1)
                seg = c.segment(node.area(8192))
                assert c.call_by_ref("keep", b"", seg) == struct.pack("<q", 8192)
        finally:
            stop.append(True)
            t.join(WAIT)
        server.close()
    assert not t.is_alive()
    assert len(seen) == 2, seen
    assert "named no segment" in seen[0] and "call is over" in seen[1], seen
    with pytest.raises(hamlyn.WrongThreadError):
        kept[1].write(0, b"x")  # only ever on the serving thread
