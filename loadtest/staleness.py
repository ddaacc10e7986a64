#!/usr/bin/env python3
"""Staleness of the edges' answers after link changes (issue 10 item 4).

Run by loadtest/staleness, which starts Redis, MariaDB, the origin and the
edges; see docs/perf.md "Staleness". This script:

1. creates --links links through the origin API;
2. keeps every edge busy with wrk (random GETs over all the links);
3. performs --edits edits (PATCH url) and --deletes deletes, in a shuffled
   order, one at a time through the origin API. Before each change it reads
   the link on every edge (so each edge holds it in memory); after the API's
   200 it polls every edge (one keep-alive connection each, the three GETs
   in flight together) until the edge answers the new state, and records the
   time from the 200 to that answer (an upper bound: the answer may have
   been right before the poll that saw it; the resolution is one poll);
4. counts superseded answers (the old target) after an edge's first correct
   one: a few polls right after, a background sweeper over changed links
   while the changes run, and a final pass over every changed link;
5. writes JSON and Markdown results and prints the summary.

An edge that serves the old state past --cap-ms is counted as a timeout;
one that times out on its first --give-up changes is reported as not
invalidating and left out of the rest of the run (e.g. an OpenResty module
without a subscriber). An edge that cannot serve the links at all is
reported as not measured.
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time


def now():
    return time.perf_counter()


class Http:
    """A raw HTTP/1.1 keep-alive client: GET and read back status + Location."""

    def __init__(self, port, host):
        self.port, self.host = port, host
        self.sock, self.buf = None, b""

    def _connect(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.buf = s, b""

    def close(self):
        if self.sock:
            self.sock.close()
        self.sock, self.buf = None, b""

    def send_get(self, path):
        if self.sock is None:
            self._connect()
        req = f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode()
        try:
            self.sock.sendall(req)
        except OSError:
            self._connect()
            self.sock.sendall(req)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed by the server")
        self.buf += chunk

    def read(self):
        """(status, location or None) of the next response."""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        while len(self.buf) < n:
            self._fill()
        self.buf = self.buf[n:]
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers.get("location")

    def get(self, path):
        for attempt in range(2):
            try:
                self.send_get(path)
                return self.read()
            except (OSError, ConnectionError, ValueError):
                self.close()
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")


def answer(resp):
    """What an edge said: the redirect target, "404", or "<status>"."""
    status, location = resp
    if status in (301, 302, 307, 308):
        return location
    return "404" if status == 404 else str(status)


class Api:
    """The origin's API over one keep-alive connection."""

    def __init__(self, port, key, host):
        self.port, self.key, self.host = port, key, host
        self.conn = None

    def call(self, method, path, body=None):
        for attempt in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                headers = {"Host": self.host, "Authorization": f"Bearer {self.key}"}
                data = None
                if body is not None:
                    data = json.dumps(body).encode()
                    headers["Content-Type"] = "application/json"
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                return r.status, r.read()
            except (OSError, http.client.HTTPException):
                if self.conn:
                    self.conn.close()
                self.conn = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")


def status_doc(port, host):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/shorturl_status", headers={"Host": host})
        r = c.getresponse()
        body = r.read()
        c.close()
        return json.loads(body) if r.status == 200 else {}
    except (OSError, ValueError, http.client.HTTPException):
        return {}


def inval_from_metrics(port):
    """The status's inval numbers from an edge's /metrics (the OpenResty
    module: summed over workers, each message counted once per worker)."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
    except (OSError, http.client.HTTPException):
        return None
    sums = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        series, _, value = line.rpartition(" ")
        name = series.split("{", 1)[0]
        try:
            sums[name] = sums.get(name, 0) + float(value)
        except ValueError:
            pass
    if "shorturl_inval_messages_total" not in sums:
        return None
    return {"messages": int(sums.get("shorturl_inval_messages_total", 0)),
            "dropped": int(sums.get("shorturl_inval_dropped_total", 0)),
            "superseded": int(sums.get("shorturl_inval_superseded_total", 0)),
            "per_worker": True}


def served(doc):
    loc = doc.get("local") or {}
    return (loc.get("hit") or 0) + (loc.get("miss") or 0)


def pct(values, p):
    """Nearest-rank percentile of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, -(-len(s) * p // 100) - 1))
    return s[int(k)]


def stats(values, timeouts):
    if not values:
        return {"n": 0, "timeouts": timeouts}
    return {
        "n": len(values),
        "timeouts": timeouts,
        "p50_ms": round(pct(values, 50) * 1000, 2),
        "p99_ms": round(pct(values, 99) * 1000, 2),
        "max_ms": round(max(values) * 1000, 2),
        "mean_ms": round(sum(values) / len(values) * 1000, 2),
    }


class Edge:
    def __init__(self, name, port, host):
        self.name, self.port, self.host = name, port, host
        self.poll = Http(port, host)
        self.sweep = Http(port, host)
        self.times = {"edit": [], "delete": []}
        self.timeouts = {"edit": 0, "delete": 0}
        self.superseded = {"after_first": 0, "sweeper": 0, "final": 0}
        self.unexpected = []
        self.excluded = None  # reason, when left out
        self.consecutive_timeouts = 0
        self.wrk = None


def create_links(api_port, key, host, n, tag):
    """n links through the API, 16 at a time; [(code, url)]."""
    local = threading.local()

    def one(i):
        if not hasattr(local, "api"):
            local.api = Api(api_port, key, host)
        url = f"https://stale.example/{tag}/{i}/v1"
        st, body = local.api.call("POST", "/api/v1/links", {"url": url})
        if st != 201:
            raise RuntimeError(f"creation answered {st}: {body[:200]!r}")
        return json.loads(body)["code"], url

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        return list(ex.map(one, range(n)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--origin", type=int, required=True, help="origin port (API)")
    ap.add_argument("--key", required=True)
    ap.add_argument("--domain", required=True, help="Host of the links")
    ap.add_argument("--edge", action="append", required=True, help="name=port (repeat)")
    ap.add_argument("--metrics", action="append", default=[],
                    help="name=port: the edge's Prometheus port, read when its status has no inval section")
    ap.add_argument("--links", type=int, default=10000)
    ap.add_argument("--edits", type=int, default=1000)
    ap.add_argument("--deletes", type=int, default=1000)
    ap.add_argument("--wrk-conns", type=int, default=16)
    ap.add_argument("--wrk-threads", type=int, default=1)
    ap.add_argument("--warm-secs", type=float, default=5)
    ap.add_argument("--cap-ms", type=float, default=2000, help="poll an edge at most this long per change")
    ap.add_argument("--give-up", type=int, default=10, help="leave out an edge timing out on its first N changes")
    ap.add_argument("--tail", type=int, default=3, help="polls per edge after the last first-correct answer")
    ap.add_argument("--lt", required=True, help="loadtest directory (wrk scripts)")
    ap.add_argument("--run", required=True, help="scratch directory")
    ap.add_argument("--out", required=True, help="results directory")
    ap.add_argument("--meta", default="{}", help="JSON merged into the results (command, machine)")
    a = ap.parse_args()
    if a.edits + a.deletes > a.links:
        sys.exit("--links must be at least --edits + --deletes")
    log = lambda *m: print("[staleness %s]" % time.strftime("%H:%M:%S"), *m, file=sys.stderr, flush=True)
    rng = random.SystemRandom()
    tag = "%08x" % rng.getrandbits(32)

    edges = []
    for spec in a.edge:
        name, _, port = spec.partition("=")
        edges.append(Edge(name, int(port), a.domain))
    metrics_ports = dict((m.partition("=")[0], int(m.partition("=")[2])) for m in a.metrics)

    log(f"creating {a.links} links through the origin API")
    t = now()
    links = create_links(a.origin, a.key, a.domain, a.links, tag)
    log(f"created {len(links)} links in {now() - t:.1f}s")
    codes_file = os.path.join(a.run, "staleness-codes.txt")
    with open(codes_file, "w") as f:
        f.write("\n".join(c for c, _ in links) + "\n")

    # Every edge must serve the links before it can be measured.
    sample = rng.sample(links, 20)
    for e in edges:
        bad = [(c, answer(e.poll.get("/" + c))) for c, u in sample]
        bad = [(c, got) for (c, got), (_, u) in zip(bad, sample) if got != u]
        if bad:
            e.excluded = f"does not serve the links ({len(bad)}/20 wrong, e.g. /{bad[0][0]} -> {bad[0][1]})"
            log(f"{e.name}: not measured: {e.excluded}")
    live = [e for e in edges if not e.excluded]
    if not live:
        sys.exit("no edge serves the links")

    env = dict(os.environ, LOADTEST_DIR=a.lt, LOADTEST_CODES=codes_file, SHORTURL_HOST=a.domain,
               LOADTEST_THREADS=str(a.wrk_threads))
    for e in live:
        e.wrk = subprocess.Popen(
            ["wrk", f"-t{a.wrk_threads}", f"-c{a.wrk_conns}", "-d3600s", "-s", os.path.join(a.lt, "get.lua"),
             f"http://127.0.0.1:{e.port}/"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log(f"wrk -t{a.wrk_threads} -c{a.wrk_conns} on {', '.join(e.name for e in live)}; warming {a.warm_secs}s")
    time.sleep(a.warm_secs)

    pool = rng.sample(links, a.edits + a.deletes)
    changes = [("edit", c, u) for c, u in pool[: a.edits]] + [("delete", c, u) for c, u in pool[a.edits:]]
    rng.shuffle(changes)
    done = []  # (code, old, new) of changes every measured edge answered correctly
    done_lock = threading.Lock()
    stop = threading.Event()

    def sweeper():
        while not stop.is_set():
            with done_lock:
                picks = rng.sample(done, min(len(done), 20)) if done else []
            if not picks:
                time.sleep(0.01)
                continue
            for code, old, new in picks:
                for e in [e for e in edges if not e.excluded]:
                    got = answer(e.sweep.get("/" + code))
                    if got == old:
                        e.superseded["sweeper"] += 1
                        log(f"{e.name}: superseded answer for /{code} (sweeper)")

    before = {e.name: status_doc(e.port, a.domain) for e in live}
    sweep = threading.Thread(target=sweeper, daemon=True)
    sweep.start()
    api = Api(a.origin, a.key, a.domain)
    api_ms = []
    t_start = now()
    log(f"{a.edits} edits and {a.deletes} deletes")
    for i, (kind, code, old) in enumerate(changes):
        path = "/" + code
        measured = [e for e in edges if not e.excluded]
        # Every edge holds the link in memory before the change.
        for e in measured:
            got = answer(e.poll.get(path))
            if got != old:
                e.unexpected.append(f"before the change /{code} -> {got}")
        new = old.replace("/v1", "/v2") if kind == "edit" else "404"
        t_api = now()
        if kind == "edit":
            st, body = api.call("PATCH", f"/api/v1/links/{code}", {"url": new})
        else:
            st, body = api.call("DELETE", f"/api/v1/links/{code}")
        t0 = now()
        api_ms.append((t0 - t_api) * 1000)
        if st != 200:
            sys.exit(f"{kind} /{code} answered {st}: {body[:200]!r}")
        pending = list(measured)
        while pending:
            for e in pending:
                e.poll.send_get(path)
            for e in list(pending):
                got = answer(e.poll.read())
                t = now() - t0
                if got == new:
                    e.times[kind].append(t)
                    e.consecutive_timeouts = 0
                    pending.remove(e)
                elif got != old:
                    e.unexpected.append(f"after the {kind} /{code} -> {got}")
                if e in pending and t * 1000 > a.cap_ms:
                    e.timeouts[kind] += 1
                    e.consecutive_timeouts += 1
                    pending.remove(e)
                    if e.consecutive_timeouts >= a.give_up and not (e.times["edit"] or e.times["delete"]):
                        e.excluded = f"served the old state past {a.cap_ms:.0f} ms on its first {a.give_up} changes (no invalidation)"
                        log(f"{e.name}: left out: {e.excluded}")
        for _ in range(a.tail):
            for e in measured:
                got = answer(e.poll.get(path))
                if got == old:
                    e.superseded["after_first"] += 1
                    log(f"{e.name}: superseded answer for /{code} right after the first correct one")
        with done_lock:
            done.append((code, old, new))
        if (i + 1) % 250 == 0:
            log(f"{i + 1}/{len(changes)} changes")
    t_changes = now() - t_start
    stop.set()
    sweep.join()
    after = {e.name: status_doc(e.port, a.domain) for e in live}

    log("final pass over every changed link")
    for code, old, new in done:
        for e in edges:
            if e.excluded:
                continue
            got = answer(e.poll.get("/" + code))
            if got == old:
                e.superseded["final"] += 1
            elif got != new:
                e.unexpected.append(f"final /{code} -> {got}")

    for e in live:
        if e.wrk and e.wrk.poll() is None:
            e.wrk.send_signal(signal.SIGINT)
    wrk_out = {}
    for e in live:
        out, _ = e.wrk.communicate(timeout=30)
        last = out.strip().splitlines()[-1] if out.strip() else ""
        try:
            wrk_out[e.name] = json.loads(last)
        except ValueError:
            wrk_out[e.name] = {"raw": out[-500:]}

    result = {
        "config": {"links": a.links, "edits": a.edits, "deletes": a.deletes, "wrk": f"-t{a.wrk_threads} -c{a.wrk_conns}",
                   "cap_ms": a.cap_ms, "tail_polls": a.tail},
        "changes_secs": round(t_changes, 1),
        "api_ms": stats([x / 1000 for x in api_ms], 0),
        "edges": {},
    }
    result.update(json.loads(a.meta))
    every = {"edit": [], "delete": []}
    for e in edges:
        r = {"port": e.port}
        if e.excluded:
            r["excluded"] = e.excluded
        if e.name in before:
            n = served(after[e.name]) - served(before[e.name])
            r["served_during_changes"] = n
            r["req_per_s_during_changes"] = round(n / t_changes) if t_changes > 0 else 0
            r["inval"] = after[e.name].get("inval")
            if r["inval"] is None and e.name in metrics_ports:
                r["inval"] = inval_from_metrics(metrics_ports[e.name])
            r["wrk"] = {k: wrk_out.get(e.name, {}).get(k) for k in ("requests", "rps", "status", "errors")}
        if e.times["edit"] or e.times["delete"]:
            for k in ("edit", "delete"):
                r[k] = stats(e.times[k], e.timeouts[k])
                every[k] += e.times[k]
            r["all"] = stats(e.times["edit"] + e.times["delete"], e.timeouts["edit"] + e.timeouts["delete"])
            r["superseded"] = e.superseded
            r["superseded_total"] = sum(e.superseded.values())
            r["unexpected"] = len(e.unexpected)
            r["unexpected_examples"] = e.unexpected[:5]
        result["edges"][e.name] = r
    measured = [e for e in edges if "all" in result["edges"][e.name]]
    result["overall"] = {
        "edit": stats(every["edit"], sum(e.timeouts["edit"] for e in measured)),
        "delete": stats(every["delete"], sum(e.timeouts["delete"] for e in measured)),
        "all": stats(every["edit"] + every["delete"], sum(sum(e.timeouts.values()) for e in measured)),
        "superseded_total": sum(sum(e.superseded.values()) for e in measured),
        "unexpected": sum(len(e.unexpected) for e in measured),
    }
    ov = result["overall"]["all"]
    result["goal"] = {
        "p99_le_100ms": ov.get("p99_ms", 1e9) <= 100 and ov["timeouts"] == 0,
        "max_le_1s": ov.get("max_ms", 1e9) <= 1000 and ov["timeouts"] == 0,
        "no_superseded": result["overall"]["superseded_total"] == 0,
        "every_edge_measured": len(measured) == len(edges),
    }

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "staleness-latest.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    md = render(result, [e.name for e in edges])
    with open(os.path.join(a.out, "staleness-latest.md"), "w") as f:
        f.write(md)
    print(md)
    ok = result["goal"]["no_superseded"] and result["overall"]["unexpected"] == 0
    sys.exit(0 if ok else 1)


def render(r, names):
    def row(name, s):
        if not s.get("n"):
            return f"| {name} | – | – | – | – | {s.get('timeouts', 0)} |"
        return f"| {name} | {s['n']} | {s['p50_ms']} | {s['p99_ms']} | {s['max_ms']} | {s['timeouts']} |"

    out = [f"Staleness: {r['config']['edits']} edits + {r['config']['deletes']} deletes over "
           f"{r['config']['links']} links, wrk {r['config']['wrk']} on every edge, "
           f"changes over {r['changes_secs']} s (API p50 {r['api_ms'].get('p50_ms')} ms).", "",
           "Time from the API's 200 to the edge's first correct answer (ms; timeouts: still stale after "
           f"{r['config']['cap_ms']:.0f} ms):", "",
           "| edge / change | n | p50 | p99 | max | timeouts |", "|---|---|---|---|---|---|"]
    for n in names:
        e = r["edges"][n]
        if "all" not in e:
            out.append(f"| {n} | not measured: {e.get('excluded', '?')} | | | | |")
            continue
        for k in ("edit", "delete", "all"):
            out.append(row(f"{n} {k}", e[k]))
    for k in ("edit", "delete", "all"):
        out.append(row(f"**overall** {k}", r["overall"][k]))
    out += ["", "| edge | req/s during the changes | superseded after first correct (right after / sweeper / final) | unexpected answers | inval messages / dropped / superseded lookups |",
            "|---|---|---|---|---|"]
    for n in names:
        e = r["edges"][n]
        inv = e.get("inval") or {}
        sup = e.get("superseded")
        sup_s = f"{sup['after_first']} / {sup['sweeper']} / {sup['final']}" if sup else "–"
        inv_s = f"{inv.get('messages')} / {inv.get('dropped')} / {inv.get('superseded')}" if inv else "–"
        out.append(f"| {n} | {e.get('req_per_s_during_changes', '–')} | {sup_s} | {e.get('unexpected', '–')} | {inv_s} |")
    g = r["goal"]
    out += ["", f"Goal p99 ≤ 100 ms: {'met' if g['p99_le_100ms'] else 'MISSED'}; max ≤ 1 s: "
            f"{'met' if g['max_le_1s'] else 'MISSED'}; superseded answers: {r['overall']['superseded_total']}"
            f"{'' if g['every_edge_measured'] else ' (not every edge measured)'}.", ""]
    return "\n".join(out)


if __name__ == "__main__":
    main()
