"""RPC over remote memory from Python: a Python server in another process (tests/peer.py
rpc-serve) serves procedures registered by name (bytes in, bytes out); the client here
calls them, keeps several calls outstanding, times out, and sees a killed server as an
error. The job layer: rank, size, barrier and all-gather under `hamlyn run -n 2`."""

import json
import os
import re
import struct
import subprocess
import sys
import textwrap
import threading
import uuid

import pytest

import hamlyn

WAIT = 30.0


@pytest.fixture
def service():
    """A service name no other test uses."""
    return f"pytest-{uuid.uuid4().hex[:12]}"


def start_server(peers, service):
    p = peers.start("rpc-serve", service, stdin=True)
    assert peers.line(p) == "serving"
    return p


def stop_server(peers, p, client):
    client.call("stop", b"")
    return json.loads(peers.finish(p).strip().splitlines()[-1])


def test_calls_by_name_several_outstanding_and_typed_errors(peers, engine, service):
    server = start_server(peers, service)
    with hamlyn.Node.connect(engine.socket_path) as node, hamlyn.RpcClient(node, service) as c:
        assert c.procedures == ["echo", "upper", "sum", "fails", "hold", "stop"]
        assert c.call("echo", b"hello") == b"hello"
        assert c.call("upper", bytearray(b"quiet")) == b"QUIET"
        assert c.call("sum", struct.pack("<4Q", 1, 2, 3, 4)) == struct.pack("<Q", 10)
        big = bytes(range(256)) * 15  # more than fits inline in a send
        assert c.call("echo", big) == big
        # Several outstanding: one per call frame, finished in any order; one more is
        # back-pressure.
        calls = [c.start("echo", b"call %d" % i) for i in range(hamlyn.RPC_FRAMES)]
        with pytest.raises(hamlyn.FullError):
            c.start("echo", b"one too many")
        for i, call in reversed(list(enumerate(calls))):
            assert c.finish(call) == b"call %d" % i
        assert calls[0].finished
        with pytest.raises(hamlyn.InvalidArgumentError, match="finished already"):
            c.finish(calls[0])
        with pytest.raises(hamlyn.NoProcedureError):
            c.call("nobody", b"")
        with pytest.raises(hamlyn.ProcedureError, match="ValueError: refusing b'x'"):
            c.call("fails", b"x")
        with pytest.raises(hamlyn.TooLongError):
            c.call("echo", b"x" * (hamlyn.RPC_MAX_ARGS + 1))
        assert c.call("echo", b"still serving") == b"still serving"
        counters = stop_server(peers, server, c)
    assert counters["calls"] == 4 + hamlyn.RPC_FRAMES + 1 + 1 + 1  # ... fails, still, stop
    assert counters["failed"] == 1
    assert counters["connected"] == 1


def test_a_call_times_out_and_the_client_goes_on(peers, engine, service):
    server = start_server(peers, service)
    with hamlyn.Node.connect(engine.socket_path) as node, hamlyn.RpcClient(node, service) as c:
        c.timeout = 0.2
        with pytest.raises(hamlyn.TimeoutError):
            c.call("hold", b"late")
        # Let the held procedure finish; its late reply is ignored.
        server.stdin.write("go\n")
        server.stdin.flush()
        c.timeout = WAIT
        assert c.call("echo", b"next") == b"next"
        stop_server(peers, server, c)


def test_a_server_killed_mid_call_is_an_error_at_the_client(peers, engine, service):
    server = start_server(peers, service)
    with hamlyn.Node.connect(engine.socket_path) as node, hamlyn.RpcClient(node, service) as c:
        call = c.start("hold", b"never answered")
        server.kill()
        server.wait(WAIT)
        with pytest.raises((hamlyn.PeerGoneError, hamlyn.TimeoutError)) as e:
            c.finish(call)
        assert isinstance(e.value, hamlyn.PeerGoneError), e.value
        with pytest.raises(hamlyn.PeerGoneError):
            c.call("echo", b"anyone?")


def test_no_such_service_is_an_error_within_the_timeout(node):
    with pytest.raises(hamlyn.NoServiceError):
        hamlyn.RpcClient(node, f"nobody-{uuid.uuid4().hex[:8]}", timeout=0.2)


def test_a_python_server_thread_and_a_client_in_one_process(engine, service):
    """Both sides here: the server serves on a thread (procedures run there, holding
    the GIL only while they run) while the main thread calls."""
    ran_on = set()

    def double(args):
        ran_on.add(threading.get_ident())
        return args * 2

    stop = threading.Event()
    with hamlyn.Node.connect(engine.socket_path) as snode:
        server = hamlyn.RpcServer(snode, service, {"double": double})
        t = threading.Thread(target=lambda: server.serve(until=stop.is_set, timeout=WAIT))
        t.start()
        try:
            with hamlyn.Node.connect(engine.socket_path) as cnode:
                with hamlyn.RpcClient(cnode, service) as c:
                    assert c.call("double", b"ab") == b"abab"
                    assert server.clients == 1
        finally:
            stop.set()
            t.join(WAIT)
        assert not t.is_alive()
        assert ran_on == {t.ident}
        assert server.counters()["calls"] == 1
        server.close()
    with pytest.raises(hamlyn.ClosedError):
        server.serve_once(0)


def test_bad_procedures_are_refused_at_registration(node):
    with pytest.raises(hamlyn.InvalidArgumentError, match="not callable"):
        hamlyn.RpcServer(node, "never", {"x": 42})


JOB_SCRIPT = textwrap.dedent(
    """
    import struct, sys
    import hamlyn

    with hamlyn.Job.init(timeout=60) as job, hamlyn.Node.connect_default() as node:
        assert job.launcher == "hamlyn", job.launcher
        area = node.area(64)
        slot = node.slot(area, meta=node.meta_area(1), queue=0)
        q, t = node.queue(0), node.terminus()
        seeds = job.all_gather(slot.ticket().seed)
        assert len(seeds) == job.size
        job.barrier()
        # Each rank writes its rank to the next rank's slot, around the ring.
        to = hamlyn.Ticket.from_seed(seeds[(job.rank + 1) % job.size])
        t.send(to, struct.pack("<Q", job.rank), tag=job.rank).result(timeout=30)
        n = q.wait(timeout=30)
        assert n is not None and n.kind == "message", n
        left = (job.rank - 1) % job.size
        assert struct.unpack_from("<Q", area)[0] == left and n.word == left
        job.barrier()
        print(f"rank {job.rank} of {job.size}: ok", flush=True)
    """
)


def test_a_job_of_two_python_processes_under_hamlyn_run(tmp_path, rust_programs):
    script = tmp_path / "job.py"
    script.write_text(JOB_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "HAMLYN_SOCKET"}
    out = subprocess.run(
        [rust_programs["hamlyn"], "run", "-n", "2", "--", sys.executable, str(script)],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    # (The ranks share the pipe: their lines may interleave.)
    assert sorted(re.findall(r"rank \d of \d: ok", out.stdout)) == [
        "rank 0 of 2: ok",
        "rank 1 of 2: ok",
    ], out.stdout


def test_launcher_variables_and_a_job_of_one(engine, node, monkeypatch):
    # Slurm's variables name the rank and size; a job of one needs no one else.
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_JOB_ID", f"py{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("HAMLYN_SOCKET", str(engine.socket_path))
    with hamlyn.Job.init(timeout=WAIT) as job:
        assert (job.rank, job.size, job.launcher) == (0, 1, "slurm")
        job.barrier()
        ticket = node.slot(node.area(64), meta=node.meta_area(1)).ticket()
        assert job.all_gather(ticket) == [ticket.seed]
        assert job.all_gather(ticket.seed) == [ticket.seed]
        with pytest.raises(hamlyn.BadSeedError):
            job.all_gather("hmseed1-garbage")
    monkeypatch.setenv("SLURM_PROCID", "3")
    with pytest.raises(hamlyn.InvalidArgumentError, match="not in a job of 1"):
        hamlyn.Job.init()


def test_a_rank_alone_times_out_waiting_for_the_others(node):
    with pytest.raises(hamlyn.TimeoutError):
        hamlyn.Job.join(0, 2, f"lonely{uuid.uuid4().hex[:8]}", node=node, timeout=0.3)
