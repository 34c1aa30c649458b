"""A delaying proxy so the lab's loopback BMCs answer as slowly as real ones.

Real BMCs take 100 ms to seconds per request; that is what makes fan-out matter. This
kernel has no netem, so the delay is added here: every client->BMC chunk (TCP, Redfish) or
datagram (UDP, IPMI) is held `latency_ms` before it is forwarded; answers go straight back.

    python -m provisioner.lab.proxy CONFIG.json
CONFIG: {"latency_ms": 200, "tcp": [[listen_port, upstream_port], ...], "udp": [...]}
Binds 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any, cast

HOST = "127.0.0.1"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                delay_s: float) -> None:
    try:
        while data := await reader.read(65536):
            if delay_s:
                await asyncio.sleep(delay_s)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def _tcp(listen: int, upstream: int, delay_s: float) -> asyncio.AbstractServer:
    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(HOST, upstream)
        except OSError:
            cw.close()
            return
        await asyncio.gather(_pipe(cr, uw, delay_s), _pipe(ur, cw, 0.0))

    return await asyncio.start_server(handle, HOST, listen)


class _UdpUpstream(asyncio.DatagramProtocol):
    def __init__(self, front: asyncio.DatagramTransport, client: Any) -> None:
        self.front, self.client = front, client
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not isinstance-checked: 3.11's selector datagram transport does not subclass
        # asyncio.DatagramTransport.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.front.sendto(data, self.client)


class _UdpFront(asyncio.DatagramProtocol):
    def __init__(self, upstream: int, delay_s: float) -> None:
        self.upstream, self.delay_s = upstream, delay_s
        self.transport: asyncio.DatagramTransport | None = None
        self.peers: dict[Any, asyncio.Future[_UdpUpstream]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not isinstance-checked: 3.11's selector datagram transport does not subclass
        # asyncio.DatagramTransport.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        asyncio.get_running_loop().create_task(self._forward(data, addr))

    async def _forward(self, data: bytes, addr: Any) -> None:
        loop = asyncio.get_running_loop()
        if addr not in self.peers:
            fut: asyncio.Future[_UdpUpstream] = loop.create_future()
            self.peers[addr] = fut
            assert self.transport is not None
            _, proto = await loop.create_datagram_endpoint(
                lambda: _UdpUpstream(self.transport, addr),  # type: ignore[arg-type]
                remote_addr=(HOST, self.upstream))
            fut.set_result(proto)
        peer = await self.peers[addr]
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if peer.transport is not None:
            peer.transport.sendto(data)


async def serve(config: dict[str, Any]) -> None:
    delay_s = float(config.get("latency_ms", 0)) / 1000.0
    loop = asyncio.get_running_loop()
    servers = [await _tcp(int(a), int(b), delay_s) for a, b in config.get("tcp", [])]
    for a, b in config.get("udp", []):
        upstream = int(b)
        await loop.create_datagram_endpoint(
            lambda upstream=upstream: _UdpFront(upstream, delay_s),  # type: ignore[misc]
            local_addr=(HOST, int(a)))
    stop: asyncio.Future[None] = loop.create_future()

    def request_stop() -> None:
        if not stop.done():
            stop.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, request_stop)
    print("proxy ready", flush=True)
    await stop
    for s in servers:
        s.close()


def main() -> None:
    with open(sys.argv[1]) as fh:
        config = json.load(fh)
    asyncio.run(serve(config))


if __name__ == "__main__":
    main()
