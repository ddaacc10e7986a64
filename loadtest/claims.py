#!/usr/bin/env python3
"""MariaDB's raw durable single-row claim rate, for loadtest/run: runs
`shorturl-origin bench raw-claims` (CONNS connections, each claim one
transaction in one round trip: the link row inserted from the free code's
`code_pool` row, that row deleted; one redo-log flush per claim) against the kit's MariaDB and prints its result as the one-line
JSON summary of the wrk scripts (loadtest/common.lua): the anchor of
`create-origin`, creations through the origin's API (issue 30, item 2).

  claims.py SECS CONNS ORIGIN_BIN ORIGIN_CONF

No latency figures: the bench counts claims only (latency_ms all 0).
"""
import json
import subprocess
import sys

from summary import print_summary


def main(argv):
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    secs, conns, binary, conf = argv[1:]
    p = subprocess.run([binary, "-c", conf, "bench", "raw-claims", "--concurrency", conns, "--seconds", secs],
                       capture_output=True, text=True)
    try:
        r = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        print(f"raw-claims failed ({p.returncode}): {p.stderr[-400:]}", file=sys.stderr)
        return 1
    n = int(r["count"])
    print_summary(n, float(r["seconds"]), {200: n})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
