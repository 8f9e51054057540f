"""Python kernels through the daemon: ipykernel (kernelspec python3) and
xeus-python (xpython), each for the same contract: state, streams, main
result, errors, rich output, timeout with interrupt, kernel death and
per-run cwd/env through the Python adapter."""

import base64
import time

import pytest

from kernels_testlib import (assert_ok, assert_raised, check_cwd_env, check_kernel_death,
                             check_timeout_interrupts, check_timeout_kernel_dies, create,
                             kernel_daemon, lines, run, texts)

assert kernel_daemon  # a fixture, used by name

PYTHON_KERNELS = ["python3", "xpython"]


@pytest.fixture(scope="module")
def contexts(kernel_daemon):
    """One context per Python kernel, shared by the tests that keep it alive."""
    made = {}
    for name in PYTHON_KERNELS:
        made[name] = create(kernel_daemon, kernel_name=name)["context_id"]
    return made


def test_language_python_is_ipykernel(kernel_daemon):
    ctx = create(kernel_daemon, language="python")
    assert ctx["kernel_name"] == "python3"
    assert ctx["language"] == "python"
    kernel_daemon.ok("DELETE", "/contexts/%s" % ctx["context_id"], status=204)


@pytest.mark.parametrize("kernel", PYTHON_KERNELS)
def test_state_streams_and_main_result(kernel_daemon, contexts, kernel):
    d, ctx = kernel_daemon, contexts[kernel]
    assert d.ok("GET", "/contexts/%s" % ctx)["kernel_name"] == kernel
    assert_ok(run(d, ctx, "x = 41"))
    result = run(d, ctx, "import sys\nprint('to stdout')\nprint('to stderr', file=sys.stderr)\nx + 1")
    assert_ok(result)
    assert result["logs"]["stdout"] == "to stdout\n"
    assert result["logs"]["stderr"] == "to stderr\n"
    assert texts(result) == ["42"]
    assert result["results"][0]["is_main_result"] is True
    assert result["execution_count"] >= 2


@pytest.mark.parametrize("kernel", PYTHON_KERNELS)
def test_error(kernel_daemon, contexts, kernel):
    error = assert_raised(run(kernel_daemon, contexts[kernel], "raise ValueError('bad thing')"))
    assert error["name"] == "ValueError"
    assert error["value"] == "bad thing"
    assert any("ValueError" in line for line in error["traceback"]), error
    # The context goes on.
    assert texts(run(kernel_daemon, contexts[kernel], "x")) == ["41"]


@pytest.mark.parametrize("kernel", PYTHON_KERNELS)
def test_rich_output(kernel_daemon, contexts, kernel):
    code = ("from IPython.display import HTML, display\n"
            "display(HTML('<b>bold</b>'))\n"
            "import matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n"
            "from IPython.display import Image\nimport io\n"
            "buf = io.BytesIO(); plt.plot([1, 3, 2]); plt.savefig(buf, format='png')\n"
            "display(Image(buf.getvalue()))")
    result = run(kernel_daemon, contexts[kernel], code)
    assert_ok(result)
    html = [r for r in result["results"] if r["html"]]
    png = [r for r in result["results"] if r["png"]]
    assert html and html[0]["html"] == "<b>bold</b>", result["results"]
    assert png and base64.b64decode(png[0]["png"]).startswith(b"\x89PNG"), result["results"]
    assert all(not r["is_main_result"] for r in result["results"])


LOOP = "import time\nwhile True:\n    time.sleep(0.05)"


def test_timeout_interrupts_ipykernel(kernel_daemon, contexts):
    check_timeout_interrupts(kernel_daemon, contexts["python3"], LOOP, "x", "41")


def test_tiny_timeouts_keep_the_ipykernel_context(kernel_daemon):
    # A timeout of a few milliseconds fires while ipykernel is still taking
    # up the request: a SIGINT then is ignored (the code runs on), drops the
    # request in ipykernel's own code (status: idle and no execute_reply) or
    # ends the kernel. Every run ends typed and soon, and the kernel and its
    # variables stay. Odd runs sleep: only an interrupt that reaches the
    # code ends them in time.
    d = kernel_daemon
    ctx = create(d, kernel_name="python3")
    cid, pid = ctx["context_id"], ctx["pid"]
    assert_ok(run(d, cid, "x = 41"))
    # IPython is slow to format the first traceback of a kernel; let that be
    # done before the runs below are timed.
    assert_raised(run(d, cid, "1 / 0"))
    for i in range(40):
        timeout = 0.001 * (1 + i % 5)
        sleeps = i % 2 == 1
        code = "import time\ntime.sleep(30)" if sleeps else "y = x + 1"
        started = time.monotonic()
        result = d.run(code, context_id=cid, timeout=timeout)
        elapsed = time.monotonic() - started
        what = (i, timeout, round(elapsed, 3), result)
        if result["process"]["reason"] == "exited" and not sleeps:
            assert_ok(result)  # done before the timeout fired
        else:
            assert result["process"]["reason"] == "timed_out", what
            assert result["process"]["signal"] == "SIGINT", what
            assert result["process"]["exit_code"] is None, what
            assert result["error"]["name"] == "TimeoutError", what
        # Sooner than the interrupt grace (2 s, the kill) and the wait for a
        # missing message of a run that was not interrupted (3 s).
        assert elapsed < 2.0, what
        context = d.ok("GET", "/contexts/%s" % cid)
        assert context["pid"] == pid and context["state"] == "idle", (i, context)
    assert texts(run(d, cid, "x")) == ["41"]
    d.ok("DELETE", "/contexts/%s" % cid, status=204)


def test_timeout_xpython_cannot_be_interrupted(kernel_daemon):
    # xeus-python 0.14 exits on SIGINT and ignores interrupt_request: the
    # run times out all the same, and its context goes with the kernel.
    ctx = create(kernel_daemon, kernel_name="xpython")["context_id"]
    assert_ok(run(kernel_daemon, ctx, "y = 1"))
    check_timeout_kernel_dies(kernel_daemon, ctx, LOOP)


@pytest.mark.parametrize("kernel", PYTHON_KERNELS)
def test_cwd_env(kernel_daemon, contexts, kernel, tmp_path):
    def parse(result):
        assert_ok(result)
        cwd, value = lines(result["logs"]["stdout"])
        return cwd, None if value == "<unset>" else value

    check_cwd_env(kernel_daemon, contexts[kernel],
                  "import os\nprint(os.getcwd())\nprint(os.environ.get('KBT_VAR', '<unset>'))",
                  tmp_path, parse)


@pytest.mark.parametrize("kernel", PYTHON_KERNELS)
def test_kernel_exit_during_run(kernel_daemon, kernel):
    ctx = create(kernel_daemon, kernel_name=kernel)["context_id"]
    result = run(kernel_daemon, ctx, "import os\nos._exit(3)")
    assert result["process"]["reason"] == "failed", result
    assert result["process"]["exit_code"] == 3, result
    assert result["process"]["signal"] is None, result
    assert result["error"]["name"] == "KernelDied", result
    body = kernel_daemon.get("/contexts/%s" % ctx).json
    assert body["code"] == "SESSION_NOT_FOUND", body


@pytest.mark.parametrize("kernel", PYTHON_KERNELS)
def test_kernel_killed_during_run(kernel_daemon, kernel):
    ctx = create(kernel_daemon, kernel_name=kernel)["context_id"]
    check_kernel_death(kernel_daemon, ctx, "import time\ntime.sleep(60)")
