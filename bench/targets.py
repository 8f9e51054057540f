"""Every target the benchmarks check, as data, with the SPEC section it comes
from. A target reads one figure of one concept's results
(bench/results/<concept>.json, "figures") and compares it with its bound,
in its unit; kbbench/report.py renders and checks them, and no other file
holds a target's number.

Sections: SPEC.md's (7 performance, 6 security and limits, 8 durability,
9 limits and accounting, 10 Jupyter's API). Where SPEC states no number,
the target is the one docs/PERFORMANCE.md set for that section (marked
"doc"); bench/jupyter_ws.py's own targets are marked "bench".
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    concept: str  # the results it reads: bench/results/<concept>.json
    figure: str  # the key of the figure in its "figures"
    name: str  # what is checked, as a reader says it
    section: str  # SPEC.md's section
    op: str  # "<=", ">=" or "=="
    bound: float | bool
    unit: str  # the unit of the bound and of the figure


def _per_kernel(concept, kernels, rows):
    return tuple(Target(concept, f"{k}.{fig}", f"{k}: {name}", sec, op, bound, unit)
                 for k in kernels for fig, name, sec, op, bound, unit in rows)


LATENCY = _per_kernel("latency", ("python3", "xpython"), (
    ("overhead_us", "bridge overhead p50, interleaved (POST /run − raw floor)", "7", "<=", 150, "µs"),
    ("ws_shipped_ratio", "Jupyter Server's websocket as shipped p50 ÷ POST /run p50", "7", ">=", 5, "x"),
))

OVERHEAD = _per_kernel("overhead", ("python3", "xpython"), (
    ("back_to_back_overhead_us", "bridge overhead p50, back to back on the daemon's own kernel "
     "(paired)", "7", "<=", 150, "µs"),
)) + (
    Target("overhead", "memory.idle_rss_anon_kib", "daemon private memory idle (RssAnon)", "7",
           "<=", 4096, "KiB"),
    Target("overhead", "memory.per_context_kib", "daemon RSS per context", "7", "<=", 100, "KiB"),
)

POOL = _per_kernel("pool", ("python3", "xpython"), (
    ("warm_create_ms", "warm pool: POST /contexts p50", "7", "<=", 10, "ms"),
    ("cold_create_ratio", "cold POST /contexts p50 ÷ the kernel's own start-up p50", "7", "<=",
     1.10, "x"),
)) + (
    Target("pool", "python.warm_create_ms", "python, cold and warm daemons interleaved: warm "
           "POST /contexts p50", "7", "<=", 10, "ms"),
)

OUTPUT = (
    Target("output", "rate.one-message.ratio_pct", "100 MiB as one message: POST /run's rate ÷ "
           "the raw client's", "7", ">=", 80, "%"),
    Target("output", "rate.chunked.ratio_pct", "100 MiB in 1 MiB messages: POST /run's rate ÷ "
           "the raw client's", "7", ">=", 80, "%"),
    Target("output", "rate.one-message.exact", "100 MiB as one message: stdout exactly "
           "104,857,600 bytes every round", "7", "==", True, "bool"),
    Target("output", "rate.chunked.exact", "100 MiB in 1 MiB messages: stdout exactly "
           "104,857,600 bytes every round", "7", "==", True, "bool"),
    Target("output", "single.one-message.peak_minus_idle_mib", "one 200 MiB run as one message "
           "(a documented case), 64 MiB cap: peak RSS − idle (cap + 32 MiB)", "7", "<=", 96, "MiB"),
    Target("output", "single.chunked.peak_minus_idle_mib", "one 200 MiB run in 1 MiB messages, "
           "64 MiB cap: peak RSS − idle (cap + 32 MiB)", "7", "<=", 96, "MiB"),
    Target("output", "single.one-message.refused", "one 200 MiB run as one message, over "
           "--max-message-size (128 MiB): not sent by the kernel (its note instead), MessageTooLarge and "
           "`truncated: true`, every round", "6", "==", True, "bool"),
    Target("output", "single.chunked.truncated_at_cap", "one 200 MiB run in 1 MiB messages: "
           "`truncated: true`, stdout exactly the cap, every round", "7", "==", True, "bool"),
    Target("output", "concurrent.peak_minus_idle_mib", "four 200 MiB runs at once, 256 MiB "
           "budget: peak RSS − idle (budget + 64 MiB)", "7", "<=", 320, "MiB"),
    Target("output", "concurrent8.peak_minus_idle_mib", "eight 200 MiB runs at once, 256 MiB "
           "budget: peak RSS − idle (budget + 64 MiB)", "7", "<=", 320, "MiB"),
    Target("output", "purge.after_5s_minus_idle_mib", "every record purged: RSS − idle 5 s "
           "after the last DELETE", "7", "<=", 16, "MiB"),
    Target("output", "stall.peak_minus_idle_mib", "an SSE reader stalled 10 s during a 200 MiB "
           "run: peak RSS − idle (the cap)", "7", "<=", 64, "MiB"),
    Target("output", "stall.peak_minus_idle_mib.bound", "an SSE reader stalled 10 s during a "
           "200 MiB run: peak RSS − idle (the cap + 64 MiB: it holds cursors, not copies)", "7",
           "<=", 128, "MiB"),
    Target("output", "stall.result_arrived", "an SSE reader stalled 10 s: the final `result` "
           "event arrived, every round", "7", "==", True, "bool"),
)

SCALE = _per_kernel("scale", ("xpython", "python3"), (
    ("idle_cpu_pct", "idle daemon with the most idle contexts: CPU, % of one core", "7", "<=",
     0.5, "%"),
    ("overhead_us_fewest", "bridge overhead p50 with the fewest idle contexts", "7", "<=", 150,
     "µs"),
    ("overhead_us_most", "bridge overhead p50 with the most idle contexts", "7", "<=", 150, "µs"),
    ("cpu_per_run_ratio", "daemon CPU per run, most ÷ fewest idle contexts", "7", "<=", 1.2, "x"),
    ("run_p50_ratio", "run p50, most ÷ fewest idle contexts", "7", "<=", 1.1, "x"),
    ("health_p50_ratio", "/health p50, most ÷ fewest idle contexts", "7", "<=", 1.2, "x"),
    ("rss_per_idle_context_kib", "RSS per idle context", "7", "<=", 100, "KiB"),
))

E2B = (
    Target("e2b", "ws_shipped_ratio", "Jupyter Server's websocket as shipped p50 ÷ E2B "
           "POST /execute p50", "7", ">=", 5, "x"),
)

JUPYTER = tuple(t for framing in ("legacy", "v1") for t in (
    Target("jupyter", f"{framing}.shipped_ratio", f"Jupyter Server's websocket as shipped p50 ÷ "
           f"kernelbridge's websocket ({framing}) p50", "7, 10", ">=", 5, "x"),
    Target("jupyter", f"{framing}.nodelay_ratio", f"Jupyter Server's websocket with TCP_NODELAY "
           f"p50 ÷ kernelbridge's websocket ({framing}) p50", "10, bench", ">=", 1.3, "x"),
    Target("jupyter", f"{framing}.over_run_us", f"websocket ({framing}) p50 − POST /run p50 on "
           "the same kernel", "10, bench", "<=", 100, "µs"),
    Target("jupyter", f"{framing}.over_run_paired_us", f"websocket ({framing}) − POST /run on the "
           "same kernel, median of per-round differences", "10, bench", "<=", 100, "µs"),
))

DURABILITY = (
    Target("durability", "persistence.tmpfs_added_us", "run p50 with a state dir on tmpfs − "
           "`--ephemeral`", "7", "<=", 20, "µs"),
    Target("durability", "persistence.disk_added_us", "run p50 with a state dir on disk − "
           "`--ephemeral`", "7", "<=", 20, "µs"),
    Target("durability", "adopt.10.answered_s", "10 contexts re-adopted after SIGKILL: every one "
           "answered with its variable, from the new daemon's spawn", "8, doc", "<=", 2, "s"),
    Target("durability", "cycles.orphans", "crash-and-restart cycles: orphaned kernels (most at "
           "once)", "8, doc", "==", 0, "count"),
    Target("durability", "cycles.lost_records", "crash-and-restart cycles: finished records "
           "lost (written in a batch before the crash)", "8, doc", "==", 0, "count"),
    Target("durability", "cycles.kernels_left", "crash-and-restart cycles: kernels left after "
           "the final plain stop", "8, doc", "==", 0, "count"),
)

LIMITS = (
    Target("limits", "p50.added_us", "run p50, limited − unlimited contexts", "7", "<=", 10, "µs"),
    Target("limits", "sampler.most.sampler_pct", "the sampler's thread with the most limited "
           "idle contexts, % of one core", "9, doc", "<=", 1.0, "%"),
    Target("limits", "typed.alloc_share", "`b'x' * 2**31` in a 512 MiB context: MemoryError, "
           "context kept, peak ≤ 1.1x the limit", "9", ">=", 1.0, "share"),
    Target("limits", "typed.alloc_peak_ratio", "that run's peak memory ÷ the limit (worst round)",
           "9", "<=", 1.1, "x"),
    Target("limits", "typed.tree_share", "5 children ignoring SIGINT over the limit: "
           "`memory_limit`, MemoryLimitExceeded, no child left", "9", ">=", 1.0, "share"),
)

EDGES = (
    Target("edges", "lockout.attacked_max_s", "a fresh client's GET /health while silent and "
           "trickling connections are held: the slowest", "6", "<=", 2.0, "s"),
)

BASH = (
    Target("bash", "echo.ratio_p50", "`echo 1` on a bash context through POST /run, p50 ÷ a fresh "
           "`bash -c 'echo 1'` process's p50", "3", "<=", 3.0, "x"),
)

DISPLAY = (
    Target("display", "plain.added_us", "`1+1` through POST /run, p50 with the IPython "
           "extension kernelbridge_display minus without, interleaved", "2", "<=",
           200, "µs"),
    Target("display", "chart.added_pct", "a run showing a 1000-point line chart, p50 with the "
           "extension over without, interleaved", "2", "<=", 10, "%"),
)

FLEET = (
    Target("fleet", "place.min_per_sandbox", "30 contexts placed through the SDK on 3 sandboxes: "
           "the emptiest sandbox's count", "12", ">=", 8, "count"),
    Target("fleet", "restart.lost_contexts", "contexts of a killed sandbox lost on its restart "
           "(variable not back)", "12", "==", 0, "count"),
    Target("fleet", "outage.dead_max_s", "a run on a killed sandbox's context until "
           "SandboxUnavailable, the slowest", "12", "<=", 2.0, "s"),
)

MCP = (
    Target("mcp", "run.ratio_p50", "run_code `1+1` through POST /mcp, p50 ÷ POST /run's p50 on "
           "the same context, interleaved", "14", "<=", 1.10, "x"),
)

REGRESS = (
    Target("regress", "run.p50_ratio", "POST /run p50 against the build before a "
           "reorganisation, interleaved", "7", "<=", 1.05, "x"),
    Target("regress", "run.cpu_ratio", "the daemon's CPU per run against the build before",
           "7", "<=", 1.05, "x"),
    Target("regress", "memory.per_context_added_kib", "the daemon's RSS per context, added "
           "over the build before", "7", "<=", 8, "KiB"),
)

FORK = (
    Target("fork", "first_run_p50_ms.500mib", "fork to the first run's result, parent holding "
           "500 MiB, p50", "7, 13", "<=", 50, "ms"),
    Target("fork", "first_run_p50_ms.2048mib", "the same, parent holding 2 GiB, p50",
           "7, 13", "<=", 150, "ms"),
    Target("fork", "many.32_forks_s", "32 forks of the 500 MiB context in one request",
           "7, 13", "<=", 1.0, "s"),
    Target("fork", "uss_mib.500mib", "a fresh fork's private memory (USS), p50", "7, 13",
           "<=", 16, "MiB"),
)

CPU = _per_kernel("cpu", ("xpython", "python3"), (
    ("cpu_per_run_us", "daemon CPU per `1+1` run, all threads (schedstat)", "7", "<=",
     250, "µs"),
    ("overhead_us", "bridge overhead p50, back to back on the daemon's own kernel (paired)",
     "7", "<=", 150, "µs"),
))

HOGS = (
    Target("hogs", "after.ratio", "`1+1` on an idle context while 2 x cores contexts spin, "
           "long runs lowered (--hog-after 1): p50 ÷ quiet p50", "7", "<=", 1.5, "x"),
    Target("hogs", "after.health_p99_ms", "GET /health p99 while 2 x cores contexts spin",
           "7", "<=", 50, "ms"),
)

TEMPLATE = (
    Target("template", "create_p50_ms.template", "POST /contexts from the template, cold, p50",
           "7, 13", "<=", 20, "ms"),
    Target("template", "idle_uss_mib.template", "an idle context's private memory (USS) from the "
           "template, p50", "7, 13", "<=", 12, "MiB"),
    Target("template", "idle_pss_ratio", "idle contexts' total PSS, template / started kernels",
           "7, 13", "<=", 0.25, "x"),
)

TARGETS = (LATENCY + OVERHEAD + POOL + OUTPUT + SCALE + E2B + JUPYTER + DURABILITY + LIMITS + EDGES
           + BASH + DISPLAY + FLEET + REGRESS + FORK + MCP + CPU + HOGS + TEMPLATE)
