"""GET /metrics (SPEC section 11): Prometheus' text format, token-protected,
clean under `promtool check metrics`; runs, kernel starts, dropped kernel
messages, contexts, the pool, output, HTTP requests and the process'
own families; --metrics-listen serving it alone elsewhere; /health's
dropped_messages. A real daemon, real kernels, Debian's promtool."""

import http.client
import json
import re
import subprocess
import time

from conftest import error_of, wait_until
from kernels_testlib import JUPYTER_PATH, create, kernel_daemon_factory, run

assert kernel_daemon_factory  # a fixture, used by name

TOKEN = "metrics-test-token"
PROMTOOL = "/usr/bin/promtool"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

FAMILIES = {
    "kernelbridge_runs_total": "counter",
    "kernelbridge_run_duration_seconds": "histogram",
    "kernelbridge_contexts": "gauge",
    "kernelbridge_pool_ready": "gauge",
    "kernelbridge_kernel_starts_total": "counter",
    "kernelbridge_kernel_start_duration_seconds": "histogram",
    "kernelbridge_kernel_messages_dropped_total": "counter",
    "kernelbridge_http_requests_total": "counter",
    "kernelbridge_output_bytes_total": "counter",
    "kernelbridge_output_memory_bytes": "gauge",
    "process_resident_memory_bytes": "gauge",
    "process_virtual_memory_bytes": "gauge",
    "process_cpu_seconds_total": "counter",
    "process_open_fds": "gauge",
    "process_max_fds": "gauge",
    "process_start_time_seconds": "gauge",
}

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Metrics:
    """One scrape: the TYPE of each family, and each sample's value by
    name and labels."""

    def __init__(self, text):
        self.text = text
        self.types = {}
        self.samples = {}
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ")
                self.types[name] = kind
            elif line and not line.startswith("#"):
                m = SAMPLE.match(line)
                assert m, "not a sample line: %r" % line
                labels = frozenset(LABEL.findall(m.group(2) or ""))
                self.samples[(m.group(1), labels)] = float(m.group(3))

    def get(self, name, **labels):
        """The sample's value; 0 for a series not shown yet."""
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def series(self, name):
        return {labels: v for (n, labels), v in self.samples.items() if n == name}

    def label_values(self):
        return {value for (_, labels) in self.samples for _, value in labels}


def scrape(d, conn=None, token=None):
    r = d.get("/metrics", conn=conn, token=token)
    assert r.status == 200, r
    assert r.header("Content-Type") == CONTENT_TYPE, r.headers
    return Metrics(r.body.decode())


def promtool_check(text):
    """`promtool check metrics` on text: exit 0 and not a word of lint."""
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(),
                          capture_output=True, timeout=60)
    output = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode == 0 and not output.strip(), output


def test_metrics_need_the_token_and_pass_promtool(daemon_factory):
    d = daemon_factory("--pool", "python=1", token=TOKEN)
    error_of(d.get("/metrics", token=""), 401, "UNAUTHORIZED")
    error_of(d.get("/metrics", token="wrong"), 401, "UNAUTHORIZED")
    ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
    result = d.run("print('hello')", context_id=ctx["context_id"])
    isolated = d.run("1 + 1", isolated=True)
    m = scrape(d)
    promtool_check(m.text)
    for family, kind in FAMILIES.items():
        assert m.types.get(family) == kind, (family, m.types.get(family))
    # Only counters end in _total.
    for family, kind in m.types.items():
        assert family.endswith("_total") == (kind == "counter"), family
    # No context, process or kernel id, and no pid, in a label.
    contexts = d.ok("GET", "/contexts?all=true")["contexts"]
    ids = {c["context_id"] for c in contexts} | {c["kernel_id"] for c in contexts}
    ids |= {result["process"]["process_id"], isolated["process"]["process_id"],
            isolated["context"]["context_id"]}
    pids = {str(c["pid"]) for c in contexts} | {str(d.proc.pid)}
    values = m.label_values()
    assert not values & ids, values & ids
    assert not values & pids, values & pids
    assert not any(re.match(r"(ctx|prc|iso|sb)_", v) for v in values), values
    # The process' own families are plausible.
    assert m.get("process_resident_memory_bytes") > 1 << 20
    assert m.get("process_virtual_memory_bytes") >= m.get("process_resident_memory_bytes")
    assert 3 < m.get("process_open_fds") <= m.get("process_max_fds")
    assert 0 < m.get("process_cpu_seconds_total") < 600
    assert abs(m.get("process_start_time_seconds") - time.time()) < 300


def test_runs_and_their_output_are_counted(daemon_factory):
    d = daemon_factory("--pool", "python=0")
    d.run("0")  # the default context is up
    before = scrape(d)
    ok = d.run("import sys\nprint('o' * 1000)\nprint('e' * 500, file=sys.stderr)\n42")
    assert ok["process"]["reason"] == "exited" and ok["error"] is None, ok
    failed = d.run("raise ValueError('no')")
    assert failed["process"]["reason"] == "exited" and failed["error"]["name"] == "ValueError"
    timed_out = d.run("import time\ntime.sleep(60)", timeout=1)
    assert timed_out["process"]["reason"] == "timed_out", timed_out
    after = scrape(d)

    def delta(name, **labels):
        return after.get(name, **labels) - before.get(name, **labels)

    assert delta("kernelbridge_runs_total", language="python", reason="exited") == 2
    assert delta("kernelbridge_runs_total", language="python", reason="timed_out") == 1
    for reason in ("signaled", "failed", "sandbox_stopped", "memory_limit", "pids_limit"):
        assert delta("kernelbridge_runs_total", language="python", reason=reason) == 0, reason
    assert delta("kernelbridge_run_duration_seconds_count", language="python") == 3
    assert delta("kernelbridge_run_duration_seconds_bucket", language="python", le="+Inf") == 3
    # The timed-out run spent about its second on the kernel.
    assert 0.5 < delta("kernelbridge_run_duration_seconds_sum", language="python") < 30
    assert delta("kernelbridge_run_duration_seconds_bucket", language="python", le="0.5") <= 2
    assert delta("kernelbridge_output_bytes_total", channel="stdout") >= 1001
    assert delta("kernelbridge_output_bytes_total", channel="stderr") >= 501
    assert delta("kernelbridge_output_bytes_total", channel="display") >= 2  # "42"
    assert after.get("kernelbridge_output_memory_bytes") > 1500
    health = d.ok("GET", "/health")
    assert after.get("kernelbridge_output_memory_bytes") <= health["output_memory"]["peak"]


def test_contexts_pool_and_kernel_starts(daemon_factory):
    d = daemon_factory("--pool", "python=1", token=TOKEN)
    assert wait_until(lambda: d.ok("GET", "/health")["pool"]["python"]["ready"] == 1, 60)
    before = scrape(d)
    health = d.ok("GET", "/health")
    assert before.get("kernelbridge_pool_ready", language="python") == \
        health["pool"]["python"]["ready"] == 1
    starts = before.get("kernelbridge_kernel_starts_total", kernel_name="python3", outcome="ok")
    assert starts >= 1
    assert before.get("kernelbridge_kernel_start_duration_seconds_count") == starts

    ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
    # The context took the pooled kernel; the pool starts another one.
    assert wait_until(lambda: d.ok("GET", "/health")["pool"]["python"]["ready"] == 1, 60)
    after = scrape(d)
    assert after.get("kernelbridge_kernel_starts_total", kernel_name="python3",
                     outcome="ok") == starts + 1
    assert after.get("kernelbridge_kernel_start_duration_seconds_count") == starts + 1
    assert after.get("kernelbridge_kernel_start_duration_seconds_sum") > 0
    assert after.get("kernelbridge_pool_ready", language="python") == 1
    # contexts{state} counts what GET /contexts?all=true shows.
    d.run("1", context_id=ctx["context_id"])
    d.run("1")  # the default context too
    m = scrape(d)
    shown = d.ok("GET", "/contexts?all=true")["contexts"]
    assert len(shown) == 2
    for state in ("starting", "idle", "busy", "dead"):
        assert m.get("kernelbridge_contexts", state=state) == \
            sum(1 for c in shown if c["state"] == state), state
    assert m.get("kernelbridge_contexts", state="idle") == 2
    d.ok("DELETE", "/contexts/%s" % ctx["context_id"], status=204)
    m = scrape(d)
    assert sum(m.series("kernelbridge_contexts").values()) == 1


def test_http_requests_are_counted_by_method_and_code(daemon_factory):
    d = daemon_factory("--pool", "python=0")
    conn = d.connect()  # one connection: each request is counted before the next
    try:
        before = scrape(d, conn=conn)
        error_of(d.get("/nope", conn=conn), 404, "NOT_FOUND")
        assert d.request("DELETE", "/health", conn=conn).status == 405
        assert d.request("PURGE", "/health", conn=conn).status == 405
        after = scrape(d, conn=conn)
    finally:
        conn.close()
    counts = after.series("kernelbridge_http_requests_total")
    assert counts, after.text

    def delta(method, code):
        labels = dict(method=method, code=code)
        return after.get("kernelbridge_http_requests_total", **labels) - \
            before.get("kernelbridge_http_requests_total", **labels)

    assert delta("GET", "404") == 1
    assert delta("GET", "200") == 1  # the first scrape
    assert delta("DELETE", "405") == 1
    assert delta("other", "405") == 1  # methods outside the known few share one label
    assert {dict(k)["method"] for k in counts} <= {"GET", "HEAD", "POST", "PUT", "DELETE",
                                                  "PATCH", "OPTIONS", "other"}


def test_metrics_listen_serves_metrics_alone(daemon_factory):
    d = daemon_factory("--pool", "python=0", "--metrics-listen", "127.0.0.1:0",
                       "--metrics-port-file", "metrics-port", token=TOKEN)
    port_file = d.dir / "metrics-port"
    assert wait_until(port_file.exists, 30), d.log
    port = int(port_file.read_text())
    assert port != d.port

    def on_metrics(method, path, token=None):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            return d.request(method, path, conn=conn, token=token)
        finally:
            conn.close()

    error_of(on_metrics("GET", "/metrics", token=""), 401, "UNAUTHORIZED")
    error_of(d.get("/nope"), 404, "NOT_FOUND")  # on the native listener
    r = on_metrics("GET", "/metrics")
    assert r.status == 200 and r.header("Content-Type") == CONTENT_TYPE, r
    m = Metrics(r.body.decode())
    promtool_check(m.text)
    assert m.get("kernelbridge_http_requests_total", method="GET", code="404") >= 1
    health = on_metrics("GET", "/health", token="")
    assert health.status == 200 and health.json["status"] == "ok", health
    assert "dropped_messages" in health.json
    error_of(on_metrics("GET", "/contexts"), 404, "NOT_FOUND")
    error_of(on_metrics("POST", "/run", token=TOKEN), 404, "NOT_FOUND")
    error_of(on_metrics("POST", "/metrics"), 405, "METHOD_NOT_ALLOWED")
    # The native listener serves /metrics too.
    assert d.get("/metrics").status == 200


def test_metrics_listen_from_the_environment(daemon_factory):
    d = daemon_factory("--pool", "python=0", env={"KB_METRICS_LISTEN": "127.0.0.1:0",
                                                  "KB_METRICS_PORT_FILE": "mport"})
    port_file = d.dir / "mport"
    assert wait_until(port_file.exists, 30), d.log
    conn = http.client.HTTPConnection("127.0.0.1", int(port_file.read_text()), timeout=30)
    try:
        promtool_check(scrape(d, conn=conn).text)
    finally:
        conn.close()


def test_dropped_messages_are_counted_by_reason(kernel_daemon_factory):
    d = kernel_daemon_factory("--pool", "python=0")
    health = d.ok("GET", "/health")
    assert health["dropped_messages"] == 0, health
    assert health["dropped_messages_by_reason"]["bad_signature"] == 0, health
    ctx = create(d, kernel_name="kb-wrong-key")
    run(d, ctx["context_id"], "print('mis-signed output')")
    health = d.ok("GET", "/health")
    context = d.ok("GET", "/contexts/%s" % ctx["context_id"])
    assert context["dropped_messages"] >= 3, context
    assert health["dropped_messages"] >= context["dropped_messages"], health
    assert health["dropped_messages_by_reason"]["bad_signature"] >= 3, health
    m = scrape(d)
    promtool_check(m.text)
    bad = m.get("kernelbridge_kernel_messages_dropped_total", reason="bad_signature")
    assert bad >= health["dropped_messages_by_reason"]["bad_signature"], m.text
    for reason in ("malformed", "replayed", "too_large", "too_many_parts"):
        assert m.get("kernelbridge_kernel_messages_dropped_total", reason=reason) == 0, reason
    # The count outlives the kernel.
    d.ok("DELETE", "/contexts/%s" % ctx["context_id"], status=204)
    after = scrape(d)
    assert after.get("kernelbridge_kernel_messages_dropped_total", reason="bad_signature") >= bad
    assert d.ok("GET", "/health")["dropped_messages"] >= bad


def test_kernel_start_outcomes(kernel_daemon_factory, tmp_path):
    # A kernelspec whose kernel exits at once, beside the test kernels.
    spec_dir = tmp_path / "kernels" / "kb-exits"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": ["/bin/sh", "-c", "exit 3", "kb-exits", "{connection_file}"],
        "display_name": "exits at once", "language": "kb-exits"}))
    d = kernel_daemon_factory("--pool", "python=0", "--start-timeout", "3",
                              env={"JUPYTER_PATH": "%s:%s" % (tmp_path, JUPYTER_PATH)})
    error_of(d.post("/contexts", {"kernel_name": "kb-exits"}), 503, "KERNEL_START_FAILED")
    error_of(d.post("/contexts", {"kernel_name": "kb-never-ready"}), 503, "KERNEL_START_FAILED")
    # Signing everything wrong: it never starts (what it sent, if it got that
    # far on a loaded machine, is dropped: test_dropped_messages_... counts it).
    error_of(d.post("/contexts", {"kernel_name": "kb-wrong-key", "env": {"WRONG_KEY": "all"}}),
             503, "KERNEL_START_FAILED")
    m = scrape(d)
    promtool_check(m.text)

    def starts(name, outcome):
        return m.get("kernelbridge_kernel_starts_total", kernel_name=name, outcome=outcome)

    assert starts("kb-exits", "failed") == 1 and starts("kb-exits", "ok") == 0, m.text
    assert starts("kb-never-ready", "timeout") == 1, m.text
    assert starts("kb-wrong-key", "timeout") == 1, m.text
    assert m.get("kernelbridge_kernel_start_duration_seconds_count") == 0
