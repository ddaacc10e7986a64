#!/usr/bin/env python3
"""A webhook receiver for scripts/bench-webhooks.sh (not a test).

Minimal HTTP/1.1 over asyncio (keep-alive, Content-Length bodies) so that
it is not the bottleneck: each POST is answered 204 and its arrival time
recorded with the event's `created_at` (the change's commit time) and id.
On SIGTERM it writes a JSON summary to OUT: events, distinct ids, delivery
delay (arrival - created_at) percentiles, and the arrival span.

Usage: webhook_receiver.py PORT OUT
"""
import asyncio
import json
import signal
import sys
import time
from datetime import datetime

PORT, OUT = int(sys.argv[1]), sys.argv[2]
seen = []  # (arrival_ms, created_ms, id)


def created_ms(body: bytes):
    v = json.loads(body)
    t = datetime.strptime(v["created_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
    return (t - datetime(1970, 1, 1)).total_seconds() * 1000, v["id"]


async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            now = time.time() * 1000
            c, i = created_ms(body)
            seen.append((now, c, i))
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


def pct(xs, p):
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else None


def summary():
    delays = sorted(a - c for a, c, _ in seen)
    arrivals = [a for a, _, _ in seen]
    span = (max(arrivals) - min(arrivals)) / 1000 if arrivals else 0
    return {
        "received": len(seen),
        "distinct": len({i for _, _, i in seen}),
        "delay_ms": {
            "p50": pct(delays, 0.50),
            "p90": pct(delays, 0.90),
            "p99": pct(delays, 0.99),
            "max": delays[-1] if delays else None,
        },
        "arrival_span_s": round(span, 2),
        "per_s": round(len(seen) / span, 1) if span else None,
    }


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", PORT, backlog=1024)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, lambda: print(len(seen), flush=True))
    async with server:
        await stop.wait()
    with open(OUT, "w") as f:
        json.dump(summary(), f)


asyncio.run(main())
