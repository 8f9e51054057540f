"""A fork that cannot happen says why, and one that fails half-way leaves
no process and no file behind."""

import os
import socket
import subprocess
import sys

from jupyter_client.manager import KernelManager

import pytest

from .forklib import PACKAGE_DIR, ask_fork, execute, new_connection, our_children, value

pytestmark = pytest.mark.usefixtures("forks_are_our_children")


def state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def assert_no_process_left(before):
    """Every process the failed fork made has exited (a zombie for us, the
    subreaper, to reap); reap them."""
    for pid in our_children() - before:
        assert state(pid) == "Z", f"process {pid} still runs"
        os.waitpid(pid, 0)


def test_an_unknown_ipykernel_version_is_refused(parent):
    _, kc = parent
    execute(kc, "import ipykernel\nreal = ipykernel.__version__\nipykernel.__version__ = '99.1.0'")
    before = our_children()
    content = ask_fork(kc, f"fork({new_connection()!r})")
    assert content["status"] == "error" and content["ename"] == "ForkRefused"
    assert "ipykernel 99.1.0 is not a version kernelbridge_fork knows" in content["evalue"]
    assert "6.17" in content["evalue"]
    assert our_children() == before
    execute(kc, "ipykernel.__version__ = real")
    assert value(kc, "1") == "1"


def test_a_process_that_is_not_an_ipykernel_is_refused():
    code = ("import kernelbridge_fork\n"
            "try:\n    kernelbridge_fork.fork(%r)\n"
            "except kernelbridge_fork.ForkRefused as e:\n    print('refused:', e)\n") % new_connection()
    env = dict(os.environ, PYTHONPATH=PACKAGE_DIR)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout == "refused: not running in an ipykernel (ipykernel is not loaded)\n", out
    code = "import ipykernel.kernelapp, IPython\n" + code
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout == "refused: not running in an ipykernel (no IPKernelApp)\n", out


def test_bad_connection_info_is_refused_before_anything_is_forked(parent):
    _, kc = parent
    before = our_children()
    info = new_connection()
    del info["key"]
    content = ask_fork(kc, f"fork({info!r})")
    assert content["ename"] == "ForkRefused" and "key" in content["evalue"]
    content = ask_fork(kc, "fork({'shell_port': 0})")
    assert content["ename"] == "ForkRefused" and "shell_port" in content["evalue"]
    assert our_children() == before


def test_a_port_in_use_fails_the_fork_and_leaves_no_process(parent):
    _, kc = parent
    execute(kc, "x = 1")
    info = new_connection("tcp")
    taken = socket.socket()
    taken.bind(("127.0.0.1", info["iopub_port"]))
    taken.listen()
    before = our_children()
    try:
        content = ask_fork(kc, f"fork({info!r})")
    finally:
        taken.close()
    assert content["status"] == "error" and content["ename"] == "ForkFailed"
    assert "Address already in use" in content["evalue"]
    assert_no_process_left(before)
    assert value(kc, "x") == "1"
    execute(kc, "x += 1")
    assert value(kc, "x") == "2"


def test_an_ipc_fork_that_fails_half_way_leaves_no_file(parent, tmp_path):
    _, kc = parent
    base = str(tmp_path / "kernel")
    info = dict(new_connection(), transport="ipc", ip=base, shell_port=1, iopub_port=2,
                stdin_port=3, control_port=4, hb_port=5)
    os.mkdir(f"{base}-2")  # the iopub socket's path: bound after shell, stdin and control
    before = our_children()
    content = ask_fork(kc, f"fork({info!r})")
    assert content["status"] == "error" and content["ename"] == "ForkFailed", content
    assert_no_process_left(before)
    assert sorted(os.listdir(tmp_path)) == ["kernel-2"]


def test_xeus_python_a_python_kernel_that_is_not_ipykernel_is_refused():
    km = KernelManager(kernel_name="xpython")
    km.start_kernel(env=dict(os.environ, PYTHONPATH=PACKAGE_DIR))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        content = ask_fork(kc, f"fork({new_connection()!r})")
        # xeus-python names the exception by its class's repr
        assert content["status"] == "error" and "ForkRefused" in content["ename"], content
        assert content["evalue"] == "not running in an ipykernel (ipykernel is not loaded)"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_a_child_not_ready_in_time_is_killed(parent):
    _, kc = parent
    before = our_children()
    content = ask_fork(kc, f"fork({new_connection()!r}, timeout=0.001)")
    assert content["status"] == "error" and content["ename"] == "ForkFailed", content
    assert "did not become ready within 0.001 s; killed" in content["evalue"]
    assert_no_process_left(before)
    assert value(kc, "1 + 1") == "2"
