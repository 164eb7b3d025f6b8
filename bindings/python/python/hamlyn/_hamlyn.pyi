"""Type stubs of the extension module ``hamlyn._hamlyn`` (src/*.rs)."""

import os
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Literal, Optional, final

from typing_extensions import Buffer

__all__ = [
    "__version__",
    "MAX_INLINE",
    "DEFAULT_SOCKET",
    "SOCKET_ENV",
    "Node",
    "Area",
    "MetaArea",
    "Slot",
    "Ticket",
    "Terminus",
    "Send",
    "Status",
    "Queue",
    "Notification",
    "DirectTarget",
    "seed_from_tickets",
    "tickets_from_seed",
    "bench_pong",
    "bench_ping",
]
__version__: str
MAX_INLINE: int
DEFAULT_SOCKET: str
SOCKET_ENV: str

_SlotModeName = Literal["normal", "paranoid", "paranoid_one_shot", "fast"]
_KindName = Literal["message", "fast", "peer_down", "read_done", "atomic_done", "overflow", "unknown"]

@final
class Node:
    """A connection to an engine: one control socket and one port."""

    @classmethod
    def embedded(
        cls,
        *,
        termini: int = 4,
        queues: int = 4,
        queue_cap: int = 1024,
        spin: int = 200,
        control_timeout: float = 10.0,
    ) -> "Node": ...
    @classmethod
    def connect(
        cls,
        path: str | os.PathLike[str],
        *,
        termini: int = 4,
        queues: int = 4,
        queue_cap: int = 1024,
        spin: int = 200,
        control_timeout: float = 10.0,
    ) -> "Node": ...
    @classmethod
    def connect_default(
        cls,
        *,
        termini: int = 4,
        queues: int = 4,
        queue_cap: int = 1024,
        spin: int = 200,
        control_timeout: float = 10.0,
    ) -> "Node": ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> "Node": ...
    def __exit__(
        self,
        t: Optional[type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    @property
    def id(self) -> int: ...
    @property
    def incarnation(self) -> int: ...
    @property
    def client_id(self) -> int: ...
    @property
    def socket_path(self) -> str: ...
    def area(self, length: int) -> "Area": ...
    def meta_area(self, count: int) -> "MetaArea": ...
    def slot(
        self,
        area: "Area",
        *,
        meta: Optional["MetaArea"] = None,
        queue: Optional[int] = None,
        mode: _SlotModeName = "normal",
        offset: int = 0,
        length: Optional[int] = None,
        write: bool = True,
        read: bool = False,
        atomic: bool = False,
        direct: bool = False,
    ) -> "Slot": ...
    def terminus(self, priority: int = 0) -> "Terminus": ...
    def open_direct(self, ticket: "Ticket") -> "DirectTarget": ...
    def queue(self, index: int = 0) -> "Queue": ...
    @property
    def event_fd(self) -> int: ...
    def fileno(self) -> int: ...
    def drain_event_fd(self) -> int: ...
    def engine_gone(self) -> bool: ...
    def publish(self, name: str, ticket: "Ticket") -> None: ...
    def unpublish(self, name: str) -> None: ...
    def lookup(self, name: str) -> "Ticket": ...
    def stats(self) -> dict[str, Any]: ...

@final
class Area:
    """Registered shared memory; a writable buffer of its bytes without a copy."""

    def __len__(self) -> int: ...
    # The buffer protocol (in C; these two show at run time from Python 3.12): what
    # makes an Area a `Buffer` to type checkers (`memoryview(area)`, `numpy.frombuffer`).
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...
    @property
    def id(self) -> int: ...
    def view(self) -> memoryview: ...
    def read(self, offset: int, length: int) -> bytes: ...
    def write(self, offset: int, data: Buffer) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Area": ...
    def __exit__(
        self,
        t: Optional[type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class MetaArea:
    """An area of 128-byte metadata entries."""

    @property
    def count(self) -> int: ...
    def __len__(self) -> int: ...
    def metadata(self, index: int) -> bytes: ...
    def arm(self, index: int) -> None: ...
    def disarm(self, index: int) -> None: ...
    def is_armed(self, index: int) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> "MetaArea": ...
    def __exit__(
        self,
        t: Optional[type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class Slot:
    """Part of an area named by a key and a mode; tickets to it."""

    @property
    def id(self) -> int: ...
    @property
    def mode(self) -> _SlotModeName: ...
    @property
    def length(self) -> int: ...
    @property
    def base(self) -> int: ...
    def ticket(
        self,
        offset: int = 0,
        length: Optional[int] = None,
        meta_first: int = 0,
        meta_count: Optional[int] = None,
    ) -> "Ticket": ...
    def rekey(self) -> None: ...
    def revoke(self) -> None: ...
    def inhibit(self, on: bool = True) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Slot": ...
    def __exit__(
        self,
        t: Optional[type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class Ticket:
    """The capability to write (read, update) part of a slot; ``str()`` is its seed."""

    @staticmethod
    def from_seed(text: str) -> "Ticket": ...
    @property
    def seed(self) -> str: ...
    def split(self, parts: int) -> list["Ticket"]: ...
    @property
    def node(self) -> int: ...
    @property
    def slot(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def meta_first(self) -> int: ...
    @property
    def meta_count(self) -> int: ...
    @property
    def grants(self) -> str: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Terminus:
    """A private send work queue."""

    def send(
        self,
        ticket: Ticket,
        data: Buffer,
        *,
        tag: int = 0,
        offset: int = 0,
        meta: Optional[bytes] = None,
        notify: bool = True,
        wake: bool = True,
        fast: bool = False,
        entry: Optional[int] = None,
    ) -> "Send": ...
    def send_area(
        self,
        ticket: Ticket,
        area: Area,
        area_offset: int = 0,
        length: Optional[int] = None,
        *,
        tag: int = 0,
        offset: int = 0,
        meta: Optional[bytes] = None,
        notify: bool = True,
        wake: bool = True,
        fast: bool = False,
        entry: Optional[int] = None,
    ) -> "Send": ...
    def read(
        self, source: Ticket, offset: int, length: int, reply: Ticket, reply_offset: int = 0
    ) -> "Send": ...
    def compare_swap(
        self,
        target: Ticket,
        offset: int,
        expected: int,
        desired: int,
        reply: Ticket,
        reply_offset: int = 0,
    ) -> "Send": ...
    def fetch_add(
        self, target: Ticket, offset: int, addend: int, reply: Ticket, reply_offset: int = 0
    ) -> "Send": ...
    def wait_idle(self, timeout: Optional[float] = None) -> bool: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def index(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Terminus": ...
    def __exit__(
        self,
        t: Optional[type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class DirectTarget:
    """A direct slot of this node mapped into this process."""

    def send(
        self,
        data: Buffer,
        *,
        tag: int = 0,
        offset: int = 0,
        meta: Optional[bytes] = None,
        notify: bool = True,
        wake: bool = True,
        fast: bool = False,
        entry: Optional[int] = None,
    ) -> None: ...
    def send_area(
        self,
        area: Area,
        area_offset: int = 0,
        length: Optional[int] = None,
        *,
        tag: int = 0,
        offset: int = 0,
        meta: Optional[bytes] = None,
        notify: bool = True,
        wake: bool = True,
        fast: bool = False,
        entry: Optional[int] = None,
    ) -> None: ...
    @property
    def ticket(self) -> Ticket: ...
    @property
    def fast(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> "DirectTarget": ...
    def __exit__(
        self,
        t: Optional[type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class Send:
    """One request queued on a terminus."""

    @property
    def status(self) -> "Status": ...
    @property
    def done(self) -> bool: ...
    def wait(self, timeout: Optional[float] = None) -> "Status": ...
    def result(self, timeout: Optional[float] = None) -> None: ...
    @property
    def request(self) -> tuple[int, int]: ...

@final
class Status:
    """How a request stands."""

    @property
    def state(self) -> Literal["pending", "sent", "failed"]: ...
    @property
    def reason(self) -> Optional[str]: ...
    @property
    def code(self) -> int: ...
    @property
    def pending(self) -> bool: ...
    @property
    def sent(self) -> bool: ...
    @property
    def failed(self) -> bool: ...

@final
class Queue:
    """The consumer of one notification queue."""

    @property
    def index(self) -> int: ...
    def poll(self) -> Optional["Notification"]: ...
    def wait(self, timeout: Optional[float] = None) -> Optional["Notification"]: ...
    def wait_async(
        self, timeout: Optional[float] = None
    ) -> Coroutine[Any, Any, Optional["Notification"]]: ...
    def arm(self) -> bool: ...
    @property
    def event_fd(self) -> int: ...
    def fileno(self) -> int: ...
    def drain_event_fd(self) -> int: ...
    @property
    def overflows(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Queue": ...
    def __exit__(
        self,
        t: Optional[type[BaseException]],
        v: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class Notification:
    """One notification."""

    @property
    def kind(self) -> _KindName: ...
    @property
    def raw_kind(self) -> int: ...
    @property
    def slot(self) -> int: ...
    @property
    def meta_index(self) -> Optional[int]: ...
    @property
    def word(self) -> int: ...
    @property
    def src_node(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def flags(self) -> int: ...
    @property
    def request(self) -> Optional[tuple[int, int]]: ...

def seed_from_tickets(tickets: list[Ticket]) -> str: ...
def tickets_from_seed(text: str) -> list[Ticket]: ...
def bench_pong(terminus: Terminus, queue: Queue, area: Area, peer: Ticket) -> int: ...
def bench_ping(
    terminus: Terminus, queue: Queue, area: Area, peer: Ticket, rounds: int, bye: bool = True
) -> list[int]: ...
