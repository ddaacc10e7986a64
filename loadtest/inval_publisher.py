#!/usr/bin/env python3
"""Publishes invalidation messages (`<version> <code> <domain>` on
su:1:inval, protocol 3.2 as of 3.5) at a fixed rate for a bounded time:
what the reaper, an import or recycling make an edge handle, for the kit's
edge-hot-inval.

    inval_publisher.py REDIS_PORT RATE_PER_SEC SECONDS OUT_FILE [DOMAIN [CHANNEL]]

Codes are `inv` + 8 digits on DOMAIN (default s.shop55.com, the kit's),
none of them a link of the run (so the edge's cached set stays warm and
the scenario measures the handling of messages, not misses): each one an
edge applies in full, purging the code's pages and raising a tombstone,
as for a deleted link it did not hold. (Before session 27 the messages
had no domain, the pre-3.5 form an edge only counts as `legacy`.)
CHANNEL (default su:1:inval) another: the same publishing, Redis's and
this script's work alike, that no edge hears (the kit's edge-hot-pub,
what the publishing costs the load generator's machine). Every 10 ms the messages due are pipelined on one connection
and their replies read. Writes the number published to OUT_FILE.
"""
import socket
import sys
import time



def main() -> None:
    port, rate, secs, out = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    domain = sys.argv[5] if len(sys.argv) > 5 else "s.shop55.com"
    channel = sys.argv[6] if len(sys.argv) > 6 else "su:1:inval"
    s = socket.create_connection(("127.0.0.1", port))
    start = time.monotonic()
    sent = 0
    n = 0
    while True:
        now = time.monotonic() - start
        if now >= secs:
            break
        due = int(now * rate) - sent
        if due > 0:
            buf = []
            for _ in range(due):
                msg = f"1 inv{n % 100_000_000:08d} {domain}"
                n += 1
                buf.append(f"*3\r\n$7\r\nPUBLISH\r\n${len(channel)}\r\n{channel}\r\n${len(msg)}\r\n{msg}\r\n")
            s.sendall("".join(buf).encode())
            # One integer reply per message.
            replies = 0
            while replies < due:
                chunk = s.recv(65536)
                if not chunk:
                    sys.exit("redis closed the connection")
                if chunk.startswith(b"-"):
                    sys.exit(f"redis refused a message: {chunk[:200]!r}")
                replies += chunk.count(b"\r\n")
            sent += due
        time.sleep(0.01)
    with open(out, "w") as f:
        f.write(f"{sent}\n")


if __name__ == "__main__":
    main()
