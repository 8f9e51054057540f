"""Frozen forks (checkpoints): run nothing, answer fork requests on a unix
socket, stay forkable."""

import os
import signal
import time

import kernelbridge_fork
import pytest

from .forklib import ask_fork, execute, new_connection, stdout_of, value, wait_exit

pytestmark = pytest.mark.usefixtures("forks_are_our_children")


def freeze(kc, path):
    content = ask_fork(kc, f"freeze({str(path)!r})")
    assert content["status"] == "ok", content
    return content["user_expressions"]["fork"]["data"]["application/json"]["pid"]


def test_a_frozen_fork_can_be_forked_again_and_again(parent, forks, tmp_path):
    _, kc = parent
    execute(kc, "state = {'n': 1}")
    path = tmp_path / "ckpt.sock"
    frozen = freeze(kc, path)
    forks.pids.append(frozen)
    assert os.getpgid(frozen) == frozen and path.exists()
    execute(kc, "state['n'] = 99")

    first_info = new_connection()
    first = forks.adopt(kernelbridge_fork.request(str(path), first_info).pid, first_info)
    assert value(first.kc, "state['n']") == "1"
    execute(first.kc, "state['n'] = 2")

    second_info = new_connection()
    second = forks.adopt(kernelbridge_fork.request(str(path), second_info).pid, second_info)
    assert value(second.kc, "state['n']") == "1"
    content, outputs = execute(second.kc, "print(state)")
    assert stdout_of(outputs) == "{'n': 1}\n"
    assert value(kc, "state['n']") == "99"
    assert len({first.pid, second.pid, frozen}) == 3
    assert os.getpgid(second.pid) == second.pid

    grandchild = forks.of(second.kc)
    assert value(grandchild.kc, "state['n']") == "1"


def test_terminating_a_fork_of_a_checkpoint_leaves_the_checkpoint(parent, forks, tmp_path):
    _, kc = parent
    path = tmp_path / "ckpt.sock"
    forks.pids.append(freeze(kc, path))
    info = new_connection()
    fork = forks.adopt(kernelbridge_fork.request(str(path), info).pid, info)
    fork.kc.stop_channels()
    os.kill(fork.pid, signal.SIGTERM)
    assert wait_exit(fork.pid) is not None
    assert path.exists()
    info = new_connection()
    again = forks.adopt(kernelbridge_fork.request(str(path), info).pid, info)
    assert value(again.kc, "2 * 21") == "42"


def test_a_checkpoint_ended_as_soon_as_it_answers_leaves_its_fork_running(parent, forks, tmp_path):
    """As a rollback does: the fork's pid read, the checkpoint ended at once.
    The fork lives only once told that its pid was answered, which SIGTERM
    must not come between."""
    _, kc = parent
    for round in range(5):
        path = tmp_path / f"ckpt-{round}.sock"
        frozen = freeze(kc, path)
        forks.pids.append(frozen)
        info = new_connection()
        pid = kernelbridge_fork.request(str(path), info).pid
        os.kill(frozen, signal.SIGTERM)
        assert wait_exit(frozen) == 0
        fork = forks.adopt(pid, info)
        assert value(fork.kc, "2 * 21") == "42"


def test_the_frozen_process_runs_nothing_and_sigterm_removes_its_socket(parent, forks, tmp_path):
    _, kc = parent
    path = tmp_path / "ckpt.sock"
    frozen = freeze(kc, path)
    forks.pids.append(frozen)
    stat = open(f"/proc/{frozen}/stat").read().rsplit(")", 1)[1].split()
    assert stat[0] == "S"
    os.kill(frozen, signal.SIGTERM)
    assert wait_exit(frozen) == 0
    assert not path.exists()


def test_a_frozen_process_whose_socket_is_removed_exits(parent, forks, tmp_path):
    # a daemon gone for good (its state dir removed) leaves nothing waiting
    _, kc = parent
    execute(kc, "import kernelbridge_fork.frozen as frozen_mod; frozen_mod.ORPHAN_CHECK_S = 0.2")
    try:
        path = tmp_path / "ckpt.sock"
        frozen = freeze(kc, path)
        forks.pids.append(frozen)
        time.sleep(0.5)
        assert os.path.exists(f"/proc/{frozen}")  # its socket is there: it stays
        path.unlink()
        assert wait_exit(frozen) == 0
    finally:
        execute(kc, "frozen_mod.ORPHAN_CHECK_S = 10.0")


def test_a_request_with_bad_connection_info_answers_an_error_and_the_checkpoint_stays(
        parent, forks, tmp_path):
    _, kc = parent
    path = tmp_path / "ckpt.sock"
    forks.pids.append(freeze(kc, path))
    try:
        kernelbridge_fork.request(str(path), {"shell_port": 0, "key": "k"})
    except kernelbridge_fork.ForkFailed as e:
        assert "must be a positive integer" in str(e)
    else:
        raise AssertionError("a bad request was not refused")
    info = new_connection()
    fork = forks.adopt(kernelbridge_fork.request(str(path), info).pid, info)
    assert value(fork.kc, "1 + 2") == "3"


def test_freezing_onto_an_existing_path_is_refused(parent, tmp_path):
    _, kc = parent
    path = tmp_path / "taken"
    path.write_text("")
    content = ask_fork(kc, f"freeze({str(path)!r})")
    assert content["status"] == "error" and content["ename"] == "ForkRefused"
    assert "exists already" in content["evalue"]
