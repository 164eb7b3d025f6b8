"""``await queue.wait_async()``: waiting for a notification inside an asyncio loop.

The node's event descriptor becomes readable when an armed queue gets an entry. asyncio
allows one reader callback per descriptor and loop, and every queue of a node shares the
node's descriptor, so one watcher per (loop, descriptor) wakes every waiter of that loop;
each then drains nothing but polls its own queue, re-arms it and waits again if empty.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ._hamlyn import Notification, Queue


class _Watcher:
    """The reader of one event descriptor in one loop: wakes the waiters registered."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, queue: "Queue") -> None:
        self.loop = loop
        self.fd = fd
        self.queue = queue  # any queue of the node: to drain the descriptor
        self.waiters: set[asyncio.Future[None]] = set()
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            self.queue.drain_event_fd()
        except Exception as e:  # EngineGoneError, ClosedError: every waiter learns it
            for w in self.waiters:
                if not w.done():
                    w.set_exception(e)
            self.waiters.clear()
            self._stop()
            return
        for w in self.waiters:
            if not w.done():
                w.set_result(None)
        self.waiters.clear()

    def _stop(self) -> None:
        # Only the registered watcher of this (loop, descriptor) owns the reader: an
        # older one, released late by a waiter it woke, must not remove its successor's.
        if _watchers.get((self.loop, self.fd)) is self:
            self.loop.remove_reader(self.fd)
            del _watchers[(self.loop, self.fd)]

    def release(self, fut: asyncio.Future[None]) -> None:
        self.waiters.discard(fut)
        if not self.waiters:
            self._stop()


_watchers: dict[tuple[asyncio.AbstractEventLoop, int], _Watcher] = {}


async def wait(queue: "Queue", timeout: Optional[float] = None) -> Optional["Notification"]:
    """The next notification of ``queue``, waiting in the running loop; None at the
    timeout (seconds; None waits forever)."""
    n = queue.poll()
    if n is not None:
        return n
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    while True:
        # Armed before the last poll: a post after the poll makes the descriptor
        # readable, so nothing slips between the poll and the wait.
        if queue.arm():
            n = queue.poll()
            if n is not None:
                return n
        n = queue.poll()
        if n is not None:
            return n
        remaining = None if deadline is None else deadline - loop.time()
        if remaining is not None and remaining <= 0:
            return None
        fd = queue.event_fd
        watcher = _watchers.get((loop, fd))
        if watcher is None:
            watcher = _watchers[(loop, fd)] = _Watcher(loop, fd, queue)
        fut: asyncio.Future[None] = loop.create_future()
        watcher.waiters.add(fut)
        try:
            await asyncio.wait_for(fut, remaining)
        except asyncio.TimeoutError:
            pass
        finally:
            watcher.release(fut)
