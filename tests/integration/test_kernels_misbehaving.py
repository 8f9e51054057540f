"""Kernels that misbehave, from the project's kernelspecs/ (small ipykernel
scripts), and kernel habits the bridge has to meet: a kernel that ignores
interrupts, one that handles SIGINT only late in each request, one that
dies on a marker, one that signs with a wrong key, one that never becomes
ready, one that floods iopub, one that publishes output after its idle
status, one that sends no execute_input and no busy status, and a kernelspec
whose argv starts with a bare `python`."""

import json
import os
import subprocess
import threading
import time

import pytest

from conftest import BINARY, pids_with_arg_under, rss_kib
from kernels_testlib import (KERNELSPECS, assert_ok, create, error_of, kernel_daemon,
                             kernel_daemon_factory, kernel_env, pid_alive, run, texts,
                             wait_until)

assert kernel_daemon and kernel_daemon_factory  # fixtures, used by name

TEST_KERNELS = ["kb-die-on-input", "kb-flood", "kb-ignore-interrupt", "kb-late-output",
                "kb-late-sigint", "kb-never-ready", "kb-no-execute-input", "kb-port-taken",
                "kb-wrong-key"]


def process_logs(d, result):
    return d.ok("GET", "/processes/%s/logs" % result["process"]["process_id"])["frames"]


def kernels_of(d, name):
    """PIDs of live kernels of kernelspec name launched by daemon d (with a
    connection file in its state dir)."""
    return pids_with_arg_under(str(d.state_dir) + "/", containing=name)


def test_kernelspecs_listed(kernel_daemon):
    specs = {s["name"]: s for s in kernel_daemon.ok("GET", "/kernelspecs")["kernelspecs"]}
    for name in TEST_KERNELS:
        assert os.path.realpath(specs[name]["resource_dir"]) == str(KERNELSPECS / name), specs[name]
        assert specs[name]["language"] == "python"
    for name in ("python3", "xpython", "ir", "octave", "deno"):
        assert name in specs, sorted(specs)


def test_cli_kernelspecs_lists_them_all(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
    env.update(kernel_env())
    out = subprocess.run([BINARY, "kernelspecs", "--json"], env=env, capture_output=True,
                         timeout=30, check=True).stdout
    names = {s["name"]: s["language"] for s in json.loads(out)["kernelspecs"]}
    expected = {"python3": "python", "xpython": "python", "ir": "R", "octave": "octave",
                "deno": "typescript"}
    for name, language in expected.items():
        assert names.get(name) == language, names
    assert set(TEST_KERNELS) <= set(names), names


# ---- kb-ignore-interrupt ------------------------------------------------------------


def test_timeout_kills_a_kernel_that_ignores_interrupts(kernel_daemon_factory):
    d = kernel_daemon_factory("--interrupt-grace", "1")
    ctx = create(d, kernel_name="kb-ignore-interrupt")
    pid = ctx["pid"]
    assert texts(run(d, ctx["context_id"], "6 * 7")) == ["42"]
    started = time.monotonic()
    result = d.run("import time\ntime.sleep(60)", context_id=ctx["context_id"], timeout=2)
    assert time.monotonic() - started < 15
    assert result["process"]["reason"] == "timed_out", result
    assert result["process"]["signal"] == "SIGKILL", result
    assert result["error"]["name"] == "TimeoutError", result
    assert "interrupt ignored" in result["process"]["raw_reason"], result
    assert wait_until(lambda: not pid_alive(pid), 15), pid
    error_of(d.get("/contexts/%s" % ctx["context_id"]), 404, "SESSION_NOT_FOUND")


# ---- kb-late-sigint -------------------------------------------------------------------


def test_an_early_interrupt_the_kernel_missed_is_sent_again(kernel_daemon_factory):
    # A tiny timeout interrupts the kernel before it handles SIGINT: that
    # signal is lost and the code runs on. The bridge interrupts once more
    # at half the grace instead of killing the kernel at its end.
    d = kernel_daemon_factory()  # the default grace, 2 s
    ctx = create(d, kernel_name="kb-late-sigint")
    cid, pid = ctx["context_id"], ctx["pid"]
    assert_ok(run(d, cid, "kept = 42"))
    run(d, cid, "1 / 0")  # IPython formats its first traceback slowly: not in the run timed
    started = time.monotonic()
    result = d.run("import time\ntime.sleep(30)", context_id=cid, timeout=0.001)
    elapsed = time.monotonic() - started
    assert result["process"]["reason"] == "timed_out", result
    assert result["process"]["signal"] == "SIGINT", result
    assert result["error"]["name"] == "TimeoutError", result
    assert 0.9 < elapsed < 2.0, elapsed  # the second signal at 1 s, before the kill at 2 s
    frames = process_logs(d, result)
    assert any(f["channel"] == "system" and "interrupting again" in f["data"]
               for f in frames), frames
    context = d.ok("GET", "/contexts/%s" % cid)
    assert context["pid"] == pid and context["state"] == "idle", context
    assert texts(run(d, cid, "kept")) == ["42"]


# ---- kb-die-on-input ------------------------------------------------------------------


def test_kernel_exit_status_on_death(kernel_daemon):
    ctx = create(kernel_daemon, kernel_name="kb-die-on-input")["context_id"]
    assert_ok(run(kernel_daemon, ctx, "kept = 1"))
    result = run(kernel_daemon, ctx, "__kb_exit__")
    assert result["process"]["reason"] == "failed", result
    assert result["process"]["exit_code"] == 9, result
    assert result["process"]["signal"] is None, result
    assert result["error"]["name"] == "KernelDied", result
    body = error_of(kernel_daemon.get("/contexts/%s" % ctx), 404, "SESSION_NOT_FOUND")
    assert "vanished" in body["message"], body


def test_kernel_signal_on_death(kernel_daemon):
    ctx = create(kernel_daemon, kernel_name="kb-die-on-input")["context_id"]
    result = run(kernel_daemon, ctx, "__kb_segv__")
    assert result["process"]["reason"] == "failed", result
    assert result["process"]["signal"] == "SIGSEGV", result
    assert result["process"]["exit_code"] is None, result
    assert "SIGSEGV" in result["process"]["raw_reason"], result


def test_default_context_starts_afresh_after_death(kernel_daemon):
    first = kernel_daemon.run("import os\nos.getpid()", kernel_name="kb-die-on-input",
                              timeout=60)
    died = kernel_daemon.run("__kb_exit__", kernel_name="kb-die-on-input", timeout=60)
    assert died["process"]["reason"] == "failed", died
    again = kernel_daemon.run("import os\nos.getpid()", kernel_name="kb-die-on-input",
                              timeout=60)
    assert_ok(again)
    assert texts(again) != texts(first)


# ---- kb-wrong-key ---------------------------------------------------------------------


def test_mis_signed_replies_are_dropped_and_counted(kernel_daemon_factory):
    d = kernel_daemon_factory()
    ctx = create(d, kernel_name="kb-wrong-key")
    assert ctx["dropped_messages"] == 0, ctx
    started = time.monotonic()
    result = run(d, ctx["context_id"], "print('mis-signed output')\n'mis-signed value'")
    # Only the idle status was signed right: the reply never came, the run
    # ends by the bridge's rule, and nothing mis-signed is shown.
    assert time.monotonic() - started < 30
    assert result["results"] == [], result
    assert result["logs"] == {"stdout": "", "stderr": ""}, result
    assert "mis-signed" not in json.dumps(result)
    frames = process_logs(d, result)
    assert any(f["channel"] == "system" and "execute_reply never came" in f["data"]
               for f in frames), frames
    assert not any("mis-signed" in f["data"] for f in frames), frames
    context = d.ok("GET", "/contexts/%s" % ctx["context_id"])
    assert context["dropped_messages"] >= 3, context  # execute_input, stream, result, reply
    assert context["state"] == "idle", context


def test_kernel_signing_everything_wrong_never_starts(kernel_daemon_factory):
    d = kernel_daemon_factory("--start-timeout", "4")
    started = time.monotonic()
    r = d.post("/contexts", {"kernel_name": "kb-wrong-key", "env": {"WRONG_KEY": "all"}})
    error_of(r, 503, "KERNEL_START_FAILED")
    assert time.monotonic() - started < 20
    assert wait_until(lambda: not kernels_of(d, "kb-wrong-key"), 15)


# ---- kb-port-taken --------------------------------------------------------------------


def starts_of(path):
    return [int(line) for line in path.read_text().split()]


def test_a_kernel_whose_port_was_taken_is_started_again_on_new_ports(kernel_daemon_factory,
                                                                      tmp_path):
    d = kernel_daemon_factory()
    starts = tmp_path / "starts"
    ctx = create(d, kernel_name="kb-port-taken", env={"PORT_TAKEN_FILE": str(starts)})
    first, second = starts_of(starts)
    assert ctx["pid"] == second and not pid_alive(first)
    assert texts(run(d, ctx["context_id"], "6 * 7")) == ["42"]
    log = d.stdout
    assert "a port of its kernel was taken before the kernel bound it" in log, log
    assert "Address already in use" in log, log
    assert kernels_of(d, "kb-port-taken") == [second]


def test_a_port_taken_twice_fails_the_start_and_leaves_nothing(kernel_daemon_factory, tmp_path):
    d = kernel_daemon_factory()
    kernels = d.state_dir / "kernels"
    before = sorted(os.listdir(kernels))
    starts = tmp_path / "starts"
    body = error_of(d.post("/contexts", {"kernel_name": "kb-port-taken",
                                         "env": {"PORT_TAKEN_FILE": str(starts),
                                                 "PORT_TAKEN_TIMES": "2"}}),
                    503, "KERNEL_START_FAILED")
    assert "Address already in use" in body["message"], body
    assert len(starts_of(starts)) == 2, "started again once, not more"
    assert kernels_of(d, "kb-port-taken") == []
    assert sorted(os.listdir(kernels)) == before
    assert d.stdout.count("started again on new ports") == 1


# ---- kb-never-ready -------------------------------------------------------------------


def test_start_times_out_with_the_kernels_stderr(kernel_daemon_factory):
    d = kernel_daemon_factory("--start-timeout", "3")
    started = time.monotonic()
    r = d.post("/contexts", {"kernel_name": "kb-never-ready", "context_id": "never"})
    elapsed = time.monotonic() - started
    body = error_of(r, 503, "KERNEL_START_FAILED")
    assert 2.5 < elapsed < 20, elapsed
    assert "it will never answer kernel_info_request" in body["message"], body
    # The kernel is gone, and so is the context.
    assert wait_until(lambda: not kernels_of(d, "kb-never-ready"), 15)
    error_of(d.get("/contexts/never"), 404, "SESSION_NOT_FOUND")
    # A run for it fails the same way, before it starts.
    r = d.post("/run", {"code": "1", "kernel_name": "kb-never-ready"})
    error_of(r, 503, "KERNEL_START_FAILED")
    assert d.ok("GET", "/health")["status"] == "ok"


# ---- kb-flood -------------------------------------------------------------------------


def test_flood_of_unparented_output_never_mixes_into_runs(kernel_daemon_factory):
    d = kernel_daemon_factory()
    ctx = create(d, kernel_name="kb-flood")["context_id"]
    rss_before = rss_kib(d.proc.pid)
    for i in range(20):
        started = time.monotonic()
        result = run(d, ctx, "print('run %d')\n%d * 2" % (i, i))
        assert time.monotonic() - started < 10
        assert_ok(result)
        assert result["logs"]["stdout"] == "run %d\n" % i, result["logs"]
        assert texts(result) == [str(i * 2)]
    # The daemon answers promptly while the flood goes on, and holds no
    # backlog of it.
    for _ in range(5):
        started = time.monotonic()
        assert d.ok("GET", "/health")["status"] == "ok"
        assert time.monotonic() - started < 2
        time.sleep(0.2)
    assert rss_kib(d.proc.pid) < rss_before + 64 * 1024, (rss_before, rss_kib(d.proc.pid))


def test_flood_of_a_runs_output_is_capped(kernel_daemon_factory):
    d = kernel_daemon_factory("--max-output", "1M")
    ctx = create(d, kernel_name="kb-flood")["context_id"]
    result = run(d, ctx, "__kb_flood__ 16\nprint('after')")
    assert result["truncated"] is True, result["process"]
    assert 0 < len(result["logs"]["stdout"]) <= 1024 * 1024
    assert result["process"]["exit_code"] == 0, result["process"]
    assert any(f["channel"] == "system" for f in process_logs(d, result))
    # The context goes on, with its own output only.
    after = run(d, ctx, "print('small')")
    assert after["logs"]["stdout"] == "small\n" and after["truncated"] is False


def test_streamed_flood_reaches_the_client(kernel_daemon_factory):
    d = kernel_daemon_factory()
    ctx = create(d, kernel_name="kb-flood")["context_id"]
    stream = d.run_stream("__kb_flood__ 8", context_id=ctx, timeout=60)
    total, last = 0, None
    try:
        for event in stream.events():
            if event.event == "stdout":
                total += len(event.data["text"])
            last = event
    finally:
        stream.close()
    assert total == 8 * 1024 * 1024, total
    assert last.event == "result" and len(last.data["logs"]["stdout"]) == total


# ---- kb-late-output, kb-no-execute-input ----------------------------------------------


def test_output_after_idle_is_kept(kernel_daemon):
    ctx = create(kernel_daemon, kernel_name="kb-late-output")["context_id"]
    for i in range(3):
        result = run(kernel_daemon, ctx, "print('early %d')\n%d * 2" % (i, i))
        assert_ok(result)
        assert result["logs"]["stdout"] == "early %d\nlate output\n" % i, result
        assert texts(result) == [str(i * 2), "late display"], result
        assert [r["is_main_result"] for r in result["results"]] == [True, False]


def test_output_after_idle_streams_before_result(kernel_daemon):
    ctx = create(kernel_daemon, kernel_name="kb-late-output")["context_id"]
    stream = kernel_daemon.run_stream("1", context_id=ctx, timeout=60)
    try:
        kinds = [(e.event, e.raw) for e in stream.events()]
    finally:
        stream.close()
    names = [k for k, _ in kinds]
    assert names[0] == "start" and names[-1] == "result", names
    assert names.index("stdout") < names.index("result")
    assert sum(1 for k, _ in kinds if k == "display") == 2, names


def test_no_execute_input_and_no_busy(kernel_daemon):
    ctx = create(kernel_daemon, kernel_name="kb-no-execute-input")["context_id"]
    first = run(kernel_daemon, ctx, "x = 20")
    assert_ok(first)
    result = run(kernel_daemon, ctx, "print('hi')\nx + 22")
    assert_ok(result)
    assert result["logs"]["stdout"] == "hi\n"
    assert texts(result) == ["42"]
    assert result["execution_count"] == first["execution_count"] + 1
    assert kernel_daemon.ok("GET", "/contexts/%s" % ctx)["execution_count"] == \
        result["execution_count"]


# ---- a kernelspec whose argv starts with a bare python -------------------------------


def test_bare_python_in_argv_is_the_system_python(daemon_factory, tmp_path):
    spec = tmp_path / "kernels" / "bare-python"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "bare python", "language": "python"}))
    # A `python` first on PATH that is not the system's: the bridge does not
    # run it (as jupyter_client runs its own sys.executable instead).
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python").write_text("#!/bin/sh\necho 'not this python' >&2\nexit 3\n")
    (bindir / "python").chmod(0o755)
    env = kernel_env(JUPYTER_PATH=str(tmp_path),
                     PATH="%s:%s" % (bindir, os.environ.get("PATH", "/usr/bin:/bin")))
    d = daemon_factory(env=env)
    ctx = create(d, kernel_name="bare-python")["context_id"]
    result = run(d, ctx, "import sys\nsys.executable")
    assert texts(result) == ["'/usr/bin/python3'"], result


def test_concurrent_runs_on_misbehaving_and_good_kernels(kernel_daemon_factory):
    # A flooding kernel and one that ignores interrupts do not slow down a
    # good context next to them.
    d = kernel_daemon_factory("--interrupt-grace", "1")
    flood = create(d, kernel_name="kb-flood")["context_id"]
    stuck = create(d, kernel_name="kb-ignore-interrupt")["context_id"]
    good = create(d, language="python")["context_id"]
    outcome = {}

    def stuck_run():
        outcome["stuck"] = d.run("import time\ntime.sleep(60)", context_id=stuck, timeout=3)

    thread = threading.Thread(target=stuck_run)
    thread.start()
    try:
        for i in range(10):
            started = time.monotonic()
            assert texts(run(d, good, "%d + 1" % i)) == [str(i + 1)]
            assert texts(run(d, flood, "%d + 2" % i)) == [str(i + 2)]
            assert time.monotonic() - started < 5
    finally:
        thread.join(30)
    assert outcome["stuck"]["process"]["reason"] == "timed_out", outcome


@pytest.mark.parametrize("name", TEST_KERNELS)
def test_kernelspec_files(name):
    spec = json.loads((KERNELSPECS / name / "kernel.json").read_text())
    assert spec["argv"][0] == "/usr/bin/python3"
    assert spec["argv"][1] == "{resource_dir}/kernel.py"
    assert "{connection_file}" in spec["argv"]
    assert (KERNELSPECS / name / "kernel.py").is_file()


def test_daemon_is_usable_after_every_test_kernel(kernel_daemon):
    assert kernel_daemon.ok("GET", "/health")["status"] == "ok"
    assert texts(kernel_daemon.run("1 + 1", timeout=60)) == ["2"]

