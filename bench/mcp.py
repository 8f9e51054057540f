#!/usr/bin/python3
"""MCP against the native API on the same kernel (concept: mcp).

Side by side, in interleaved rounds on the same machine (which goes first
alternates), on one context of one daemon, each over its own kept-alive
HTTP connection:
  (a) POST /mcp tools/call run_code `1+1` with the context's id (a session
      made once: Mcp-Session-Id, MCP-Protocol-Version), the JSON answer
      read and its text checked;
  (b) POST /run `1+1` with the same context id, the result read and checked.
Prints p50 and p90 of each and the ratio of the p50s; the target (in
targets.py): (a) p50 at most 1.10x (b) p50.

Then `kernelbridge mcp` (stdio, the service in-process on a fresh state
dir) started R times: from the spawn to the answer of initialize, and to
the answer of the first run_code `1+1` (a kernel started on the way).

    /usr/bin/python3 bench/mcp.py [-n 500] [--warmup 20] [--stdio-rounds 5]
        [--binary PATH] [--results PATH] [--json FILE]
"""
import itertools
import json
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kbbench import cli, machine, sidebyside  # noqa: E402
from kbbench.daemon import Daemon  # noqa: E402
from kbbench.httpclient import Http  # noqa: E402
from kbbench.results import Figures, figure  # noqa: E402
from kbbench.stats import pct  # noqa: E402

VERSION = "2025-11-25"
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": VERSION, "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}}


def mcp_session(port: int) -> Http:
    """A kept-alive connection with an initialized MCP session."""
    http = Http(port, {"Accept": "application/json, text/event-stream"})
    http.conn.request("POST", "/mcp", body=json.dumps(INIT).encode(),
                      headers={**http.headers, "Content-Type": "application/json"})
    r = http.conn.getresponse()
    r.read()
    if r.status != 200:
        sys.exit("initialize: %d" % r.status)
    http.headers.update({"Mcp-Session-Id": r.getheader("Mcp-Session-Id"),
                         "MCP-Protocol-Version": VERSION})
    http.json("POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"},
              expect=(202,))
    return http


def through_mcp(http: Http, context_id: str, rid: int) -> float:
    """(a): seconds for one tools/call run_code `1+1`, its answer checked."""
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "run_code", "arguments": {"code": "1+1", "context_id": context_id}}}
    started = time.perf_counter()
    answer = http.json("POST", "/mcp", body)
    elapsed = time.perf_counter() - started
    result = answer.get("result") or {}
    # (IPython warns once on stderr when its output cache fills: a text item more)
    if result.get("isError") or "2" not in [c.get("text") for c in result["content"]]:
        sys.exit("unexpected answer: %r" % answer)
    return elapsed


def through_run(http: Http, context_id: str) -> float:
    """(b): seconds for one POST /run `1+1`, its result checked."""
    started = time.perf_counter()
    result = http.json("POST", "/run", {"code": "1+1", "context_id": context_id})
    elapsed = time.perf_counter() - started
    if result["results"][0]["text"] != "2" or result["error"] is not None:
        sys.exit("unexpected result: %r" % result)
    return elapsed


def measure_http(d: Daemon, rounds: int, warmup: int) -> dict[str, Any]:
    """Interleaved rounds of (a) and (b) on one context."""
    context = d.ok("POST", "/contexts", {"language": "python"})
    context_id = context["context_id"]
    mcp, native = mcp_session(d.port), Http(d.port)
    rids = itertools.count(1)
    mcp_s, run_s = sidebyside.interleaved(rounds, warmup,
                                          lambda: through_mcp(mcp, context_id, next(rids)),
                                          lambda: through_run(native, context_id))
    mcp.close()
    native.close()
    return {"rounds": rounds, "kernel_name": context["kernel_name"], "mcp_s": mcp_s,
            "run_s": run_s, "loadavg": list(os.getloadavg())}


def stdio_once(binary: str) -> tuple[float, float]:
    """Seconds from spawning `kernelbridge mcp` to initialize's answer and
    to the first run_code's answer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
    started = time.perf_counter()
    proc = subprocess.Popen([binary, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env)
    try:
        assert proc.stdin and proc.stdout
        proc.stdin.write((json.dumps(INIT) + "\n").encode())
        proc.stdin.flush()
        json.loads(proc.stdout.readline())
        initialized = time.perf_counter() - started
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "run_code", "arguments": {"code": "1+1"}}}
        proc.stdin.write((json.dumps(call) + "\n").encode())
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        first_run = time.perf_counter() - started
        if answer["result"]["content"][0]["text"] != "2":
            sys.exit("unexpected stdio answer: %r" % answer)
        proc.stdin.close()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return initialized, first_run


def figures(res: dict[str, Any]) -> Figures:
    a, b = pct(res["mcp_s"], 50), pct(res["run_s"], 50)
    return {
        "run.mcp_p50_ms": figure("POST /mcp tools/call run_code `1+1`, p50", a * 1e3, "ms"),
        "run.native_p50_ms": figure("POST /run `1+1` on the same context, p50", b * 1e3, "ms"),
        "run.ratio_p50": figure("/mcp's p50 ÷ POST /run's p50", a / b, "x"),
        "stdio.initialize_p50_ms": figure("`kernelbridge mcp`: spawn to initialize's answer, "
                                          "p50", pct(res["stdio_init_s"], 50) * 1e3, "ms"),
        "stdio.first_run_p50_ms": figure("`kernelbridge mcp`: spawn to the first run_code's "
                                         "answer, p50", pct(res["stdio_run_s"], 50) * 1e3, "ms"),
    }


def tables(res: dict[str, Any]) -> list[str]:
    lines = ["`1+1`: %d interleaved rounds, kernel %s, load average %s"
             % (res["rounds"], res["kernel_name"], " ".join("%.2f" % x for x in res["loadavg"])),
             ""]
    return lines + sidebyside.p50_p90_rows((
        ("(a) POST /mcp tools/call run_code, kept-alive HTTP", res["mcp_s"]),
        ("(b) POST /run, kept-alive HTTP", res["run_s"]),
        ("`kernelbridge mcp`: spawn to initialize's answer", res["stdio_init_s"]),
        ("`kernelbridge mcp`: spawn to the first run_code's answer", res["stdio_run_s"])))


def main() -> None:
    ap = sidebyside.rounds_parser(__doc__)
    ap.add_argument("--stdio-rounds", type=int, default=5, help="stdio starts (default 5)")
    a = ap.parse_args()
    a.binary = cli.check_binary(a.binary)
    cli.setup("kbmcp")
    env = machine.environment(a.binary, cli.ROOT)
    res = sidebyside.on_own_daemon(a.binary, lambda d: measure_http(d, max(a.n, 2), a.warmup))
    starts = [stdio_once(a.binary) for _ in range(max(a.stdio_rounds, 1))]
    res["stdio_init_s"] = [s[0] for s in starts]
    res["stdio_run_s"] = [s[1] for s in starts]
    sidebyside.finish(a, "mcp", res, ("mcp_s", "run_s", "stdio_init_s", "stdio_run_s"),
                      tables(res), figures(res), env)

if __name__ == "__main__":
    main()
