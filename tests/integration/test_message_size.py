"""The largest kernel message the daemon takes (--max-message-size, default
128 MiB). IPython's kernels get the limit at launch and do not send a
larger published message: the extension kernelbridge_display sends a
small note in its place, so what the run publishes after it is kept. Any
other message larger is refused by ZeroMQ as it arrives (ZMQ_MAXMSGSIZE),
never held whole (the backstop, shown here with --no-display-ext). Either
way the run ends with MessageTooLarge, `truncated: true` and a system line
saying so, and the context goes on working. Real ipykernel kernels, the
daemon's memory read from /proc (its peak, VmHWM, reset before each run
through clear_refs).

Memory: the kernel holds the 200 MiB string and its JSON (well under
1 GiB); the daemon is checked to stay within the run's cap + 32 MiB."""

import os
import re
import subprocess

from conftest import BINARY, status_kib, system_lines
from kernels_testlib import create, kernel_daemon_factory, run  # noqa: F401 (fixture)

MIB = 1 << 20
CAP = 64 * MIB  # --max-output's default


def reset_peak(pid):
    """VmHWM back to the current RSS (clear_refs "5")."""
    with open("/proc/%d/clear_refs" % pid, "w") as f:
        f.write("5")


def peak_over_idle(d, ctx, code):
    """(result, the daemon's peak RSS during the run minus its RSS before, bytes)."""
    run(d, ctx, "1+1")
    idle = status_kib(d.proc.pid, "VmRSS")
    reset_peak(d.proc.pid)
    result = run(d, ctx, code)
    return result, (status_kib(d.proc.pid, "VmHWM") - idle) * 1024


def check_refused(d, ctx, result, limit):
    assert result["error"]["name"] == "MessageTooLarge", result
    assert "max message size of %d bytes" % limit in result["error"]["value"], result
    assert result["truncated"] is True, result
    assert result["process"]["exit_code"] == 1 and result["process"]["reason"] == "exited"
    # the context goes on: its iopub connection was made again
    after = run(d, ctx, "print('still here'); 6*7")
    assert after["error"] is None, after
    assert after["logs"]["stdout"] == "still here\n", after
    assert [r["text"] for r in after["results"]] == ["42"], after


def test_one_message_over_the_default_limit_is_refused_never_held(kernel_daemon_factory):
    d = kernel_daemon_factory("--pool", "python=0")
    ctx = create(d, language="python")["context_id"]
    result, peak = peak_over_idle(d, ctx, "import sys\nsys.stdout.write('x' * (200 << 20))\n'end'")
    check_refused(d, ctx, result, 128 * MIB)
    assert "a stream message of" in result["error"]["value"], result["error"]
    assert result["logs"]["stdout"] == "", result["logs"]["stdout"][:100]
    # what came after the refused message is not lost
    assert [r["text"] for r in result["results"]] == ["'end'"], result["results"]
    assert peak <= CAP + 32 * MIB, "daemon peak %d MiB over idle" % (peak // MIB)


def test_output_after_a_refused_message_is_kept(kernel_daemon_factory):
    d = kernel_daemon_factory("--pool", "python=0", "--max-message-size", "4M")
    ctx = create(d, language="python")["context_id"]
    code = ("import sys\nprint('before', flush=True)\nsys.stdout.write('x' * (8 << 20))\n"
            "sys.stdout.flush()\nprint('after')\ndisplay('shown')\n'end'")
    result = run(d, ctx, code)
    check_refused(d, ctx, result, 4 * MIB)
    assert result["logs"]["stdout"] == "before\nafter\n", result["logs"]["stdout"][:100]
    assert [r["text"] for r in result["results"]] == ["'shown'", "'end'"], result["results"]
    # the size counted is the whole message's: its content and its header
    size = int(re.search(r"a stream message of (\d+) bytes", result["error"]["value"]).group(1))
    assert 8 * MIB < size < 8 * MIB + 4096, result["error"]


def test_a_result_over_the_limit_is_refused_and_the_run_ends_at_once(kernel_daemon_factory):
    d = kernel_daemon_factory("--pool", "python=0", "--max-message-size", "4M")
    ctx = create(d, language="python")["context_id"]
    result = run(d, ctx, "print('ok')\n'y' * (8 << 20)")
    check_refused(d, ctx, result, 4 * MIB)
    assert "a execute_result message of" in result["error"]["value"], result["error"]
    assert result["results"] == [] and result["logs"]["stdout"] == "ok\n", result
    # the kernel sent the note in its place: no connection was dropped
    system = system_lines(d, result["process"]["process_id"])
    assert any("was not sent by the kernel" in line for line in system), system
    assert not any("connection was made again" in line for line in system), system
    # an error raised after a refused message is the run's error
    failed = run(d, ctx, "import sys\nsys.stdout.write('z' * (8 << 20))\n1/0")
    assert failed["error"]["name"] == "ZeroDivisionError", failed["error"]
    assert failed["truncated"] is True


def test_a_smaller_limit_refuses_smaller_messages_at_the_socket(kernel_daemon_factory):
    """Without the extension the socket's limit refuses the message."""
    d = kernel_daemon_factory("--pool", "python=0", "--max-message-size", "4M", "--no-display-ext")
    ctx = create(d, language="python")["context_id"]
    # under the limit: taken whole
    ok = run(d, ctx, "import sys\nsys.stdout.write('y' * (3 << 20))")
    assert ok["error"] is None and len(ok["logs"]["stdout"]) == 3 * MIB, ok["error"]
    result = run(d, ctx, "import sys\nsys.stdout.write('x' * (8 << 20))")
    check_refused(d, ctx, result, 4 * MIB)
    assert any("connection was made again" in line for line in system_lines(d, result["process"]["process_id"]))
    assert d.ok("GET", "/health")["status"] == "ok"


def test_a_bad_max_message_size_is_refused():
    # 0 is not "no limit" (a message is never held whole) nor the default
    # in disguise; below 64K a kernel's own replies would not fit
    for value in ("abc", "-1", "0", "1K", "65535"):
        p = subprocess.run([BINARY, "serve", "--ephemeral", "--max-message-size", value],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and "--max-message-size" in p.stderr, p.stderr
    p = subprocess.run([BINARY, "serve", "--ephemeral"], capture_output=True, text=True,
                       timeout=30, env=dict(os.environ, KB_MAX_MESSAGE_SIZE="0"))
    assert p.returncode == 2, p.stderr
    assert "--max-message-size: bad value '0' (at least 64K)" in p.stderr, p.stderr
    p = subprocess.run([BINARY, "serve", "--max-message-size", "64K", "--help"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
