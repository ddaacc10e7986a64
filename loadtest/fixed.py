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
LOADTEST_CLOSE=1: a new connection for every request (`--disable-keepalive`;
over https a full TLS handshake each, timed with the request).
"""
import json
import os
import subprocess
import sys

from summary import print_summary, url_file

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
    urls = url_file(codes_file, work, base)
    cmd = cpu + [OHA, "--no-tui", "--output-format", "json", "--worker-threads", "1", "-z", f"{secs}s",
                 "-c", str(conns), "-q", str(rate), "--latency-correction", "--host", host, "--insecure",
                 "-r", "0", "-w", "--urls-from-file", urls]
    if os.environ.get("LOADTEST_CLOSE") == "1":
        # A new connection (over https, a full handshake) for every request.
        cmd.insert(cmd.index("--urls-from-file"), "--disable-keepalive")
    p = subprocess.run(cmd, capture_output=True, text=True)
    try:
        r = json.loads(p.stdout)
    except ValueError:
        print(f"oha failed ({p.returncode}): {p.stderr[-400:]} {p.stdout[-400:]}", file=sys.stderr)
        return 1
    s = r.get("summary", {})
    lp = r.get("latencyPercentiles", {})
    statuses = {int(k): v for k, v in (r.get("statusCodeDistribution") or {}).items()}
    ms = lambda v: (v or 0.0) * 1000.0
    print_summary(sum(statuses.values()), float(s.get("total") or float(secs)), statuses,
                  failed=sum((r.get("errorDistribution") or {}).values()),
                  latency_ms={"mean": ms(s.get("average")), "p50": ms(lp.get("p50")), "p90": ms(lp.get("p90")),
                              "p99": ms(lp.get("p99")), "p999": ms(lp.get("p99.9")), "max": ms(s.get("slowest"))},
                  target_rps=rate)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
