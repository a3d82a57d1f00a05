"""One direction of an asyncio TCP proxy in the tests: copy what r reads to
w until the end of the stream or an error, then close w.

    asyncio.ensure_future(pipe(client_reader, broker_writer))
    asyncio.ensure_future(pipe(broker_reader, client_writer, delay=0.005))
"""
import asyncio


async def pipe(r, w, delay=0, ended=None):
    """delay: seconds each piece waits before it is written (a slow link);
    ended(): called once the pipe stopped."""
    try:
        while True:
            d = await r.read(4096)
            if not d:
                break
            if delay:
                await asyncio.sleep(delay)
            w.write(d)
            await w.drain()
    except OSError:
        pass
    finally:
        if ended is not None:
            ended()
        w.close()
