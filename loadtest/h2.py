#!/usr/bin/env python3
"""HTTP/2 load for loadtest/run with h2load (Debian's nghttp2-client), its
result printed as the one-line JSON summary the wrk scripts print
(loadtest/common.lua), so the kit reports it like any other scenario.

  h2.py keepalive SECS PORT CONNS CODES HOST WORKDIR [CPU...]
  h2.py conn      SECS PORT CONNS CODES HOST WORKDIR [CPU...]

keepalive: CONNS connections, one stream in flight per connection (-m 1:
the same 64 outstanding requests as wrk -c64), in count-based batches
sized to fill SECS seconds (the first makes 1,000 requests per connection,
the next ones as many as the rate so far fits in the time left). Not -D:
h2load 1.52's timing-based mode holds each connection to 500 requests a
second (exactly 32,000 req/s at -c64 against a server that does 70,000).
conn: batches of CONNS new connections (a full TLS handshake each) that
make PER_CONN requests each and close, batch after batch for SECS seconds;
the rate is requests over the batches' own time (h2load's "finished in"),
so the gap between batches (process start) counts for nobody.

h2load gives no percentiles: they come from its per-request log
(--log-file: start, status, microseconds to the end of the response).
CPU... (e.g. `taskset -c 1`) prefixes the h2load command.
"""
import os
import re
import subprocess
import sys
import time

from summary import print_summary, url_file

PER_CONN = 10


def percentile(sorted_us, p):
    if not sorted_us:
        return 0.0
    i = min(len(sorted_us) - 1, max(0, int(round(p / 100.0 * len(sorted_us) + 0.5)) - 1))
    return sorted_us[i] / 1000.0


def parse(out):
    """(seconds, requests done, failed+errored+timeout, {class: count}) of one h2load run."""
    fin = re.search(r"finished in ([0-9.]+)(ms|s)", out)
    req = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                    r"(\d+) errored, (\d+) timeout", out)
    st = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if not (fin and req and st):
        raise ValueError("h2load printed no summary:\n" + out[-800:])
    secs = float(fin.group(1)) / (1000.0 if fin.group(2) == "ms" else 1.0)
    done = int(req.group(3))
    bad = int(req.group(5)) + int(req.group(6)) + int(req.group(7))
    codes = dict(zip(("2xx", "3xx", "4xx", "5xx"), (int(x) for x in st.groups())))
    return secs, done, bad, codes


def main(argv):
    if len(argv) < 8 or argv[1] not in ("keepalive", "conn"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, secs, port, conns, codes_file, host, work = argv[1], float(argv[2]), argv[3], int(argv[4]), \
        argv[5], argv[6], argv[7]
    cpu = argv[8:]
    uris = url_file(codes_file, work, f"https://localhost:{port}")
    base = cpu + ["h2load", "-t", "1", "-m", "1", "-c", str(conns), "-i", uris, "-H", f":authority: {host}"]
    total_s, done, bad = 0.0, 0, 0
    codes_n = {"2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0}
    logs = []
    deadline = time.monotonic() + secs
    batch = 0
    while True:
        log = os.path.join(work, f"h2load-{batch}.log")
        if mode == "keepalive":
            left = deadline - time.monotonic()
            per = 1000 if not total_s else max(1000, int(done / total_s * left / conns))
            cmd = base + ["-n", str(conns * per), "--log-file", log]
        else:
            cmd = base + ["-n", str(conns * PER_CONN), "--log-file", log]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0 and "finished in" not in p.stdout:
            print(f"h2load failed ({p.returncode}): {p.stderr[-400:]}", file=sys.stderr)
            return 1
        s, d, b, c = parse(p.stdout)
        total_s, done, bad = total_s + s, done + d, bad + b
        for k in codes_n:
            codes_n[k] += c[k]
        logs.append(log)
        batch += 1
        if time.monotonic() >= deadline - (0.2 if mode == "keepalive" else 0.0):
            break
    lat = []
    for log in logs:
        with open(log) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3:
                    lat.append(int(parts[2]))
        os.remove(log)
    lat.sort()
    mean = sum(lat) / len(lat) / 1000.0 if lat else 0.0
    # h2load counts status classes only: one status per class stands for it.
    statuses = {200: codes_n["2xx"], 302: codes_n["3xx"], 400: codes_n["4xx"], 500: codes_n["5xx"]}
    print_summary(done, total_s, statuses, failed=bad, batches=batch,
                  latency_ms={"mean": mean, "p50": percentile(lat, 50), "p80": percentile(lat, 80),
                              "p90": percentile(lat, 90), "p99": percentile(lat, 99),
                              "p999": percentile(lat, 99.9), "max": (lat[-1] / 1000.0) if lat else 0.0})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
