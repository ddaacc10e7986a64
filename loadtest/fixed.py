#!/usr/bin/env python3
"""Latency at a fixed rate, for loadtest/run (issue 30, item 4): `oha` (from
crates.io; loadtest/tools.sh installs a pinned version) sends RATE requests
a second over CONNS keep-alive connections, whatever the server does, and
corrects each latency for coordinated omission (`--latency-correction`: a
request is timed from when the schedule says it should have been sent, so a
stall is charged to every request it delayed, as a user would feel it).
The result is printed as the one-line JSON summary of the wrk scripts
(loadtest/common.lua), so the kit reports it like any other scenario.

  fixed.py SECS URL RATE CONNS CODES HOST WORKDIR [CPU...]

URL is the server's base (http://127.0.0.1:PORT/ or https://localhost:PORT/);
each request is GET /<code> for codes from CODES in random order, with
`Host: HOST`. CPU... (e.g. `taskset -c 1`) prefixes the oha command; oha
runs one worker thread (the load generator's core, as wrk -t1).
"""
import json
import os
import random
import subprocess
import sys

OHA = os.environ.get("OHA", "oha")


def main(argv):
    if len(argv) < 8:
        print(__doc__, file=sys.stderr)
        return 2
    secs, base, rate, conns, codes_file, host, work = argv[1], argv[2], int(argv[3]), argv[4], argv[5], \
        argv[6], argv[7]
    cpu = argv[8:]
    if rate <= 0:
        print("fixed.py: the rate must be positive", file=sys.stderr)
        return 2
    os.makedirs(work, exist_ok=True)
    codes = [c for c in open(codes_file).read().split() if c]
    random.shuffle(codes)
    urls = os.path.join(work, "urls.txt")
    with open(urls, "w") as f:
        for c in codes[:20000]:
            f.write(f"{base.rstrip('/')}/{c}\n")
    cmd = cpu + [OHA, "--no-tui", "--output-format", "json", "--worker-threads", "1", "-z", f"{secs}s",
                 "-c", str(conns), "-q", str(rate), "--latency-correction", "--host", host, "--insecure",
                 "-r", "0", "-w", "--urls-from-file", urls]
    p = subprocess.run(cmd, capture_output=True, text=True)
    try:
        r = json.loads(p.stdout)
    except ValueError:
        print(f"oha failed ({p.returncode}): {p.stderr[-400:]} {p.stdout[-400:]}", file=sys.stderr)
        return 1
    s = r.get("summary", {})
    lp = r.get("latencyPercentiles", {})
    codes_n = {int(k): v for k, v in (r.get("statusCodeDistribution") or {}).items()}
    errs = sum((r.get("errorDistribution") or {}).values())
    done = sum(codes_n.values())
    c = lambda lo, hi: sum(v for k, v in codes_n.items() if lo <= k < hi)
    ms = lambda v: (v or 0.0) * 1000.0
    total = float(s.get("total") or float(secs))
    print(json.dumps({
        "requests": done, "duration_s": round(total, 3), "rps": round(done / total, 1) if total else 0,
        "target_rps": rate,
        "errors": {"connect": 0, "read": 0, "write": 0, "timeout": errs, "status": c(400, 600)},
        "status": {"2xx": c(200, 300), "3xx": c(300, 400), "404": codes_n.get(404, 0), "429": codes_n.get(429, 0),
                   "5xx": c(500, 600), "other": c(400, 500) - codes_n.get(404, 0) - codes_n.get(429, 0)},
        "status_counted": True, "non_3xx": done - c(300, 400),
        "latency_ms": {"mean": round(ms(s.get("average")), 3), "p50": round(ms(lp.get("p50")), 3),
                       "p80": None, "p90": round(ms(lp.get("p90")), 3),
                       "p99": round(ms(lp.get("p99")), 3), "p999": round(ms(lp.get("p99.9")), 3),
                       "max": round(ms(s.get("slowest")), 3)},
    }, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
