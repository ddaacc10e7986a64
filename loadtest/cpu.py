#!/usr/bin/env python3
"""Where the machine's CPU went during one measured run.

  cpu.py snap OUT                 every thread's CPU time now, and each core's
  cpu.py diff BEFORE AFTER        what was spent between two snaps (JSON)

On two cores shared by the server under test, its load generator and the
services around it (Redis taking click batches, a publisher of
invalidations), a ratio alone cannot say whose work it measured: this
names every process that used at least 1% of the run's wall time, with
its threads by name, and how busy each core was. Thread CPU time comes
from /proc/<pid>/task/<tid>/schedstat (nanoseconds, as loadtest/idle.py),
the cores' from /proc/stat (ticks).
"""
import json
import os
import sys
import time

MIN_SHARE = 0.01


def comm(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "?"


def thread_ns(pid):
    """(tid, CPU nanoseconds) of every thread of process `pid` that can be
    read now (none when it is gone); loadtest/idle.py sums them."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                yield t, int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue


def snap():
    threads = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        name = comm(f"/proc/{p}/comm")
        for t, ns in thread_ns(p):
            threads[f"{p}/{t}"] = [name, comm(f"/proc/{p}/task/{t}/comm"), ns]
    cpus = {}
    with open("/proc/stat") as f:
        for line in f:
            parts = line.split()
            if parts and parts[0].startswith("cpu") and parts[0] != "cpu":
                ticks = [int(x) for x in parts[1:]]
                # idle and iowait are not busy.
                cpus[parts[0]] = [sum(ticks) - ticks[3] - ticks[4], sum(ticks)]
    return {"t": time.monotonic(), "threads": threads, "cpus": cpus}


def diff(a, b):
    wall = max(b["t"] - a["t"], 1e-9)
    procs = {}
    for key, (name, tname, ns) in b["threads"].items():
        before = a["threads"].get(key)
        spent = ns - (before[2] if before else 0)
        if spent <= 0:
            continue
        pid = key.split("/")[0]
        p = procs.setdefault(pid, {"comm": name, "pid": int(pid), "s": 0.0, "threads": {}})
        p["s"] += spent / 1e9
        p["threads"][tname] = p["threads"].get(tname, 0.0) + spent / 1e9
    top = sorted((p for p in procs.values() if p["s"] >= MIN_SHARE * wall), key=lambda p: -p["s"])
    for p in top:
        p["s"] = round(p["s"], 3)
        p["threads"] = {k: round(v, 3) for k, v in sorted(p["threads"].items(), key=lambda kv: -kv[1])
                        if v >= MIN_SHARE * wall}
    cores = {}
    for c, (busy, total) in b["cpus"].items():
        ob, ot = a["cpus"].get(c, (0, 0))
        cores[c] = round((busy - ob) / max(total - ot, 1), 3)
    return {"wall_s": round(wall, 3), "cores_busy": cores, "procs": top}


def main(argv):
    if len(argv) == 3 and argv[1] == "snap":
        with open(argv[2], "w") as f:
            json.dump(snap(), f)
        return 0
    if len(argv) == 4 and argv[1] == "diff":
        with open(argv[2]) as f:
            a = json.load(f)
        with open(argv[3]) as f:
            b = json.load(f)
        json.dump(diff(a, b), sys.stdout)
        print()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
