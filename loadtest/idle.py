#!/usr/bin/env python3
"""Waits until a server is idle before a measured scenario (issue 30, item 5).

  idle.py MAX_WAIT_S PID...

Idle means: the processes PID... and all their descendants, every thread
included (an edge's invalidation subscriber, click flusher, cache sweeper;
nginx's workers), used less than 1% of one core over the last 500 ms. The
CPU time comes from /proc/<pid>/task/<tid>/schedstat (nanoseconds), not from
the tick-granular utime. A previous scenario's aftermath (a burst of
invalidations still being applied, a flush) would otherwise be measured as
this scenario's cost.

Prints `<seconds waited> <busy % in the last window>` and exits 0; exits 0
too when MAX_WAIT_S passes (the caller records the figures), 2 on bad usage.
"""
import os
import sys
import time

from cpu import thread_ns

WINDOW_S = 0.5
STEP_S = 0.1
IDLE_SHARE = 0.01


def descendants(roots):
    """The roots and every process below them (one pass over /proc)."""
    children = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                # comm may hold spaces and parentheses: ppid follows the last ')'.
                ppid = f.read().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            continue
        children.setdefault(ppid, []).append(p)
    out, todo = set(), [str(r) for r in roots]
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.add(p)
        todo.extend(children.get(p, []))
    return out


def cpu_ns(pids):
    return sum(ns for p in pids for _, ns in thread_ns(p))


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    max_wait = float(argv[1])
    pids = descendants(argv[2:])
    start = time.monotonic()
    samples = [(start, cpu_ns(pids))]
    busy = 100.0
    while True:
        time.sleep(STEP_S)
        now = time.monotonic()
        samples.append((now, cpu_ns(pids)))
        # The oldest sample at least one window back.
        while len(samples) > 2 and now - samples[1][0] >= WINDOW_S:
            samples.pop(0)
        t0, c0 = samples[0]
        if now - t0 >= WINDOW_S:
            busy = 100.0 * (samples[-1][1] - c0) / 1e9 / (now - t0)
            if busy < 100.0 * IDLE_SHARE or now - start >= max_wait:
                break
    print(f"{now - start:.1f} {busy:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
