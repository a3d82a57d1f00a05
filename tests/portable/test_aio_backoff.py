# The asyncio client's run() while every reconnect attempt fails at once (a
# connect_link that raises, a backoff of 0): each attempt lets the other
# tasks run, so run() cannot hold the event loop (CPython and the
# WebAssembly MicroPython).
from umqtt3.aio import AsyncClient
from umqtt3.compat import asleep_ms


async def test_failing_attempts_with_no_backoff_let_other_tasks_run():
    import asyncio
    ticks = [0]
    seen = []  # the ticker's count at each attempt

    def connect_link():
        seen.append(ticks[0])
        if len(seen) >= 50:
            raise RuntimeError("enough")  # ends run(): this test's way out
        raise OSError(111)  # refused, at once

    async def ticker():
        for _ in range(100):
            ticks[0] += 1
            await asleep_ms(0)

    c = AsyncClient("dev1", "peer", interval_ms=1, connect_link=connect_link, reconnect=True,
                    backoff_ms=(0, 0))
    try:
        await c.connect()  # refused: reconnect=True stays, run() dials again
    except OSError:
        pass
    t = asyncio.create_task(ticker())
    try:
        await c.run()
        raised = None
    except RuntimeError as e:
        raised = e
    await t
    assert raised is not None and len(seen) == 50
    # before: the 50 attempts ran back to back, the ticker never ran
    assert seen[-1] >= 40, seen
