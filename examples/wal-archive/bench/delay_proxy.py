"""A TCP proxy on loopback that delays every byte by a fixed time each way:
an object store DELAY_MS * 2 round trip away, for sustained.sh.

Each chunk is forwarded DELAY_MS after it arrived, in order, without waiting
for the chunks before it to be delayed again: a pipe with latency, not a
slower one.

Usage: python3 delay_proxy.py LISTEN_PORT TARGET_PORT DELAY_MS
"""

import asyncio
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    async def send() -> None:
        while True:
            due, chunk = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if chunk is None:
                writer.close()
                return
            writer.write(chunk)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while chunk := await reader.read(65536):
            queue.put_nowait((loop.time() + delay, chunk))
    finally:
        queue.put_nowait((loop.time() + delay, None))
        await sender


async def main() -> None:
    listen, target, delay_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    delay = delay_ms / 1000

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pipe(client_reader, server_writer, delay),
            pipe(server_reader, client_writer, delay),
            return_exceptions=True,
        )

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
