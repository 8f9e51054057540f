"""Forks and checkpoints under faults (SPEC section 13), caused for real:
the new kernel dying half-way inside the parent kernel's fork, and the
daemon SIGKILLed while a fork or a checkpoint is being made. Nothing may be
left behind: no process, no file, no context. Kernels are found in /proc by
the state dir their connection file lives in (a fork keeps its parent's
command line)."""

import os
import random
import threading

from conftest import error_of, pid_alive, wait_until
from test_durability import crash, kernel_pids, kill_group, start, state_dir  # noqa: F401

# Code for the parent kernel: the process that is about to become the new
# kernel (the grandchild of the double fork, as it calls os.setsid) is made
# to do `action` first. The patch lives in the parent; it is undone after.
PATCH_SETSID = """
import os, time
_real_setsid = os.setsid
def _patched_setsid():
    {action}
    return _real_setsid()
os.setsid = _patched_setsid
"""
UNPATCH_SETSID = "os.setsid = _real_setsid"


# The same for the new kernel's connection (kernelbridge_fork.child.new_app,
# after the descriptors it inherited are closed): its first `times` starts,
# counted in the file `path`, find their shell port taken (as when another
# socket was given it after the daemon chose it), so that ipykernel's bind
# fails for real.
PATCH_NEW_APP = """
import socket, kernelbridge_fork.child as _child
_real_new_app = _child.new_app
def _taking_new_app(old_app, old_kernel, info):
    with open({path!r}, "a+") as f:
        f.seek(0)
        before = len(f.readlines())
        f.write("start\\n")
    if before < {times}:
        _child.taken = socket.socket()
        _child.taken.bind((info["ip"], info["shell_port"]))
        _child.taken.listen()
    return _real_new_app(old_app, old_kernel, info)
_child.new_app = _taking_new_app
"""
UNPATCH_NEW_APP = "_child.new_app = _real_new_app"


def kernel_files(state_dir):
    return sorted(os.listdir(state_dir / "kernels"))


def test_a_fork_whose_new_kernel_dies_half_way_leaves_nothing(daemon):
    ctx = daemon.ok("POST", "/contexts", {"language": "python", "context_id": "half"},
                    status=201)
    daemon.run("x = 7", context_id="half")
    daemon.run(PATCH_SETSID.format(action="os._exit(3)"), context_id="half")
    try:
        response = daemon.request("POST", "/contexts/half/fork", {"count": 2})
        err = error_of(response, 503, "KERNEL_START_FAILED")
        assert "ForkFailed" in err["message"], err
        listed = {c["context_id"] for c in daemon.ok("GET", "/contexts")["contexts"]}
        assert "half" in listed and not any(i.startswith("half") and i != "half" for i in listed)
        assert len(listed) == len(daemon.ok("GET", "/contexts")["contexts"])
    finally:
        daemon.run(UNPATCH_SETSID, context_id="half")
    assert daemon.run("x", context_id="half")["results"][0]["text"] == "7"
    assert daemon.ok("GET", "/contexts/half")["pid"] == ctx["pid"]
    # the parent kernel's own tree: itself alone, no half-made child
    children = [p for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == ctx["pid"]]
    assert wait_until(lambda: not [p for p in children if pid_alive(int(p))], 10), children
    # and a fork works again once the kernel is itself
    forks = daemon.ok("POST", "/contexts/half/fork", {}, status=201)["contexts"]
    assert daemon.run("x", context_id=forks[0]["context_id"])["results"][0]["text"] == "7"


def test_a_fork_whose_tcp_port_was_taken_is_asked_again_on_new_ports(daemon_factory, tmp_path):
    # python3 named, so that no template refills its kernels' files meanwhile
    d = daemon_factory("--transport", "tcp", "--kernel", "python=python3")
    d.ok("POST", "/contexts", {"language": "python", "context_id": "p"}, status=201)
    d.run("x = 7", context_id="p")
    starts = tmp_path / "starts"
    d.run(PATCH_NEW_APP.format(path=str(starts), times=1), context_id="p")
    try:
        fork = d.ok("POST", "/contexts/p/fork", {}, status=201)["contexts"][0]
    finally:
        d.run(UNPATCH_NEW_APP, context_id="p")
    assert len(starts.read_text().split()) == 2
    assert d.run("x", context_id=fork["context_id"])["results"][0]["text"] == "7"
    assert "a port of a fork was taken before the fork bound it" in d.stdout, d.stdout

    # taken again on the new ports: the fork fails, once asked again, and
    # leaves nothing
    starts.unlink()
    files = kernel_files(d.state_dir)
    d.run(PATCH_NEW_APP.format(path=str(starts), times=2), context_id="p")
    try:
        err = error_of(d.request("POST", "/contexts/p/fork", {}), 503, "KERNEL_START_FAILED")
    finally:
        d.run(UNPATCH_NEW_APP, context_id="p")
    assert "Address already in use" in err["message"], err
    assert len(starts.read_text().split()) == 2, "asked again once, not more"
    assert d.stdout.count("asked again on new ports") == 2, d.stdout
    assert kernel_files(d.state_dir) == files
    listed = {c["context_id"] for c in d.ok("GET", "/contexts")["contexts"]}
    assert listed == {"p", fork["context_id"]}
    assert d.run("x", context_id="p")["results"][0]["text"] == "7"


def test_a_restore_or_rollback_whose_tcp_port_was_taken_is_asked_again(daemon_factory,
                                                                         tmp_path):
    # the checkpoints are frozen copies of the patched kernel: their forks
    # take their port as a fork of the kernel would
    d = daemon_factory("--transport", "tcp", "--kernel", "python=python3")
    d.ok("POST", "/contexts", {"language": "python", "context_id": "p"}, status=201)
    starts = tmp_path / "starts"
    d.run("x = 1", context_id="p")
    d.run(PATCH_NEW_APP.format(path=str(starts), times=1), context_id="p")
    cp = d.ok("POST", "/contexts/p/checkpoints", {}, status=201)
    d.run("x = 2", context_id="p")
    ctx = d.ok("POST", "/contexts/p/restore", {"checkpoint_id": cp["checkpoint_id"]})
    assert ctx["generation"] == 2 and len(starts.read_text().split()) == 2
    assert d.run("x", context_id="p")["results"][0]["text"] == "1"
    assert "checkpoint %s: a port of its kernel was taken" % cp["checkpoint_id"] in d.stdout

    starts.unlink()  # the restored kernel is patched too: a rollback's kernel is taken once
    r = d.run("x = 3\n1 / 0", context_id="p", rollback="on_error")
    assert r["rolled_back"] is True and r["context"]["generation"] == 3, r
    # the next run waits for the kernel put back after the answer
    assert d.run("x", context_id="p")["results"][0]["text"] == "1"
    assert len(starts.read_text().split()) == 2

    # taken twice: the restore fails, asked again once, and the context is
    # left as it was
    d.run(UNPATCH_NEW_APP, context_id="p")
    d.run(PATCH_NEW_APP.format(path=str(starts), times=2), context_id="p")
    starts.unlink()
    cp = d.ok("POST", "/contexts/p/checkpoints", {}, status=201)
    files = kernel_files(d.state_dir)
    err = error_of(d.request("POST", "/contexts/p/restore", {"checkpoint_id": cp["checkpoint_id"]}),
                   503, "KERNEL_START_FAILED")
    assert "Address already in use" in err["message"], err
    assert len(starts.read_text().split()) == 2, "asked again once, not more"
    assert kernel_files(d.state_dir) == files
    assert d.ok("GET", "/contexts/p")["generation"] == 3
    assert d.run("x", context_id="p")["results"][0]["text"] == "1"


def _ppid(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _crash_during(d, path, body):
    """Send the request on a thread and SIGKILL the daemon while it waits."""
    answered = []

    def call():
        try:
            answered.append(d.request("POST", path, body, timeout=30).status)
        except Exception as exc:  # the daemon is killed under it
            answered.append(repr(exc))

    t = threading.Thread(target=call)
    t.start()
    return t, answered


def _assert_nothing_orphaned(state_dir, parent_pid):
    d = start(state_dir)
    try:
        assert wait_until(lambda: kernel_pids(state_dir) == [parent_pid], 15), \
            (kernel_pids(state_dir), parent_pid)
        contexts = d.ok("GET", "/contexts?all=true")["contexts"]
        assert [c["context_id"] for c in contexts] == ["p"], contexts
        assert d.ok("GET", "/contexts/p/checkpoints")["checkpoints"] == []
        assert d.run("x", context_id="p")["results"][0]["text"] == "1"
        d.run(UNPATCH_SETSID, context_id="p")
        # what was killed half-way does not come back as a kernel later
        wait_until(lambda: False, 3.5)
        assert kernel_pids(state_dir) == [parent_pid], kernel_pids(state_dir)
        files = kernel_files(state_dir)
        assert len(files) == 2 and not [f for f in files if f.startswith("cp-")], files
    finally:
        d.close()
    assert kernel_pids(state_dir) == []


def _crash_while_made(state_dir, path, body, settle):
    """A context p (x = 1) whose next fork lingers 3 s before it is a
    kernel; the daemon SIGKILLed while it makes one for path; settle
    seconds later the next daemon starts. The parent kernel's pid."""
    d = start(state_dir)
    try:
        pid = d.ok("POST", "/contexts", {"language": "python", "context_id": "p"},
                   status=201)["pid"]
        d.run("x = 1", context_id="p")
        d.run(PATCH_SETSID.format(action="time.sleep(3)"), context_id="p")
        t, answered = _crash_during(d, path, body)
        assert wait_until(lambda: len(kernel_pids(state_dir)) > 1, 10), kernel_pids(state_dir)
        before = kernel_pids(state_dir)
    finally:
        crash(d)
    t.join(30)
    assert answered and not isinstance(answered[0], int), answered  # never answered
    # the half-made processes are still there
    assert len(kernel_pids(state_dir)) > 1, (before, kernel_pids(state_dir))
    wait_until(lambda: False, settle)
    return pid


def test_the_daemon_killed_in_the_middle_of_a_fork_leaves_no_orphan(state_dir):
    """Restarted at once: the forks are still half-made."""
    pid = _crash_while_made(state_dir, "/contexts/p/fork", {"count": 3}, 0)
    _assert_nothing_orphaned(state_dir, pid)


def test_a_fork_made_whole_after_the_daemon_died_is_ended(state_dir):
    """Restarted late: the forks have become kernels nobody recorded."""
    pid = _crash_while_made(state_dir, "/contexts/p/fork", {"count": 2}, 3.5)
    _assert_nothing_orphaned(state_dir, pid)


def test_the_daemon_killed_while_a_checkpoint_is_made_leaves_no_orphan(state_dir):
    """Restarted late: the checkpoint is frozen on its socket, unrecorded."""
    pid = _crash_while_made(state_dir, "/contexts/p/checkpoints", {}, 3.5)
    _assert_nothing_orphaned(state_dir, pid)


def test_crash_cycles_at_random_moments_of_forks_leave_no_orphan(state_dir):
    """The daemon is SIGKILLed at a random moment of a fork, a checkpoint or
    a rollback run, six times: after each start, the kernels alive are
    exactly those of the contexts listed and of their checkpoints."""
    rng = random.Random(32)
    d = start(state_dir)
    try:
        d.ok("POST", "/contexts", {"language": "python", "context_id": "p"}, status=201)
        d.run("x = 1", context_id="p")
    finally:
        crash(d)
    for cycle in range(6):
        d = start(state_dir)
        try:
            _assert_only_ours(d, state_dir, cycle)
            assert d.run("x", context_id="p")["results"][0]["text"] == "1"
            path, body = rng.choice([("/contexts/p/fork", {"count": 2}),
                                     ("/contexts/p/checkpoints", {}),
                                     ("/run", {"code": "1/0", "context_id": "p",
                                               "rollback": "on_error"})])
            t, _ = _crash_during(d, path, body)
            wait_until(lambda: False, rng.uniform(0.0, 0.4))
        finally:
            crash(d)
        t.join(30)
    d = start(state_dir)
    try:
        _assert_only_ours(d, state_dir, "last")
    finally:
        d.close()
    assert kernel_pids(state_dir) == []


def _assert_only_ours(d, state_dir, cycle):
    """The kernels alive: one per context listed, one per checkpoint."""
    contexts = d.ok("GET", "/contexts?all=true")["contexts"]
    pids = {c["pid"] for c in contexts if c.get("pid")}
    checkpoints = sum(len(d.ok("GET", "/contexts/%s/checkpoints" % c["context_id"])["checkpoints"])
                      for c in contexts)
    ok = lambda: (pids <= set(kernel_pids(state_dir))
                  and len(kernel_pids(state_dir)) == len(pids) + checkpoints)
    assert wait_until(ok, 15), (cycle, kernel_pids(state_dir), pids, checkpoints)


def test_forks_and_checkpoints_are_not_counted_in_their_parents_tree(daemon):
    """A fork, or a checkpoint, is its parent kernel's descendant while it is
    made (the daemon may see it then in the parent's process tree); once
    made it is its own: the parent's pids limit does not kill it, and the
    parent's accounting does not hold it. The new processes linger 1 s in
    the parent's session so that the sampler sees them there."""
    daemon.ok("POST", "/contexts", {"language": "python", "context_id": "p", "pids_limit": 8},
              status=201)
    daemon.run("x = 1", context_id="p")
    daemon.run(PATCH_SETSID.format(action="time.sleep(1)"), context_id="p")
    forks = daemon.ok("POST", "/contexts/p/fork", {"count": 10}, status=201)["contexts"]
    checkpoints = [daemon.ok("POST", "/contexts/p/checkpoints", {}, status=201)
                   for _ in range(3)]
    daemon.run(UNPATCH_SETSID, context_id="p")
    daemon.run("import time; time.sleep(1.5)", context_id="p")  # the sampler's turns
    usage = daemon.ok("GET", "/contexts/p")["resources"]
    assert usage["pids"] == 1, usage
    for f in forks:
        assert pid_alive(f["pid"]), f
        assert daemon.run("x", context_id=f["context_id"])["results"][0]["text"] == "1"
    listed = daemon.ok("GET", "/contexts/p/checkpoints")["checkpoints"]
    assert [c["checkpoint_id"] for c in listed] == [c["checkpoint_id"] for c in checkpoints]
    daemon.ok("POST", "/contexts/p/restore", {"checkpoint_id": checkpoints[0]["checkpoint_id"]})
    assert daemon.run("x", context_id="p")["results"][0]["text"] == "1"
