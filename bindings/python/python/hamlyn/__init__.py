"""Hamlyn: protected, zero-copy, sender-managed messaging between processes.

The Python face of the Rust library (``crates/hamlyn``)::

    import hamlyn

    with hamlyn.Node.embedded() as node:           # or Node.connect_default()
        inbox = node.area(4096)
        meta = node.meta_area(8)
        slot = node.slot(inbox, meta=meta, queue=0)
        ticket = slot.ticket()                     # str(ticket): its seed text
        queue, terminus = node.queue(0), node.terminus()
        terminus.send(ticket, b"hello", tag=7)
        n = queue.wait(timeout=1.0)
        print(n.kind, bytes(memoryview(inbox)[: n.length]))

Objects: ``Node`` (a connection to an engine, embedded or a daemon), ``Area`` (shared
memory, a zero-copy buffer), ``MetaArea``, ``Slot``, ``Ticket`` (seeds as ``str``),
``Terminus`` (send, read, compare_swap, fetch_add), ``DirectTarget`` (a direct slot
mapped here), ``Send`` and ``Status``, ``Queue`` (poll, wait, event_fd,
``await queue.wait_async()``) and ``Notification``; FLIPC's receive endpoints:
``Endpoint`` (posted buffers, a discard counter), ``EndpointMessage`` and
``EndpointGroup`` (receive-any, a blocking receive). Errors are
subclasses of ``HamlynError`` (``hamlyn._errors``).
"""

from ._errors import (
    HamlynError,
    ClosedError,
    ConnectError,
    EngineGoneError,
    ControlError,
    RefusedError,
    NotFoundError,
    NotOwnerError,
    UnreachableError,
    ResourceError,
    NoTerminusError,
    NoSuchQueueError,
    QueueTakenError,
    OutOfRangeError,
    InvalidArgumentError,
    ForeignObjectError,
    WrongModeError,
    BadSeedError,
    SplitError,
    NotLocalError,
    FullError,
    BadTicketError,
    NotGrantedError,
    InlineTooLongError,
    OutsideTicketError,
    RejectedError,
    BadKeyError,
    TimeoutError,
)
from ._hamlyn import (
    DEFAULT_SOCKET,
    DEFAULT_STARVATION_BOUND,
    MAX_INLINE,
    SOCKET_ENV,
    Area,
    DirectTarget,
    Endpoint,
    EndpointGroup,
    EndpointMessage,
    MetaArea,
    Node,
    Notification,
    Queue,
    Send,
    Slot,
    Status,
    Terminus,
    Ticket,
    __version__,
    seed_from_tickets,
    tickets_from_seed,
)

__all__ = [
    "Area",
    "DEFAULT_SOCKET",
    "DEFAULT_STARVATION_BOUND",
    "DirectTarget",
    "Endpoint",
    "EndpointGroup",
    "EndpointMessage",
    "MAX_INLINE",
    "MetaArea",
    "Node",
    "Notification",
    "Queue",
    "SOCKET_ENV",
    "Send",
    "Slot",
    "Status",
    "Terminus",
    "Ticket",
    "__version__",
    "seed_from_tickets",
    "tickets_from_seed",
    "HamlynError",
    "ClosedError",
    "ConnectError",
    "EngineGoneError",
    "ControlError",
    "RefusedError",
    "NotFoundError",
    "NotOwnerError",
    "UnreachableError",
    "ResourceError",
    "NoTerminusError",
    "NoSuchQueueError",
    "QueueTakenError",
    "OutOfRangeError",
    "InvalidArgumentError",
    "ForeignObjectError",
    "WrongModeError",
    "BadSeedError",
    "SplitError",
    "NotLocalError",
    "FullError",
    "BadTicketError",
    "NotGrantedError",
    "InlineTooLongError",
    "OutsideTicketError",
    "RejectedError",
    "BadKeyError",
    "TimeoutError",
]
