"""What the kit's non-wrk load generators share (loadtest/h2.py, fixed.py,
claims.py): the URL file they read, and the one-line JSON summary the wrk
scripts print (loadtest/common.lua), so report.py reads every tool's run
the same way."""
import json
import os
import random

# URLs per file: enough that requests spread over many codes, few enough
# that the file is written in a blink.
MAX_URLS = 20000


def url_file(codes_file, work, base):
    """A file of `base/<code>` lines, the codes of `codes_file` shuffled."""
    os.makedirs(work, exist_ok=True)
    codes = [c for c in open(codes_file).read().split() if c]
    random.shuffle(codes)
    path = os.path.join(work, "urls.txt")
    with open(path, "w") as f:
        for c in codes[:MAX_URLS]:
            f.write(f"{base.rstrip('/')}/{c}\n")
    return path


def print_summary(requests, duration_s, statuses, failed=0, latency_ms=None, **extra):
    """Prints the wrk-shaped summary. `statuses` maps an HTTP status (int) to
    its count; `failed` counts requests that got no answer; `latency_ms` has
    mean, p50, p80, p90, p99, p999, max (None: unknown, printed as 0)."""
    c = lambda lo, hi: sum(v for k, v in statuses.items() if lo <= k < hi)
    lat = {k: round((latency_ms or {}).get(k) or 0.0, 3) for k in ("mean", "p50", "p90", "p99", "p999", "max")}
    lat["p80"] = (latency_ms or {}).get("p80")
    out = {
        "requests": requests, "duration_s": round(duration_s, 3),
        "rps": round(requests / duration_s, 1) if duration_s else 0.0,
        "errors": {"connect": 0, "read": 0, "write": 0, "timeout": failed, "status": c(400, 600)},
        "status": {"2xx": c(200, 300), "3xx": c(300, 400), "404": statuses.get(404, 0), "429": statuses.get(429, 0),
                   "5xx": c(500, 600), "other": c(400, 500) - statuses.get(404, 0) - statuses.get(429, 0)},
        "status_counted": True, "non_3xx": requests - c(300, 400), "latency_ms": lat,
    }
    out.update(extra)
    print(json.dumps(out, separators=(",", ":")))
