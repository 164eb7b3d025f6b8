"""The exceptions of the hamlyn package, raised by its objects for the library's errors.

Every one is a ``HamlynError``; some are also the builtin exception a Python user would
catch for that case (``BadSeedError`` is a ``ValueError``, ``TimeoutError`` a builtin
``TimeoutError``, ``ConnectError`` a ``ConnectionError``, ...). The message is the
library's own.
"""

import builtins


class HamlynError(Exception):
    """Base class of every error the hamlyn package raises."""


class ClosedError(HamlynError):
    """A handle was used after it, or the node it was made from, was closed."""


class ConnectError(HamlynError, ConnectionError):
    """The engine cannot be reached at the socket path (or could not be started)."""


class EngineGoneError(HamlynError, ConnectionError):
    """The engine is gone (it stopped or died): this node can do nothing more."""


class ControlError(HamlynError):
    """The control connection broke, timed out, or the engine broke the protocol."""


class RefusedError(HamlynError):
    """The engine refused a request (a reason not covered by a subclass)."""


class NotFoundError(RefusedError, LookupError):
    """The engine knows no such object or name."""


class NotOwnerError(RefusedError, PermissionError):
    """The name or object belongs to another client."""


class UnreachableError(RefusedError):
    """A node the request needed cannot be reached."""


class ResourceError(HamlynError, OSError):
    """A system resource failed: shared memory, a descriptor, a wake-up."""


class NoTerminusError(HamlynError):
    """Every terminus of the node is in use."""


class NoSuchQueueError(HamlynError, IndexError):
    """No notification queue with that index."""


class QueueTakenError(HamlynError):
    """The queue already has a consumer (close it to take it again)."""


class OutOfRangeError(HamlynError, IndexError):
    """A byte or metadata range falls outside its area, slot or ticket."""


class InvalidArgumentError(HamlynError, ValueError):
    """An argument is not acceptable (the message says which and why)."""


class ForeignObjectError(HamlynError, ValueError):
    """An object of another node was passed (an area of another node, say)."""


class WrongModeError(HamlynError):
    """The slot's mode does not allow that."""


class BadSeedError(HamlynError, ValueError):
    """Seed text that does not decode (bad characters, checksum, version, cut short)."""


class SplitError(HamlynError, ValueError):
    """A ticket cannot be split that way."""


class NotLocalError(HamlynError):
    """The ticket names another node (direct slots are local)."""


class FullError(HamlynError):
    """Back-pressure: the terminus's work queue is full (or every metadata entry of the
    ticket is held by a message of this terminus still in flight: `EntriesBusyError`).
    Nothing was queued: retry once earlier requests are done."""


class EntriesBusyError(FullError):
    """Back-pressure of its own kind: no entry was named, and every metadata entry the
    default choice may take is held by a long message of this terminus still in flight.
    Nothing was queued. Room comes when one of those sends finishes (`SendHandle.wait`,
    `Terminus.wait_idle`), not when the work queue drains (`Terminus.wait_room`); or name
    an entry."""


class BadTicketError(HamlynError, ValueError):
    """The ticket does not allow this send (fast-mode shape, packet budget, metadata)."""


class NotGrantedError(HamlynError, PermissionError):
    """The ticket does not grant what the operation needs (writes, reads, atomics)."""


class InlineTooLongError(HamlynError, ValueError):
    """More bytes than ``MAX_INLINE`` for ``Terminus.send`` (use ``send_area``)."""


class OutsideTicketError(HamlynError, ValueError):
    """The request falls outside the ticket's range."""


class RejectedError(HamlynError):
    """The engine refused the request while or after sending it (``Send.result()``)."""


class BadKeyError(RejectedError, PermissionError):
    """The key does not match the slot's: a wrong or stale ticket (the slot was rekeyed,
    or the ticket is not the slot's)."""


class TimeoutError(HamlynError, builtins.TimeoutError):
    """A wait ended at its timeout with the request still pending."""



# --- The layers above the interface level: Rats, active messages, RPC, jobs ----------


class WrongThreadError(HamlynError, RuntimeError):
    """An object of the layers above the interface level (active messages, RPC, jobs,
    Rats) was used from a thread other than the one that made it."""


class NoSpaceError(HamlynError):
    """A protocol's memory manager has no free block that large (release some first)."""


class ProtocolError(HamlynError):
    """A peer broke the protocol (a forged or malformed message); nothing ran on it."""


class TooLongError(HamlynError, ValueError):
    """A message or payload is longer than its kind or its receiver allows."""


class PeerGoneError(HamlynError, ConnectionError):
    """The peer (endpoint, server, stream end) went away."""


class NotificationsLostError(HamlynError):
    """Notifications were lost to a full queue: the protocol cannot tell what arrived."""


class StateError(HamlynError):
    """The object is not in a state that allows this (a stream already closed, say)."""


class EndOfStreamError(HamlynError, EOFError):
    """The stream's other end closed it: nothing more will arrive."""


class CollisionError(HamlynError):
    """An active-message handler name is registered in the cluster with another
    argument fingerprint."""


class UnknownHandlerError(HamlynError, LookupError):
    """No live active-message handler of that name or id in the local copy of the
    cluster's table (``synch()`` or ``refresh()`` first, or nobody registered it)."""


class HandlerRefusedError(HamlynError):
    """The receiver refused the active message (no such handler there, an old epoch, a
    malformed message) or its handler failed, raised, replied twice or gave no reply
    that was asked for; the message names the handler."""


class ReplyTwiceError(HamlynError):
    """A handler's reply token was used twice (the second reply is not sent)."""


class NoCallError(HamlynError, LookupError):
    """The call is not outstanding (finished already, or never started here)."""


class NoChannelError(HamlynError):
    """No logical channel with that number is open on this endpoint."""


class NoServiceError(HamlynError, LookupError):
    """No RPC service of that name appeared in the registry within the timeout."""


class NoProcedureError(HamlynError, LookupError):
    """The RPC service offers no procedure of that name."""


class CallRefusedError(HamlynError):
    """The RPC server refused the call (an unknown procedure number, a frame whose
    lengths do not fit, a frame rewritten while the procedure ran)."""


class ProcedureError(HamlynError):
    """The remote procedure failed (a Python procedure raised: the message carries the
    exception's text)."""
