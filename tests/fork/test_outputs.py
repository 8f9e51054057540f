"""A fork is a whole kernel: every output type, stdin and interrupt."""

import os
import signal
import threading
import time

import pytest

from .forklib import execute, stdout_of, value

pytestmark = pytest.mark.usefixtures("forks_are_our_children")


def types(outputs):
    return [m["msg_type"] for m in outputs if m["msg_type"] not in ("status", "execute_input")]


def test_stream_and_execute_result(parent, forks):
    _, kc = parent
    execute(kc, "x = 20")
    fork = forks.of(kc)
    content, outputs = execute(fork.kc, "import sys\nprint('out')\nprint('err', file=sys.stderr)\nx + 1")
    assert content["status"] == "ok"
    streams = {m["content"]["name"]: m["content"]["text"] for m in outputs if m["msg_type"] == "stream"}
    assert streams == {"stdout": "out\n", "stderr": "err\n"}
    result = [m for m in outputs if m["msg_type"] == "execute_result"]
    assert result[0]["content"]["data"]["text/plain"] == "21"
    assert result[0]["content"]["execution_count"] == content["execution_count"]


def test_rich_display_data_and_a_png_from_matplotlib_inline(parent, forks):
    _, kc = parent
    execute(kc, "import matplotlib.pyplot as plt\nplt.plot([1, 2])")
    fork = forks.of(kc)
    content, outputs = execute(fork.kc, "import pandas as pd\n"
                                        "display(pd.DataFrame({'a': [1]}))\n"
                                        "plt.figure()\nplt.plot([3, 1, 2])\nplt.show()")
    assert content["status"] == "ok", content
    shown = [m["content"]["data"] for m in outputs if m["msg_type"] == "display_data"]
    assert "text/html" in shown[0]
    assert shown[1]["image/png"]
    content, outputs = execute(fork.kc, "plt.plot([1, 5])")
    assert any("image/png" in m["content"]["data"] for m in outputs if m["msg_type"] == "display_data")


def test_update_display_and_clear_output(parent, forks):
    _, kc = parent
    fork = forks.of(kc)
    content, outputs = execute(fork.kc, "from IPython.display import display, clear_output\n"
                                        "h = display('one', display_id='d1')\nh.update('two')\n"
                                        "clear_output(wait=False)\nprint('after')")
    assert content["status"] == "ok", content
    assert types(outputs) == ["display_data", "update_display_data", "clear_output", "stream"]
    assert outputs[-1]["content"]["text"] == "after\n"


def test_an_error_carries_its_traceback(parent, forks):
    _, kc = parent
    execute(kc, "def boom():\n    return 1 / 0")
    fork = forks.of(kc)
    content, outputs = execute(fork.kc, "boom()")
    assert content["status"] == "error" and content["ename"] == "ZeroDivisionError"
    error = [m for m in outputs if m["msg_type"] == "error"][0]["content"]
    assert any("boom" in line for line in error["traceback"])
    assert value(fork.kc, "1 + 1") == "2"


def test_input_goes_through_stdin(parent, forks):
    _, kc = parent
    fork = forks.of(kc)
    content, outputs = execute(fork.kc, "name = input('who? ')\nprint('hello', name)",
                               stdin_reply="fork")
    assert content["status"] == "ok", content
    assert stdout_of(outputs) == "hello fork\n"
    assert value(kc, "'name' in globals()") == "False"


def test_sigint_to_the_forks_group_interrupts_a_sleep(parent, forks):
    _, kc = parent
    fork = forks.of(kc)
    assert os.getpgid(fork.pid) == fork.pid
    threading.Timer(1.0, os.killpg, (fork.pid, signal.SIGINT)).start()
    started = time.monotonic()
    content, _ = execute(fork.kc, "import time\ntime.sleep(30)")
    assert content["status"] == "error" and content["ename"] == "KeyboardInterrupt"
    assert time.monotonic() - started < 10
    assert value(fork.kc, "'alive'") == "'alive'"
    assert value(kc, "'parent alive'") == "'parent alive'"


def test_a_logging_handler_made_in_the_parent_writes_to_the_forks_stderr(parent, forks):
    _, kc = parent
    execute(kc, "import logging\nlogging.basicConfig(level=logging.INFO, force=True)")
    fork = forks.of(kc)
    content, outputs = execute(fork.kc, "logging.info('from the fork')")
    errs = "".join(m["content"]["text"] for m in outputs
                   if m["msg_type"] == "stream" and m["content"]["name"] == "stderr")
    assert errs == "INFO:root:from the fork\n"
    content, outputs = execute(kc, "logging.info('from the parent')")
    assert "INFO:root:from the parent" in "".join(
        m["content"].get("text", "") for m in outputs if m["msg_type"] == "stream")
