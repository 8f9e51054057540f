"""The parent is not disturbed; each fork has its own pid, process group and
key; forks of forks work ten deep."""

import os

import pytest

from .forklib import ask_fork, execute, new_connection, stdout_of, value, wait_exit

pytestmark = pytest.mark.usefixtures("forks_are_our_children")


def test_the_parent_is_not_disturbed(parent, forks):
    km, kc = parent
    execute(kc, "import os\nx = [1, 2, 3]")
    before = execute(kc, "print('before')")[0]["execution_count"]
    pid = value(kc, "os.getpid()")
    fork = forks.of(kc)
    execute(fork.kc, "x.append(4)\ny = 1")
    content, outputs = execute(kc, "print('after', x)")
    assert content["execution_count"] == before + 1
    assert stdout_of(outputs) == "after [1, 2, 3]\n"
    assert value(kc, "os.getpid()") == pid
    assert value(kc, "'y' in globals()") == "False"
    assert value(kc, "len(In)") == str(before + 2)
    assert km.is_alive()


def test_each_fork_has_its_own_pid_group_session_and_key(parent, forks):
    _, kc = parent
    execute(kc, "import os")
    parent_pid = int(value(kc, "os.getpid()"))
    one, two = forks.of(kc), forks.of(kc)
    for fork in (one, two):
        assert int(value(fork.kc, "os.getpid()")) == fork.pid
        assert os.getpgid(fork.pid) == fork.pid and os.getsid(fork.pid) == fork.pid
        key = value(fork.kc, "get_ipython().kernel.session.key")
        assert key == repr(fork.info["key"].encode())
    assert len({one.pid, two.pid, parent_pid}) == 3
    assert os.getpgid(parent_pid) != one.pid
    assert one.info["key"] != two.info["key"]


def test_a_fork_listens_on_tcp_ports(parent, forks):
    _, kc = parent
    execute(kc, "z = 'over tcp'")
    fork = forks.of(kc, info=new_connection("tcp"))
    assert fork.info["transport"] == "tcp"
    assert value(fork.kc, "z") == "'over tcp'"


def test_forks_of_forks_ten_deep(parent, forks):
    _, kc = parent
    execute(kc, "depth = 0")
    client = kc
    for level in range(1, 11):
        fork = forks.of(client)
        content, outputs = execute(fork.kc, "depth += 1\nprint(depth)")
        assert stdout_of(outputs) == f"{level}\n", (level, content)
        client = fork.kc
    assert value(kc, "depth") == "0"
    content, outputs = execute(client, "import matplotlib.pyplot as plt\nplt.plot([1])\n1/0")
    assert content["ename"] == "ZeroDivisionError"
    assert any(m["msg_type"] == "display_data" for m in outputs)


def test_a_shutdown_request_ends_the_fork_and_not_the_parent(parent, forks):
    _, kc = parent
    fork = forks.of(kc)
    fork.kc.shutdown()
    assert wait_exit(fork.pid) == 0
    assert value(kc, "'parent alive'") == "'parent alive'"


def test_fork_many_starts_every_fork_at_once(parent, forks):
    _, kc = parent
    execute(kc, "import os\nshared = 'from the parent'")
    infos = [new_connection() for _ in range(4)]
    content = ask_fork(kc, f"fork_many({infos!r})")
    assert content["status"] == "ok", content
    pids = content["user_expressions"]["fork"]["data"]["application/json"]["pids"]
    assert len(set(pids)) == 4
    made = [forks.adopt(pid, info) for pid, info in zip(pids, infos)]
    for fork in made:
        assert int(value(fork.kc, "os.getpid()")) == fork.pid
        assert value(fork.kc, "shared") == "'from the parent'"
    # one bad connection refuses them all, before anything is forked
    bad = [new_connection(), dict(new_connection(), key="")]
    refused = ask_fork(kc, f"fork_many({bad!r})")
    assert refused["status"] == "error" and refused["ename"] == "ForkRefused", refused
    for call in ("fork_many([])", "fork_many('x')"):
        assert ask_fork(kc, call)["ename"] == "ForkRefused"
