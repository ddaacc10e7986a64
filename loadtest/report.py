#!/usr/bin/env python3
"""Aggregation for loadtest/run: per-scenario checks, targets, the results
JSON, the markdown table and the SVG chart. Standard library only.

  report.py line DIR              one-line summary of a finished scenario
  report.py warm BEFORE AFTER N   exit 0 when a warm-up pass was answered from memory only
  report.py missed RUN            names of scenarios that missed a target (to profile)
  report.py pair S TARGET ANCHOR N  after N interleaved rounds: the median round becomes the
                                  scenario's figures, pair.json the per-round ratios
  report.py final RUN OUT TS      results/<TS>.json, latest.{json,md,svg}; exit 1 if a scenario failed
"""
import json
import math
import os
import shutil
import statistics
import sys

ORDER = ["nginx-static", "edge-hot", "edge-hot-browser", "edge-hot-inval", "edge-hot-pub", "edge-hot-rules", "edge-hot-slowpath", "edge-hot-analytics",
         "edge-hot-analytics-browser", "edge-hot-analytics-nodims", "openresty-hot", "edge-redis", "openresty-redis",
         "edge-redis-cluster", "edge-origin", "miss-storm", "mix", "create", "raw-claims", "create-origin", "create-redis", "create-zookeeper", "create-cluster",
         "nginx-static-tls", "edge-hot-tls", "nginx-tls-handshake", "edge-tls-handshake",
         "nginx-h2", "edge-h2", "nginx-h2-conn", "edge-h2-conn",
         "fixed-nginx", "fixed-edge-hot", "fixed-openresty", "fixed-nginx-tls", "fixed-edge-hot-tls", "fixed-nginx-tls-handshake", "fixed-edge-tls-handshake",
         "nginx-qr-static", "qr-hot"]
WHAT = {
    "nginx-static": "nginx `return 302` (anchor)",
    "edge-hot": "edge, every code in memory, click counting off",
    "edge-hot-browser": "edge-hot with edge-hot-rules' browser headers (the anchor that isolates the rules' cost)",
    "edge-hot-inval": "edge-hot while 20,000 invalidation messages a second arrive (codes outside the run's links, each applied)",
    "edge-hot-pub": "edge-hot while the same messages are published on a channel no edge hears (the publishing's cost to the machine)",
    "edge-hot-rules": "edge-hot on links with five rules (the last, country, answers), a browser's headers behind a trusted proxy",
    "edge-hot-slowpath": "edge-hot with the fast path off (every request through a Pingora proxy session)",
    "edge-hot-analytics": "edge-hot with click counting on (the cost of counting)",
    "edge-hot-analytics-browser": "edge-hot-browser with click counting on: human clicks with their dimensions and unique visitors",
    "edge-hot-analytics-nodims": "edge-hot-analytics-browser with clicks.dimensions off",
    "openresty-hot": "OpenResty edge, LRU/shared dict hit",
    "edge-redis": "edge, Redis GET per request",
    "edge-redis-cluster": "edge-redis on a Redis Cluster (3 masters + 3 replicas, --redis cluster)",
    "create-cluster": "create with the origin and the edge on a Redis Cluster (--redis cluster)",
    "create-redis": "create with the issuer's counter in Redis (--issuer zookeeper)",
    "create-zookeeper": "create with the issuer's counter in ZooKeeper (--issuer zookeeper)",
    "openresty-redis": "OpenResty edge, Redis GET per request",
    "edge-origin": "edge → origin → MySQL per request",
    "miss-storm": "edge, unknown codes (404)",
    "mix": "edge, 95% GET / 5% create",
    "create": "edge → origin, POST create",
    "raw-claims": "MariaDB's raw durable single-row claims (`shorturl-origin bench raw-claims`, one flush each; the anchor of create-origin)",
    "create-origin": "POST create straight to the origin (no edge), next to raw-claims",
    "nginx-static-tls": "nginx `return 302` over TLS, keep-alive (TLS anchor)",
    "edge-hot-tls": "edge over TLS, keep-alive, every code in memory",
    "nginx-tls-handshake": "nginx `return 302` over TLS, new connection per request (handshake anchor)",
    "edge-tls-handshake": "edge over TLS, new connection per request",
    "nginx-h2": "nginx `return 302` over HTTP/2 (TLS, ALPN h2), keep-alive, h2load -m1 (HTTP/2 anchor)",
    "edge-h2": "edge over HTTP/2, keep-alive, h2load -m1",
    "nginx-h2-conn": "nginx over HTTP/2, a new connection (full handshake) per 10 requests",
    "edge-h2-conn": "edge over HTTP/2, a new connection (full handshake) per 10 requests",
    "fixed-nginx": "nginx `return 302` at a fixed rate (a share of nginx-static's), latency corrected for coordinated omission",
    "fixed-edge-hot": "edge-hot at the same fixed rate, corrected latency",
    "fixed-openresty": "OpenResty edge (memory hit) at the same fixed rate, corrected latency",
    "fixed-nginx-tls": "nginx over TLS at the same fixed rate, corrected latency",
    "fixed-edge-hot-tls": "edge over TLS at the same fixed rate, corrected latency",
    "fixed-nginx-tls-handshake": "nginx over TLS, a new connection per request, at a fixed share of nginx-tls-handshake's rate (oha times the handshake with the request)",
    "fixed-edge-tls-handshake": "edge over TLS, a new connection per request, at the same fixed rate",
    "nginx-qr-static": "nginx serving the same QR PNGs as static files (QR anchor)",
    "qr-hot": "edge, QR code PNGs from its page cache (pingora-cache)",
}
SOCKET = ("connect", "read", "write", "timeout")


def read_kv(path):
    out = {}
    if os.path.exists(path):
        for line in open(path):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                out[k] = v
    return out


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def dig(d, *keys):
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def delta(before, after, *keys):
    a, b = dig(after, *keys), dig(before, *keys)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a - b
    return None


def load_scenario(d):
    meta = read_kv(os.path.join(d, "meta"))
    s = {"name": meta.get("name", os.path.basename(d)), "system": meta.get("system", "?"),
         "anchor": meta.get("anchor"), "tool": meta.get("tool", "wrk"),
         "mode": f"interleaved ×{meta['rounds']}" if meta.get("mode") == "interleaved" else "sequential",
         "idle_wait_s": meta.get("idle_wait_s"), "fixed_rate": meta.get("fixed_rate")}
    pj = read_json(os.path.join(d, "pair.json"))
    if pj:
        s["pair"] = pj
    notes = []
    if os.path.exists(os.path.join(d, "notes")):
        notes = [l.strip() for l in open(os.path.join(d, "notes")) if l.strip()]
    if "skipped" in meta:
        s.update(skipped=meta["skipped"], rps=None, p50_ms=None, p99_ms=None, p999_ms=None,
                 errors=None, ratio_to_nginx=None, ok=True, problems=[], notes=notes)
        return s
    w = read_json(os.path.join(d, "wrk.json"))
    problems = []
    if not isinstance(w, dict) or "requests" not in w:
        err = ""
        if os.path.exists(os.path.join(d, "wrk.err")):
            err = open(os.path.join(d, "wrk.err")).read().strip()[-300:]
        s.update(rps=None, p50_ms=None, p99_ms=None, p999_ms=None, errors=None, ratio_to_nginx=None,
                 ok=False, problems=["wrk produced no JSON summary " + err], notes=notes)
        return s
    lat = w["latency_ms"]
    st = w["status"]
    req = w["requests"]
    sock = sum(w["errors"][k] for k in SOCKET)
    expect = meta.get("expect", "3xx")
    # Unexpected answers, by what this scenario must answer.
    if expect == "3xx":
        unexpected = w["non_3xx"]
    elif expect == "2xx":
        # Uncounted (LOADTEST_STATUS=0): wrk's own count of answers >= 400.
        unexpected = req - st["2xx"] if w.get("status_counted") else w["errors"]["status"]
    elif expect == "404":
        unexpected = req - st["404"]
    else:  # mix: redirects and creations, and both must have happened
        unexpected = req - st["2xx"] - st["3xx"]
        if req and (st["2xx"] == 0 or st["3xx"] == 0):
            problems.append(f"mix without both kinds: 2xx={st['2xx']} 3xx={st['3xx']}")
    if req == 0:
        problems.append("no requests completed")
    if sock:
        problems.append("socket errors: " + ", ".join(f"{k} {w['errors'][k]}" for k in SOCKET if w["errors"][k]))
    if unexpected:
        detail = ", ".join(f"{k} {v}" for k, v in st.items() if v) if w.get("status_counted") else \
            f"{w['errors']['status']} responses >= 400"
        problems.append(f"{unexpected} answers other than {expect} ({detail})")
    dur = w["duration_s"] or float(meta.get("duration_s", 1))
    s.update(
        rps=round(w["rps"], 1), p50_ms=lat["p50"], p99_ms=lat["p99"], p999_ms=lat["p999"],
        errors=sock + unexpected, ratio_to_nginx=None,
        mean_ms=lat["mean"], p80_ms=lat["p80"], p90_ms=lat["p90"], max_ms=lat["max"],
        requests=req, duration_s=dur, expect=expect, socket_errors={k: w["errors"][k] for k in SOCKET},
        status=st if w.get("status_counted") else {"counted": False, ">=400": w["errors"]["status"]},
        load1_at_start=float(meta["load1"]) if meta.get("load1") else None,
    )
    if s["name"] in ("create", "create-cluster", "create-redis", "create-zookeeper", "create-origin"):
        s["created_per_s"] = round(st["2xx"] / dur, 1)
    # Which path answered: deltas of the server's and the origin's status.
    sb, sa = read_json(os.path.join(d, "status-before.json")), read_json(os.path.join(d, "status-after.json"))
    ob, oa = read_json(os.path.join(d, "origin-before.json")), read_json(os.path.join(d, "origin-after.json"))
    path = {}
    if sb and sa:
        for dim, k in (("local", "hit"), ("local", "miss"), ("redis", "hit"), ("redis", "miss"), ("redis", "error"),
                       ("origin", "forward"), ("origin", "error"), ("lock", "get")):
            v = delta(sb, sa, dim, k)
            if v is not None:
                path[f"{s['system']}.{dim}.{k}"] = v
    if ob and oa:
        for dim, k in (("redis", "hit"), ("redis", "miss"), ("mysql", "select"), ("mysql", "update"), ("lock", "get")):
            v = delta(ob, oa, dim, k)
            if v is not None:
                path[f"origin.{dim}.{k}"] = v
    s["path"] = path
    # Path sanity (warnings: the scenario may not measure what its name says).
    # The counters include the unmeasured seconds around the run, so compare
    # in ratios, not exactly.
    g = lambda k: path.get(f"{s['system']}.{k}")
    if req and path:
        if s["name"] in ("edge-hot", "edge-hot-browser", "edge-hot-inval", "edge-hot-rules", "openresty-hot") and (g("redis.hit") or 0) + (g("origin.forward") or 0) > 0.001 * req:
            notes.append(f"WARNING: not all from memory: {g('redis.hit')} Redis hits, {g('origin.forward')} origin fetches")
        if s["system"] == "edge" and s["name"].startswith("edge-hot"):
            fast = delta(sb, sa, "fast_path", "hit")
            notes.append(f"fast path answered {fast} of {req} requests, handed over "
                         f"{delta(sb, sa, 'fast_path', 'handover')}")
            if s["name"] == "edge-hot-slowpath" and fast:
                problems.append(f"the fast path is off but answered {fast} requests")
        if s["name"].startswith("edge-hot-analytics"):
            counted = delta(sb, sa, "clicks", "counted")
            dropped = delta(sb, sa, "clicks", "dropped")
            notes.append(f"clicks counted {counted} for {req} requests (the count lags by one 100 ms "
                         f"drain), dropped {dropped}, buffered at the end {dig(sa, 'clicks', 'buffered')}")
            if not counted:
                problems.append("click counting is on but nothing was counted")
            if dropped:
                problems.append(f"{dropped} clicks dropped")
        elif s["system"] == "edge" and dig(sa, "clicks", "enabled"):
            notes.append("WARNING: click counting was on (only edge-hot-analytics should count)")
        if s["name"] in ("edge-redis", "openresty-redis", "edge-redis-cluster"):
            lh = g("local.hit") or 0
            notes.append(f"memory hits {lh} of {req} requests ({100.0 * lh / req:.2f}%), Redis hits {g('redis.hit')}")
        if s["name"] == "edge-origin":
            sel = path.get("origin.mysql.select")
            notes.append(f"origin MySQL SELECTs {sel} for {req} requests; edge memory hits {g('local.hit')}")
            if sel is not None and sel < 0.9 * req:
                notes.append("WARNING: fewer MySQL SELECTs than requests: not every request reached MySQL")
    cpu = read_json(os.path.join(d, "cpu.json"))
    if isinstance(cpu, dict) and cpu.get("procs") is not None:
        s["cpu"] = cpu
        s["server_cpu_s"] = server_cpu_s(cpu, s["system"])
        notes.append(cpu_note(cpu))
    s.update(ok=not problems, problems=problems, notes=notes)
    if s["name"] == "miss-storm":
        s["distinct_codes"] = int(meta.get("distinct_codes", 0))
        s["neg_ttl_s"] = int(meta.get("neg_ttl_s", 5))
        s["origin_negative_ttl_s"] = int(meta.get("origin_negative_ttl_s", 60))
    return s


SERVER_COMMS = {"edge": ("shorturl-edge",), "nginx": ("nginx",), "openresty": ("nginx", "openresty")}


def server_cpu_s(cpu, system):
    """CPU seconds the measured system's processes used during the run (None
    when the system is not a server the kit knows by name)."""
    comms = SERVER_COMMS.get(system)
    if not comms:
        return None
    return round(sum(p["s"] for p in cpu["procs"] if p["comm"] in comms), 3) or None


def cpu_note(cpu):
    """One line of loadtest/cpu.py's figures: each core's busy share, then
    the processes that used CPU during the run with their busiest threads
    (wrk itself has exited before the second look: its core's share shows it)."""
    cores = ", ".join(f"{c} {100 * v:.0f}%" for c, v in sorted(cpu.get("cores_busy", {}).items()))
    procs = []
    for p in cpu["procs"][:6]:
        threads = ", ".join(f"{t} {v:.2f}" for t, v in list(p["threads"].items())[:3])
        procs.append(f"{p['comm']} {p['s']:.2f}" + (f" ({threads})" if len(p["threads"]) > 1 else ""))
    return f"CPU over {cpu['wall_s']:.1f} s: cores busy {cores}; CPU seconds: {'; '.join(procs) or 'none'}"


def fmt_num(v, nd=0):
    if v is None:
        return "–"
    return f"{v:,.{nd}f}"


def line(d):
    s = load_scenario(d)
    if s.get("rps") is None:
        print(f"{s['name']:16} FAILED: {'; '.join(s['problems'])}", file=sys.stderr)
        return 0
    flag = "ok" if s["ok"] else "PROBLEM: " + "; ".join(s["problems"])
    print(f"{s['name']:16} {s['system']:9} {fmt_num(s['rps']):>10} req/s  p50 {s['p50_ms']:.3f}  "
          f"p99 {s['p99_ms']:.3f}  p99.9 {s['p999_ms']:.3f} ms  errors {s['errors']}  {flag}", file=sys.stderr)
    return 0


def warm(before, after, n):
    b, a = json.loads(before or "{}"), json.loads(after or "{}")
    lookups = sum(delta(b, a, *k) or 0 for k in (("redis", "hit"), ("redis", "miss"), ("redis", "error"),
                                                 ("origin", "forward")))
    hits = delta(b, a, "local", "hit") or 0
    # A pass that covered every code and needed no lookup at all.
    if hits >= int(n) and lookups == 0:
        return 0
    print(f"{hits} memory hits, {lookups} lookups (Redis/origin)", file=sys.stderr)
    return 1


def by_name(scenarios):
    return {s["name"]: s for s in scenarios}


def targets(scenarios, cfg):
    """Target 5 of the issue: compared in every run, never asserted."""
    m = by_name(scenarios)
    out = []

    def ran(n):
        s = m.get(n)
        return s if s and s.get("rps") is not None else None

    def add(name, scen, measured, goal, met, why=""):
        out.append({"target": name, "scenario": scen, "measured": measured, "goal": goal,
                    "met": met, "note": why})

    def rel(t, a, key="rps"):
        """(ratio, text) of scenario t to a: the median of the interleaved
        rounds when t was paired with a, else the two single figures."""
        p = paired_ratio(t, a["name"])
        if p and key == "rps":
            return p["ratio_median"], (f"{p['ratio_median']:.3f}× (median of {p['n']} interleaved rounds, "
                                       f"{p['ratio_min']:.3f}–{p['ratio_max']:.3f})")
        if p and key == "p99" and p.get("p99_ratio_median") is not None:
            return p["p99_ratio_median"], (f"{p['p99_ratio_median']:.3f}× (median of {p['n']} interleaved rounds, "
                                           f"{p['p99_ratio_min']:.3f}–{p['p99_ratio_max']:.3f})")
        k = "rps" if key == "rps" else "p99_ms"
        if not a.get(k):
            return None, "–"
        r = t[k] / a[k]
        # Two figures from separate runs (sequential mode, or scenarios of
        # different pairs): not a paired ratio.
        return r, f"{r:.3f}× (unpaired: one run against one)"

    nginx, hot = ran("nginx-static"), ran("edge-hot")
    if nginx and hot:
        r, txt = rel(hot, nginx)
        add("edge-hot ≥ 1.0× nginx static", "edge-hot", txt, "≥ 1.00×", r >= 1.0,
            f"{hot['rps']:,.0f} vs {nginx['rps']:,.0f} req/s")
    else:
        add("edge-hot ≥ 1.0× nginx static", "edge-hot", "–", "≥ 1.00×", None, "not run")
    slow = ran("edge-hot-slowpath")
    if hot and slow:
        r = hot["rps"] / slow["rps"]
        add("edge-hot (fast path) vs edge-hot-slowpath", "edge-hot", f"{r:.2f}×", "> 1.00×", r > 1.0,
            f"{hot['rps']:,.0f} vs {slow['rps']:,.0f} req/s; p99 {hot['p99_ms']:.3f} vs {slow['p99_ms']:.3f} ms")
    else:
        add("edge-hot (fast path) vs edge-hot-slowpath", "edge-hot", "–", "> 1.00×", None, "not run")
    ru = ran("edge-hot-rules")
    if hot and ru:
        r, txt = rel(ru, hot)
        add("edge-hot-rules ≥ 0.90× edge-hot req/s", "edge-hot-rules", txt, "≥ 0.90×", r >= 0.90,
            f"{ru['rps']:,.0f} vs {hot['rps']:,.0f} req/s; p99 {ru['p99_ms']:.3f} vs {hot['p99_ms']:.3f} ms")
    else:
        add("edge-hot-rules ≥ 0.90× edge-hot req/s", "edge-hot-rules", "–", "≥ 0.90×", None, "not run")
    iv = ran("edge-hot-inval")
    if hot and iv:
        r, txt = rel(iv, hot)
        add("edge-hot-inval ≥ 0.95× edge-hot req/s", "edge-hot-inval", txt, "≥ 0.95×", r >= 0.95,
            f"{iv['rps']:,.0f} vs {hot['rps']:,.0f} req/s; p99 {iv['p99_ms']:.3f} vs {hot['p99_ms']:.3f} ms")
    pb = ran("edge-hot-pub")
    if iv and pb:
        r, txt = rel(iv, pb)
        add("edge-hot-inval vs edge-hot-pub (the same publishing unheard: the edge's own share)", "edge-hot-inval", txt,
            "≥ 0.95×", r >= 0.95, f"{iv['rps']:,.0f} vs {pb['rps']:,.0f} req/s; p99 {iv['p99_ms']:.3f} vs {pb['p99_ms']:.3f} ms")
    br = ran("edge-hot-browser")
    if br and ru:
        r, txt = rel(ru, br)
        add("edge-hot-rules vs edge-hot-browser (same headers: the rules alone)", "edge-hot-rules", txt, "≥ 0.90×",
            r >= 0.90, f"{ru['rps']:,.0f} vs {br['rps']:,.0f} req/s; p99 {ru['p99_ms']:.3f} vs {br['p99_ms']:.3f} ms")
    for e, n, goal in (("edge-h2", "nginx-h2", 0.9), ("edge-h2-conn", "nginx-h2-conn", 0.9)):
        es, ns = ran(e), ran(n)
        if es and ns:
            r, txt = rel(es, ns)
            add(f"{e} ≥ {goal:.2f}× {n} req/s", e, txt, f"≥ {goal:.2f}×", r >= goal,
                f"{es['rps']:,.0f} vs {ns['rps']:,.0f} req/s; p99 {es['p99_ms']:.3f} vs {ns['p99_ms']:.3f} ms")
        elif m.get(e) or m.get(n):
            add(f"{e} ≥ {goal:.2f}× {n} req/s", e, "–", f"≥ {goal:.2f}×", None, "not run")
    hs, nh = ran("edge-tls-handshake"), ran("nginx-tls-handshake")
    if hs and nh:
        r, txt = rel(hs, nh, "p99")
        add("edge-tls-handshake p99 ≤ 1.5× nginx's", "edge-tls-handshake", txt, "≤ 1.50×",
            (r <= 1.5) if r is not None else None, f"p99 {hs['p99_ms']:.3f} vs {nh['p99_ms']:.3f} ms")
    for e, n, goal in (("fixed-edge-hot", "fixed-nginx", 1.2), ("fixed-edge-hot-tls", "fixed-nginx-tls", 1.2),
                       ("fixed-edge-tls-handshake", "fixed-nginx-tls-handshake", 1.5),
                       ("fixed-openresty", "fixed-nginx", None)):
        es, ns = ran(e), ran(n)
        if es and ns:
            r, txt = rel(es, ns, "p99")
            why = (f"at {es.get('fixed_rate') or '?'} req/s: p50/p99/p99.9 {es['p50_ms']:.3f}/{es['p99_ms']:.3f}/"
                   f"{es['p999_ms']:.3f} vs {ns['p50_ms']:.3f}/{ns['p99_ms']:.3f}/{ns['p999_ms']:.3f} ms")
            add(f"{e} p99 at a fixed rate" + (f" ≤ {goal:.1f}× {n}'s" if goal else f" (vs {n}, reported)"), e, txt,
                f"≤ {goal:.2f}×" if goal else "–", ((r <= goal) if r is not None else None) if goal else None, why)
    # Issue 27: counting costs at most 3% of the rate and 20% of the p99,
    # bots' clicks against edge-hot, people's (dimensions, visitors)
    # against edge-hot-browser.
    hb = ran("edge-hot-browser")
    for name, anchor, what in (("edge-hot-analytics", hot, "bots' clicks"),
                               ("edge-hot-analytics-browser", hb, "people's clicks with dimensions"),
                               ("edge-hot-analytics-nodims", hb, "people's clicks without dimensions")):
        x = ran(name)
        if not (x and anchor):
            add(f"{name} ≥ 0.97× {'edge-hot' if anchor is hot else 'edge-hot-browser'} req/s", name, "–",
                "≥ 0.97×", None, "not run")
            continue
        r, txt = rel(x, anchor)
        add(f"{name} ≥ 0.97× {anchor['name']} req/s ({what})", name, txt, "≥ 0.97×", r >= 0.97,
            f"{x['rps']:,.0f} vs {anchor['rps']:,.0f} req/s")
        p, txt = rel(x, anchor, "p99")
        add(f"{name} p99 ≤ 1.2× {anchor['name']}'s", name, txt, "≤ 1.20×",
            (p <= 1.20) if p is not None else None, f"{x['p99_ms']:.3f} vs {anchor['p99_ms']:.3f} ms")
    er, orr = ran("edge-redis"), ran("openresty-redis")
    if er and orr:
        r = er["rps"] / orr["rps"]
        add("edge-redis ≥ 1.5× OpenResty Redis path", "edge-redis", f"{r:.2f}×", "≥ 1.50×", r >= 1.5)
    else:
        why = (m.get("openresty-redis") or {}).get("skipped") or "not run"
        add("edge-redis ≥ 1.5× OpenResty Redis path", "edge-redis", "–", "≥ 1.50×", None, why)
    if hot:
        c = cfg.get("connections", "64")
        add(f"edge-hot p99 < 1 ms (at {c} connections)", "edge-hot", f"{hot['p99_ms']:.3f} ms", "< 1 ms",
            hot["p99_ms"] < 1.0, "" if str(c) == "64" else "measured at a non-default connection count")
    else:
        add("edge-hot p99 < 1 ms", "edge-hot", "–", "< 1 ms", None, "not run")
    cr = ran("create")
    if cr:
        v = cr.get("created_per_s", cr["rps"])
        add("create ≥ 10,000 links/s", "create", f"{v:,.0f}/s", "≥ 10,000/s", v >= 10000)
    else:
        add("create ≥ 10,000 links/s", "create", "–", "≥ 10,000/s", None, "not run")
    co, rc = ran("create-origin"), ran("raw-claims")
    if co and rc:
        r, txt = rel(co, rc)
        add("create-origin ≥ 1.0× MariaDB's raw single-row claims", "create-origin", txt, "≥ 1.00×", r >= 1.0,
            f"{co.get('created_per_s', co['rps']):,.0f} creations/s vs {rc['rps']:,.0f} raw claims/s")
    ms = ran("miss-storm")
    if ms and ms.get("path"):
        fwd = ms["path"].get("edge.origin.forward")
        sel = ms["path"].get("origin.mysql.select")
        dcount, ttl, dur = ms["distinct_codes"], ms["neg_ttl_s"], ms["duration_s"]
        # Each distinct code may reach the origin once per negative-TTL window.
        bound = dcount * (math.floor(dur / ttl) + 1)
        why = (f"{dcount} distinct codes, {dur:.0f} s, edge negative TTL {ttl} s → bound {bound:,}; "
               f"origin MySQL SELECTs {sel} (origin negative TTL {ms['origin_negative_ttl_s']} s → bound "
               f"{dcount * (math.floor(dur / ms['origin_negative_ttl_s']) + 1):,}), "
               f"origin Redis hits {ms['path'].get('origin.redis.hit')}")
        add("miss-storm: ≤ 1 origin fetch per distinct code per negative-TTL window", "miss-storm",
            f"{fwd:,} origin fetches" if fwd is not None else "–", f"≤ {bound:,}",
            (fwd <= bound) if fwd is not None else None, why)
    else:
        add("miss-storm: ≤ 1 origin fetch per distinct code per negative-TTL window", "miss-storm", "–", "", None,
            "not run")
    return out


ROUND_FILES = ("wrk.json", "wrk.txt", "wrk.err", "status-before.json", "status-after.json",
               "origin-before.json", "origin-after.json", "notes", "cpu.json")


def adopt(src, dst, extra):
    """A round's files become a scenario's figures (meta gets `extra`)."""
    os.makedirs(dst, exist_ok=True)
    for f in ROUND_FILES:
        if os.path.exists(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), os.path.join(dst, f))
    with open(os.path.join(dst, "meta"), "w") as out:
        out.write(open(os.path.join(src, "meta")).read())
        for k, v in extra.items():
            out.write(f"{k}={v}\n")


def pair(sdir, t, a, n):
    """After n interleaved rounds of t and its anchor a: the per-round ratios
    (req/s, and p99 — the one that matters at a fixed rate), their median
    and spread in pair.json; the round whose req/s ratio (at a fixed rate:
    p99 ratio) is the median (the lower of the two middle ones for even n)
    gives the scenario's figures, and the anchor's too when no other run
    measured it."""
    n = int(n)
    rows = []
    for i in range(1, n + 1):
        rt = load_scenario(os.path.join(sdir, t, "rounds", str(i), t))
        ra = load_scenario(os.path.join(sdir, t, "rounds", str(i), a))
        ok = rt.get("rps") and ra.get("rps")
        rows.append({"round": i, "first": a if i % 2 else t,
                     t: {k: rt.get(k) for k in ("rps", "p50_ms", "p99_ms", "p999_ms", "errors", "idle_wait_s", "server_cpu_s")},
                     a: {k: ra.get(k) for k in ("rps", "p50_ms", "p99_ms", "p999_ms", "errors", "idle_wait_s", "server_cpu_s")},
                     "ratio": round(rt["rps"] / ra["rps"], 4) if ok else None,
                     # Requests per CPU second of the server: its cost per
                     # request, whatever starved or fed the load generator.
                     "cpu_ratio": round((rt["rps"] / rt["server_cpu_s"]) / (ra["rps"] / ra["server_cpu_s"]), 4)
                     if ok and rt.get("server_cpu_s") and ra.get("server_cpu_s") else None,
                     "p99_ratio": round(rt["p99_ms"] / ra["p99_ms"], 4) if ok and ra["p99_ms"] else None,
                     "ok": bool(rt.get("ok") and ra.get("ok"))})
    good = [r for r in rows if r["ratio"] is not None]
    res = {"target": t, "anchor": a, "rounds": rows, "n": n}
    # At a fixed rate both serve the rate: the round that stands for the
    # pair is the one whose p99 ratio is the median.
    fixed = read_kv(os.path.join(sdir, t, "rounds", "1", t, "meta")).get("tool") == "fixed"
    if fixed and all(r["p99_ratio"] is not None for r in good):
        res["median_round_by"] = "p99"
    if good:
        by = sorted(good, key=lambda r: r["p99_ratio"] if res.get("median_round_by") else r["ratio"])
        mid = by[(len(by) - 1) // 2]
        p99s = [r["p99_ratio"] for r in good if r["p99_ratio"] is not None]
        cpus = [r["cpu_ratio"] for r in good if r.get("cpu_ratio") is not None]
        if cpus:
            res.update(cpu_ratio_median=round(statistics.median(cpus), 4), cpu_ratio_min=min(cpus),
                       cpu_ratio_max=max(cpus))
        ratios = [r["ratio"] for r in good]
        res.update(ratio_median=round(statistics.median(ratios), 4),
                   ratio_min=min(ratios), ratio_max=max(ratios), median_round=mid["round"],
                   p99_ratio_median=round(statistics.median(p99s), 4) if p99s else None,
                   p99_ratio_min=min(p99s) if p99s else None, p99_ratio_max=max(p99s) if p99s else None)
        k = str(mid["round"])
    else:
        k = "1"
    extra = {"mode": "interleaved", "rounds": n, "median_round": k}
    adopt(os.path.join(sdir, t, "rounds", k, t), os.path.join(sdir, t), extra)
    # Every round's own problems count (a wrong answer in any round fails the scenario).
    bad = [f"round {r['round']}" for r in rows if not r["ok"]]
    if bad:
        with open(os.path.join(sdir, t, "notes"), "a") as f:
            f.write(f"PROBLEM in {', '.join(bad)} (see rounds/)\n")
        res["problem_rounds"] = bad
    if not os.path.exists(os.path.join(sdir, a, "meta")):
        adopt(os.path.join(sdir, t, "rounds", k, a), os.path.join(sdir, a), dict(extra, paired_with=t))
    with open(os.path.join(sdir, t, "pair.json"), "w") as f:
        json.dump(res, f, indent=1)
    if good:
        print(f"{t:16} vs {a}: {n} interleaved rounds, req/s ratio median {res['ratio_median']:.3f} "
              f"(min {res['ratio_min']:.3f}, max {res['ratio_max']:.3f}), p99 ratio median "
              f"{res['p99_ratio_median'] if res['p99_ratio_median'] is not None else '–'}, per server CPU second "
              f"{res.get('cpu_ratio_median', '–')}", file=sys.stderr)
    else:
        print(f"{t:16} vs {a}: FAILED in every round", file=sys.stderr)
    return 0


def paired_ratio(s, anchor):
    """The median interleaved ratio of s to anchor (req/s, or p99 with
    key="p99"), or None when s was not paired with that anchor."""
    p = s.get("pair") if s else None
    if p and p.get("anchor") == anchor and p.get("ratio_median") is not None:
        return p
    return None


def load_all(run):
    sdir = os.path.join(run, "s")
    names = os.listdir(sdir) if os.path.isdir(sdir) else []
    names.sort(key=lambda n: (ORDER.index(n) if n in ORDER else 99, n))
    scenarios = [load_scenario(os.path.join(sdir, n)) for n in names]
    named = by_name(scenarios)
    for s in scenarios:
        # Each scenario is compared with its own nginx anchor (meta `anchor`,
        # default nginx-static): TLS ones with nginx over TLS.
        s["anchor"] = s.get("anchor") or "nginx-static"
        a = named.get(s["anchor"])
        base = a["rps"] if a and a.get("rps") else None
        p = paired_ratio(s, s["anchor"])
        if p:
            s["ratio_to_nginx"] = round(p["ratio_median"], 3)
        elif base and s.get("rps") is not None:
            s["ratio_to_nginx"] = round(s["rps"] / base, 3)
        if s.get("pair", {}).get("problem_rounds"):
            s["ok"] = False
            s.setdefault("problems", []).append("wrong answers in " + ", ".join(s["pair"]["problem_rounds"]))
    return scenarios


def missed(run):
    cfg = read_kv(os.path.join(run, "machine.env"))
    seen = set()
    for t in targets(load_all(run), cfg):
        if t["met"] is False and t["scenario"] not in seen:
            seen.add(t["scenario"])
            print(t["scenario"])
    return 0


def svg_chart(scenarios, title):
    """Two horizontal bar panels: req/s and p99 per scenario (hand-written SVG)."""
    rows = [s for s in scenarios if s.get("rps") is not None]
    lw, pw, gap, rh, top = 250, 330, 40, 24, 56
    w = lw + 2 * pw + gap + 30
    h = top + rh * max(len(rows), 1) + 40
    color = {"nginx": "#8c8c8c", "edge": "#d9534f", "openresty": "#5b8bd9"}
    max_rps = max([s["rps"] for s in rows] + [1])
    max_p99 = max([s["p99_ms"] for s in rows] + [0.001])
    esc = lambda t: t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
         f'font-family="sans-serif" font-size="12">',
         f'<rect width="{w}" height="{h}" fill="white"/>',
         f'<text x="10" y="20" font-size="14" font-weight="bold">{esc(title)}</text>',
         f'<text x="{lw}" y="{top - 10}" font-weight="bold">throughput (req/s)</text>',
         f'<text x="{lw + pw + gap}" y="{top - 10}" font-weight="bold">p99 latency (ms)</text>']
    for i, s in enumerate(rows):
        y = top + i * rh
        c = color.get(s["system"], "#999")
        o.append(f'<text x="{lw - 8}" y="{y + 15}" text-anchor="end">{esc(s["name"])} ({esc(s["system"])})</text>')
        bw = max(1.0, (pw - 70) * s["rps"] / max_rps)
        o.append(f'<rect x="{lw}" y="{y + 3}" width="{bw:.1f}" height="{rh - 6}" fill="{c}"/>')
        o.append(f'<text x="{lw + bw + 4:.1f}" y="{y + 15}">{s["rps"]:,.0f}</text>')
        x2 = lw + pw + gap
        bw = max(1.0, (pw - 70) * s["p99_ms"] / max_p99)
        o.append(f'<rect x="{x2}" y="{y + 3}" width="{bw:.1f}" height="{rh - 6}" fill="{c}" opacity="0.75"/>')
        o.append(f'<text x="{x2 + bw + 4:.1f}" y="{y + 15}">{s["p99_ms"]:.2f}</text>')
    y = top + rh * len(rows) + 20
    x = lw
    for sysname, c in color.items():
        o.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{c}"/>'
                 f'<text x="{x + 16}" y="{y}">{sysname}</text>')
        x += 110
    o.append("</svg>")
    return "\n".join(o) + "\n"


def markdown(res):
    m, cfg = res["machine"], res["config"]
    out = [f"Run {res['started']} — `{cfg['command']}`", "",
           f"Machine: {m['cores']} cores, {m['model']}, {m['mem_gb']} GB, Linux {m['kernel']}; "
           f"load average {m['load_before']} before, {m.get('load_after', '?')} after"
           f"{' (waited %ss for it)' % m['load_waited_s'] if m.get('load_waited_s') not in (None, '0') else ''}; "
           f"pinning: {m['pinning']}; wrk {m['wrk']}, nginx {m['nginx']}, Redis {m['redis']}, "
           f"MariaDB {m['mariadb']}; commit {m['git']}, {cfg['profile']} build.",
           f"Load: wrk -t{cfg['wrk_threads']} -c{cfg['connections']}, {cfg['duration_s']} s per scenario, "
           f"{cfg['server_workers']} server worker(s), {cfg['links']} links (random codes, same file for every system; "
           f"{'each request picks one by a Zipf law of exponent ' + cfg['zipf'] if cfg.get('zipf') else 'each request picks one uniformly'}).",
           "",
           "Mode: *sequential* figures are one run; *interleaved ×N* figures are the median of N rounds run "
           "back to back with the scenario's anchor, the order alternating, and the ratio is the median of "
           "the per-round ratios (spread in the pairs table). Every run first waits until the servers are idle "
           "(at most 30 s; idle wait in the JSON).",
           "",
           "| scenario | system | mode | req/s | p50 ms | p99 ms | p99.9 ms | errors | ratio to nginx static | load at start |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for s in res["scenarios"]:
        if s.get("skipped"):
            out.append(f"| {s['name']} | {s['system']} | | skipped: {s['skipped']} | | | | | | |")
            continue
        if s.get("rps") is None:
            out.append(f"| {s['name']} | {s['system']} | {s['mode']} | FAILED | | | | | | |")
            continue
        ratio = f"{s['ratio_to_nginx']:.2f}×" if s.get("ratio_to_nginx") is not None else "–"
        if s.get("ratio_to_nginx") is not None and s.get("anchor", "nginx-static") != "nginx-static":
            ratio += f" (to {s['anchor']})"
        out.append(f"| {s['name']} | {s['system']} | {s['mode']} | {s['rps']:,.0f} | {s['p50_ms']:.3f} | "
                   f"{s['p99_ms']:.3f} | {s['p999_ms']:.3f} | {s['errors']} | {ratio} | {s.get('load1_at_start') or '–'} |")
    pairs = [s["pair"] for s in res["scenarios"] if s.get("pair") and s["pair"].get("ratio_median") is not None]
    if pairs:
        out += ["", "Interleaved pairs (per-round figures in the JSON):", "",
                "| scenario | anchor | rounds | req/s ratio median | spread | p99 ratio median | spread | "
                "requests per server CPU second, ratio median (spread) | "
                "req/s per round (scenario / anchor) |", "|---|---|---:|---:|---|---:|---|---|---|"]
        for p in pairs:
            per = "; ".join(f"{r[p['target']]['rps'] or 0:,.0f} / {r[p['anchor']]['rps'] or 0:,.0f}" for r in p["rounds"])
            p99 = (f"{p['p99_ratio_median']:.3f}×", f"{p['p99_ratio_min']:.3f}–{p['p99_ratio_max']:.3f}") \
                if p.get("p99_ratio_median") is not None else ("–", "–")
            cpu = (f"{p['cpu_ratio_median']:.3f}× ({p['cpu_ratio_min']:.3f}–{p['cpu_ratio_max']:.3f})"
                   if p.get("cpu_ratio_median") is not None else "–")
            out.append(f"| {p['target']} | {p['anchor']} | {p['n']} | {p['ratio_median']:.3f}× | "
                       f"{p['ratio_min']:.3f}–{p['ratio_max']:.3f} | {p99[0]} | {p99[1]} | {cpu} | {per} |")
    out += ["", "Targets (compared, not asserted):", "", "| target | measured | goal | result |", "|---|---|---|---|"]
    for t in res["targets"]:
        r = {True: "met", False: "**MISSED**", None: "n/a"}[t["met"]]
        note = f" — {t['note']}" if t["note"] else ""
        prof = ""
        if t["met"] is False:
            s = by_name(res["scenarios"]).get(t["scenario"], {})
            if s.get("profile"):
                prof = f" (profile: `{s['profile']}`)"
        out.append(f"| {t['target']} | {t['measured']} | {t['goal']} | {r}{note}{prof} |")
    lines = []
    for s in res["scenarios"]:
        for p in s.get("problems", []):
            lines.append(f"- **{s['name']}: {p}**")
        for n in s.get("notes", []):
            lines.append(f"- {s['name']}: {n}")
        if s.get("path"):
            lines.append(f"- {s['name']} path counters: " + ", ".join(f"{k} {v:,}" for k, v in s["path"].items()))
    if lines:
        out += ["", "Notes:", ""] + lines
    for s in res["scenarios"]:
        if s.get("profile_top"):
            out += ["", f"Profile of {s['name']} (`{s['profile']}`), CPU by process:", "", "```"] + \
                   s["profile_top"] + ["```"]
    return "\n".join(out) + "\n"


def final(run, out_dir, ts):
    m = read_kv(os.path.join(run, "machine.env"))
    cfg_keys = ("command", "duration_s", "links", "zipf", "connections", "wrk_threads", "server_workers", "profile",
                "quick", "setup_create_s")
    cfg = {k: m.pop(k) for k in cfg_keys if k in m}
    started = m.pop("started", ts)
    scenarios = load_all(run)
    # Profiles of missed targets are copied next to the results; older
    # latest.profile-* files would describe a previous run, so they go.
    for f in os.listdir(out_dir) if os.path.isdir(out_dir) else []:
        if f.startswith("latest.profile-"):
            os.remove(os.path.join(out_dir, f))
    for s in scenarios:
        p = os.path.join(run, "s", s["name"], "profile.txt")
        if os.path.exists(p):
            dst = os.path.join(out_dir, f"{ts}.profile-{s['name']}.txt")
            shutil.copy(p, dst)
            shutil.copy(p, os.path.join(out_dir, f"latest.profile-{s['name']}.txt"))
            s["profile"] = os.path.relpath(os.path.join(out_dir, f"latest.profile-{s['name']}.txt"), os.getcwd())
            text = open(p).read().splitlines()
            if any(l.startswith("## CPU by process") for l in text):
                top = []
                for l in text[[i for i, l in enumerate(text) if l.startswith("## CPU by process")][0] + 1:]:
                    if l.startswith("##"):
                        break
                    top.append(l)
                s["profile_top"] = top[:8]
    res = {"started": started, "machine": m, "config": cfg, "scenarios": scenarios,
           "targets": targets(scenarios, cfg), "ok": all(s["ok"] for s in scenarios)}
    res["machine"]["cores"] = int(m.get("cores", 0))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{ts}.json"), "w") as f:
        json.dump(res, f, indent=1)
    shutil.copy(os.path.join(out_dir, f"{ts}.json"), os.path.join(out_dir, "latest.json"))
    md = markdown(res)
    with open(os.path.join(out_dir, "latest.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out_dir, "latest.svg"), "w") as f:
        f.write(svg_chart(scenarios, f"shorturl loadtest {started} — wrk -t{cfg.get('wrk_threads')} "
                                     f"-c{cfg.get('connections')}, {m.get('cores')} cores"))
    print(md)
    print(f"results: {os.path.join(out_dir, ts + '.json')} (and latest.json, latest.md, latest.svg in {out_dir})")
    bad = [s["name"] for s in scenarios if not s["ok"]]
    if bad:
        print(f"FAILED scenarios (did not run or answered wrongly): {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


def perfsum(pidfile):
    """CPU share by process from `perf script -F pid,comm` on stdin; the
    runner's pid file names our processes (thread names such as
    tokio-rt-worker do not say which server they belong to)."""
    names = {}
    for l in open(pidfile) if os.path.exists(pidfile) else []:
        p = l.split()
        if len(p) == 2:
            names[p[0]] = p[1]
    count, comm, total = {}, {}, 0
    for l in sys.stdin:
        p = l.split()
        if len(p) < 2:
            continue
        pid, c = p[-1], " ".join(p[:-1])
        total += 1
        count[pid] = count.get(pid, 0) + 1
        comm.setdefault(pid, {}).setdefault(c, 0)
        comm[pid][c] += 1
    by = {}
    for pid, n in count.items():
        label = names.get(pid)
        if label is None:
            c = max(comm[pid], key=comm[pid].get)
            label = "idle" if pid == "0" else f"other: {c}"
        else:
            label = f"{label} (pid {pid})"
        by[label] = by.get(label, 0) + n
    for label, n in sorted(by.items(), key=lambda kv: -kv[1]):
        if total and 100.0 * n / total >= 1.0:
            print(f"{100.0 * n / total:6.1f}%  {label}")
    return 0


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd = argv[1]
    if cmd == "line":
        return line(argv[2])
    if cmd == "warm":
        return warm(argv[2], argv[3], argv[4])
    if cmd == "missed":
        return missed(argv[2])
    if cmd == "perfsum":
        return perfsum(argv[2])
    if cmd == "pair":
        return pair(argv[2], argv[3], argv[4], argv[5])
    if cmd == "final":
        return final(argv[2], argv[3], argv[4])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
