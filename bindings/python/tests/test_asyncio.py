"""`await queue.wait_async()`: asyncio's add_reader on the node's event descriptor."""

import asyncio

import hamlyn


def inbox(node, queue_index):
    area = node.area(256)
    slot = node.slot(area, meta=node.meta_area(4), queue=queue_index)
    return area, slot, slot.ticket()


def test_await_a_notification_sent_by_another_process(peers, node):
    _area, _slot, ticket = inbox(node, 0)

    async def main():
        with node.queue(0) as q:
            waiter = asyncio.ensure_future(q.wait_async(timeout=30.0))
            await asyncio.sleep(0.05)
            assert not waiter.done(), "nothing was sent yet"
            sender = peers.start("send-once", env={"HAMLYN_SEED": ticket.seed})
            n = await waiter
            assert peers.finish(sender).strip() == "sent"
            return n

    n = asyncio.run(main())
    assert n is not None and n.kind == "message" and n.length == 8


def test_two_queues_of_one_node_are_awaited_together_and_the_loop_stays_free(node):
    _a0, _s0, t0 = inbox(node, 0)
    _a1, _s1, t1 = inbox(node, 1)

    async def main():
        with node.queue(0) as q0, node.queue(1) as q1, node.terminus() as term:
            # A wait's own timeout ends in one last poll, which would hide a lost
            # wake-up: the outer bounds are shorter, so a lost wake-up fails the test.
            w0 = asyncio.ensure_future(q0.wait_async(timeout=60.0))
            w1 = asyncio.ensure_future(q1.wait_async(timeout=60.0))
            ticks = 0
            for _ in range(5):  # the loop runs other work while both wait
                await asyncio.sleep(0.01)
                ticks += 1
            term.send(t1, b"one", tag=1)
            n1 = await asyncio.wait_for(w1, 20.0)
            assert not w0.done()
            term.send(t0, b"zero", tag=0)
            n0 = await asyncio.wait_for(w0, 20.0)
            return ticks, n0, n1

    ticks, n0, n1 = asyncio.run(main())
    assert ticks == 5
    assert (n0.word, n0.length) == (0, 4)
    assert (n1.word, n1.length) == (1, 3)


def test_a_wait_async_times_out_with_none(node):
    async def main():
        with node.queue(2) as q:
            return await q.wait_async(timeout=0.05)

    assert asyncio.run(main()) is None


def test_a_notification_already_there_is_returned_at_once(node):
    _area, _slot, ticket = inbox(node, 3)
    with node.queue(3) as q, node.terminus() as term:
        term.send(ticket, b"x", tag=9).result(timeout=30.0)

        async def main():
            return await q.wait_async(timeout=30.0)

        n = asyncio.run(main())
    assert n is not None and n.word == 9
    assert isinstance(n, hamlyn.Notification)
