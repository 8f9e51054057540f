"""Kernels that cannot reach the daemon's secrets (SPEC section 6,
docs/guides/security.md): with --kernel-user every kernel runs as one unprivileged
user, with --kernel-uid-range each context's kernel has a uid of its own.

Kernel code plays the attacker: it takes the token file's path from the
daemon's /proc/<pid>/cmdline and tries to read it, reads the daemon's
environ and memory, the state dir and state.db, another context's environ,
connection file (its key) and a file in its working dir, and signals the
daemon and the other kernel. Each attempt is asserted one by one. With
--kernel-uid-range none succeeds; with --kernel-user the daemon is out of
reach but contexts share a uid and reach each other (asserted, so that the
threat model's table is checked); in the default mode (same user as the daemon,
root here) nothing is protected but the token's absence from the
daemon's command line and environment, which is asserted too.

Needs root (the daemon takes other uids) and useradd; skipped otherwise.
"""

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import BINARY, Daemon, error_of, pid_alive, pids_with_arg_under, wait_until

USER = "kbtest-kernel"
RANGE = "61000-61009"
TOKEN = "tok-isolation-7f3a9c1e5b"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="kernels as other uids need root")


@pytest.fixture(scope="module")
def kernel_user():
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        pass
    if not shutil.which("useradd"):
        pytest.skip("no useradd to create the test user %s" % USER)
    subprocess.run(["useradd", "--system", "--no-create-home", USER], check=True)
    return pwd.getpwnam(USER)


@pytest.fixture
def state_dir():
    """A state dir whose parent lets other uids through (0711), as kernels
    of other users must reach their connection files and dirs."""
    parent = Path(tempfile.mkdtemp(prefix="kbiso-", dir="/tmp"))
    parent.chmod(0o711)
    try:
        yield parent / "state"
    finally:
        for pid in pids_with_arg_under(str(parent)):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture
def start(state_dir, daemon_factory):
    def start(*args, **kw):
        return daemon_factory(*args, token=TOKEN, state_dir=state_dir, **kw)

    return start


PROBE = r'''
import json, os, signal
daemon, state_dir = %(daemon)d, %(state_dir)r
other_pid, other_file, other_signal = %(other_pid)d, %(other_file)r, %(other_signal)d
other_socket = %(other_socket)r
out = {}
def attempt(name, fn):
    try:
        out[name] = ["reached", repr(fn())[:300]]
    except OSError as e:
        out[name] = ["denied", type(e).__name__]
def argv(pid):
    with open("/proc/%%d/cmdline" %% pid, "rb") as f:
        return [a.decode() for a in f.read().split(b"\0")]
def after(args, flag):
    return args[args.index(flag) + 1]
def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()
def connect(path):
    import socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        return path
def read_mem():
    with open("/proc/%%d/mem" %% daemon, "rb") as f:
        return len(f.read(1))
attempt("token_file", lambda: read(after(argv(daemon), "--token-file")))
attempt("daemon_environ", lambda: read("/proc/%%d/environ" %% daemon, "rb"))
attempt("daemon_mem", read_mem)
attempt("daemon_fds", lambda: os.listdir("/proc/%%d/fd" %% daemon))
attempt("daemon_signal", lambda: os.kill(daemon, 0))
attempt("state_dir_list", lambda: os.listdir(state_dir))
attempt("state_db", lambda: read(state_dir + "/state.db", "rb"))
attempt("other_environ", lambda: read("/proc/%%d/environ" %% other_pid, "rb"))
attempt("other_connection_file", lambda: read(after(argv(other_pid), "-f")))
attempt("other_file", lambda: read(other_file))
attempt("other_socket", lambda: connect(other_socket))
attempt("other_signal", lambda: os.kill(other_pid, other_signal))
out["daemon_cmdline"] = " ".join(argv(daemon))
out["uid"] = os.getuid()
print(json.dumps(out))
'''

DAEMON_PATHS = ["token_file", "daemon_environ", "daemon_mem", "daemon_fds", "daemon_signal",
                "state_dir_list", "state_db"]
OTHER_PATHS = ["other_environ", "other_connection_file", "other_file", "other_socket",
               "other_signal"]


def create(d, **fields):
    return d.ok("POST", "/contexts", dict(language="python", **fields), status=201)


def run_in(d, ctx, code):
    result = d.run(code, context_id=ctx["context_id"])
    assert result["error"] is None, result
    return result["logs"]["stdout"]


def probe(d, state_dir, attacker, victim, other_signal):
    """Plant a file in victim's working dir, then let attacker try every
    path; returns {attempt: [reached|denied, detail]}."""
    secret = os.path.join(victim["cwd"], "secret.txt")
    run_in(d, victim, "open('secret.txt', 'w').write('victim secret')")
    with open("/proc/%d/cmdline" % victim["pid"], "rb") as f:
        argv = f.read().decode().split("\0")
    with open(argv[argv.index("-f") + 1]) as f:
        info = json.load(f)
    assert info["transport"] == "ipc", info
    shell = "%s-%d" % (info["ip"], info["shell_port"])
    code = PROBE % dict(daemon=d.proc.pid, state_dir=str(state_dir), other_pid=victim["pid"],
                        other_file=secret, other_signal=other_signal, other_socket=shell)
    return json.loads(run_in(d, attacker, code))


def assert_denied(out, names):
    """Denied for want of permission, not for a path that is not there."""
    for name in names:
        assert out[name] == ["denied", "PermissionError"], (name, out[name])


def test_uid_range_reaches_neither_the_daemon_nor_another_context(start, state_dir, kernel_user):
    d = start("--kernel-uid-range", RANGE)
    a, b = create(d), create(d)
    out = probe(d, state_dir, a, b, signal.SIGTERM)
    assert_denied(out, DAEMON_PATHS + OTHER_PATHS)
    assert TOKEN not in out["daemon_cmdline"] and "--token-file" in out["daemon_cmdline"]
    assert 61000 <= out["uid"] <= 61009
    assert pid_alive(b["pid"]), "the SIGTERM did not reach the other kernel"
    assert run_in(d, b, "print(open('secret.txt').read())") == "victim secret\n"


def test_uid_range_gives_each_context_its_own_uid_and_private_dir(start, kernel_user):
    d = start("--kernel-uid-range", RANGE)
    a, b = create(d), create(d)
    seen = {}
    for ctx in (a, b):
        ident = json.loads(run_in(d, ctx, "import json, os; print(json.dumps("
                                          "[os.getuid(), os.getgid(), os.getgroups(), os.getcwd(),"
                                          " os.environ['HOME']]))"))
        uid, gid, groups, cwd, home = ident
        assert 61000 <= uid <= 61009 and gid == uid and groups == [], ident
        assert cwd == home == ctx["cwd"], (ident, ctx)
        st = os.lstat(cwd)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (uid, uid, 0o700)
        st = os.stat("/proc/%d" % ctx["pid"])
        assert st.st_uid == uid, "the kernel's process runs as its uid"
        seen[ctx["context_id"]] = uid
    assert len(set(seen.values())) == 2, seen
    assert a["cwd"] != b["cwd"]
    # a run works as usual, files land in the private dir
    listing = run_in(d, a, "import os; open('f', 'w').write('x'); print(sorted(os.listdir()))")
    assert "'f'" in listing, listing
    d.ok("DELETE", "/contexts/" + a["context_id"], status=204)
    assert wait_until(lambda: not os.path.exists(a["cwd"]), 10), "the private dir is removed"
    assert not pid_alive(a["pid"])
    assert os.path.isdir(b["cwd"])


def test_uid_range_over_tcp(start, kernel_user):
    d = start("--kernel-uid-range", RANGE, "--transport", "tcp", "--pool", "python=0")
    ctx = create(d)
    uid = int(run_in(d, ctx, "import os; print(os.getuid())"))
    assert 61000 <= uid <= 61009


def test_uid_range_kills_what_a_context_left_running_and_reuses_its_uid(start, kernel_user):
    d = start("--kernel-uid-range", "61010-61010", "--pool", "python=0")
    a = create(d)
    # a process that leaves the kernel's process group and session
    pid = int(run_in(d, a, "import subprocess; p = subprocess.Popen(['sleep', '300'],"
                           " start_new_session=True); print(p.pid)"))
    assert wait_until(lambda: pid_alive(pid), 5)
    body = error_of(d.post("/contexts", dict(language="python")), 503, "KERNEL_START_FAILED")
    assert "no free uid in the kernel uid range 61010-61010" in body["message"], body
    d.ok("DELETE", "/contexts/" + a["context_id"], status=204)
    assert wait_until(lambda: not pid_alive(pid), 10), "what the context left is killed"
    b = create(d)
    assert run_in(d, b, "import os; print(os.getuid())") == "61010\n"


def test_limits_hold_for_kernels_of_other_uids(start, kernel_user):
    """RLIMIT_DATA, the sampler's interrupt and its kills reach a kernel tree
    that runs as another uid."""
    d = start("--kernel-uid-range", RANGE, "--pool", "python=0")
    ctx = create(d, memory_limit=512 << 20, pids_limit=32)
    run_in(d, ctx, "kept = 41")
    result = d.run("y = b'x' * 2**31", context_id=ctx["context_id"])
    assert result["error"]["name"] == "MemoryError", result["error"]
    code = ("import subprocess, time\n"
            "ps = [subprocess.Popen(['sleep', '600.75']) for _ in range(60)]\n"
            "time.sleep(30)\n")
    result = d.run(code, context_id=ctx["context_id"])
    assert (result["process"]["reason"], result["error"]["name"]) == (
        "pids_limit", "PidsLimitExceeded"), result
    assert wait_until(lambda: not pids_with_arg_under("600.75"), 5)
    assert run_in(d, ctx, "print(kept + 1)") == "42\n"
    resources = d.ok("GET", "/contexts/" + ctx["context_id"])["resources"]
    assert resources["pids"] >= 1 and resources["memory_bytes"] > 0, resources


def test_pooled_kernels_of_other_uids_start_with_the_default_memory_limit(start, kernel_user):
    """A kernel of another uid cannot be given a lower RLIMIT_DATA once it
    runs, so the pool starts its kernels with the default memory limit: a
    context with that limit takes one, a context with another starts cold,
    and both get MemoryError."""
    d = start("--kernel-uid-range", RANGE, "--pool", "python=1",
              "--memory-limit", str(512 << 20))
    pool = lambda: d.ok("GET", "/health")["pool"]["python"]
    assert wait_until(lambda: pool()["ready"] == 1, 60), pool()
    pooled = pool()["ready_pids"][0]
    warm = create(d)
    assert warm["pid"] == pooled and warm["memory_limit"] == 512 << 20
    assert wait_until(lambda: pool()["ready"] == 1, 60), pool()
    pooled = pool()["ready_pids"][0]
    cold = create(d, memory_limit=768 << 20)
    assert cold["pid"] != pooled and pool()["ready_pids"] == [pooled]
    for ctx in (warm, cold):
        run_in(d, ctx, "kept = 41")
        result = d.run("y = b'x' * 2**31", context_id=ctx["context_id"])
        assert result["error"]["name"] == "MemoryError", result["error"]
        assert run_in(d, ctx, "print(kept + 1)") == "42\n"


def test_kernel_user_reaches_not_the_daemon_but_contexts_share_a_uid(start, state_dir,
                                                                     kernel_user):
    d = start("--kernel-user", USER)
    a, b = create(d), create(d)
    out = probe(d, state_dir, a, b, 0)
    assert_denied(out, DAEMON_PATHS)
    assert TOKEN not in out["daemon_cmdline"]
    assert out["uid"] == kernel_user.pw_uid
    # what this mode does not protect: contexts run as the same user
    for name in OTHER_PATHS:
        assert out[name][0] == "reached", (name, out[name])
    groups = json.loads(run_in(d, a, "import os, json; print(json.dumps(os.getgroups()))"))
    assert kernel_user.pw_gid in groups
    assert a["cwd"] != b["cwd"] and os.stat(a["cwd"]).st_uid == kernel_user.pw_uid
    d.ok("DELETE", "/contexts/" + a["context_id"], status=204)
    assert wait_until(lambda: not os.path.exists(a["cwd"]), 10)


def test_default_mode_keeps_the_token_out_of_cmdline_and_environ(daemon_factory, state_dir):
    """Kernels run as the daemon's user (root here): they reach the token
    file and everything else the daemon can; only the token given in
    KB_TOKEN is wiped from the daemon's environment."""
    d = daemon_factory(token=TOKEN, state_dir=state_dir)
    a, b = create(d), create(d, cwd=str(state_dir.parent))
    assert a["cwd"] == str(d.dir), "no private dir: the daemon's cwd"
    out = probe(d, state_dir, a, b, 0)
    assert out["token_file"][0] == "reached" and TOKEN in out["token_file"][1]
    assert out["other_connection_file"][0] == "reached"
    e = Daemon([], env={"KB_TOKEN": TOKEN}, token=None, state_dir=str(state_dir) + "2")
    try:
        e.token = TOKEN
        ctx = create(e)
        environ = run_in(e, ctx, "print(open('/proc/%d/environ', 'rb').read())" % e.proc.pid)
        assert "KB_TOKEN=" in environ and TOKEN not in environ
        assert TOKEN not in open("/proc/%d/cmdline" % e.proc.pid).read()
        assert run_in(e, ctx, "import os; print('KB_TOKEN' in os.environ)") == "False\n"
    finally:
        e.close()


def test_adopted_kernels_keep_their_uid_after_a_restart(state_dir, kernel_user):
    d = Daemon(["--kernel-uid-range", "61020-61029", "--pool", "python=0"], token=TOKEN,
               state_dir=str(state_dir))
    try:
        a = create(d)
        uid = run_in(d, a, "import os; x = 42; print(os.getuid())")
    finally:
        d.kill()
    d = Daemon(["--kernel-uid-range", "61020-61029", "--pool", "python=0"], token=TOKEN,
               state_dir=str(state_dir))
    try:
        assert run_in(d, a, "import os; print(os.getuid(), x)") == uid.strip() + " 42\n"
        ctx = d.ok("GET", "/contexts/" + a["context_id"])
        assert ctx["cwd"] == a["cwd"]
        b = create(d)
        assert run_in(d, b, "import os; print(os.getuid())") != uid, "the uid is in use"
        d.ok("DELETE", "/contexts/" + a["context_id"], status=204)
        assert wait_until(lambda: not os.path.exists(a["cwd"]), 10)
    finally:
        d.close()


def test_default_mode_as_another_user_hides_the_daemons_environ(kernel_user):
    """A daemon that is not root, kernels of its own uid: the token file is
    theirs to read, but the daemon's environ, memory and fds are not (it
    is non-dumpable)."""
    home = Path(tempfile.mkdtemp(prefix="kbiso-user-", dir="/tmp"))
    os.chown(home, kernel_user.pw_uid, kernel_user.pw_gid)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KB_", "XDG_"))}
    env.update(HOME=str(home), KB_TOKEN=TOKEN, TMPDIR=str(home))

    def drop():
        os.setgroups([])
        os.setgid(kernel_user.pw_gid)
        os.setuid(kernel_user.pw_uid)

    port_file = home / "port"
    with open(home / "stderr", "wb") as err:
        proc = subprocess.Popen([BINARY, "serve", "--ephemeral", "--listen", "127.0.0.1:0",
                                 "--port-file", str(port_file), "--pool", "python=0"],
                                stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=home,
                                preexec_fn=drop)
    try:
        assert wait_until(lambda: port_file.exists() or proc.poll() is not None, 30)
        assert proc.poll() is None, (home / "stderr").read_text()
        d = Daemon.__new__(Daemon)
        d.port, d.token, d.proc = int(port_file.read_text()), TOKEN, proc
        code = PROBE_ENVIRON % dict(daemon=proc.pid)
        out = json.loads(d.run(code)["logs"]["stdout"])
        assert out["uid"] == kernel_user.pw_uid
        for name in ("environ", "mem", "fds"):
            assert out[name] == ["denied", "PermissionError"], (name, out[name])
        assert out["signal"][0] == "reached", "the same uid may signal"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)


PROBE_ENVIRON = r'''
import json, os
daemon = %(daemon)d
out = {"uid": os.getuid()}
def attempt(name, fn):
    try:
        out[name] = ["reached", repr(fn())[:200]]
    except OSError as e:
        out[name] = ["denied", type(e).__name__]
def read(path):
    with open(path, "rb") as f:
        return f.read(1)
attempt("environ", lambda: read("/proc/%%d/environ" %% daemon))
attempt("mem", lambda: read("/proc/%%d/mem" %% daemon))
attempt("fds", lambda: os.listdir("/proc/%%d/fd" %% daemon))
attempt("signal", lambda: os.kill(daemon, 0))
print(json.dumps(out))
'''


@pytest.mark.parametrize("args", [
    ["--kernel-uid-range", "abc"],
    ["--kernel-uid-range", "61009-61000"],
    ["--kernel-uid-range", "0-10"],
    ["--kernel-uid-range", "-5-10"],
    ["--kernel-uid-range", "1-"],
    ["--kernel-uid-range", "1000-200000"],
    ["--kernel-uid-range", "1-4294967295"],
    ["--kernel-user", ""],
    ["--kernel-user", "no-such-user-kb"],
    ["--kernel-user", "root"],
    ["--kernel-user", USER, "--kernel-uid-range", RANGE],
])
def test_bad_isolation_flags_exit_2(args, kernel_user, tmp_path):
    out = subprocess.run([BINARY, "serve", "--ephemeral", "--listen", "127.0.0.1:0", *args],
                         capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert out.returncode == 2, (args, out.stderr)
    assert out.stderr.strip(), args


def test_bad_isolation_env_exits_2(kernel_user, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KB_")}
    env["KB_KERNEL_UID_RANGE"] = "10-1"
    out = subprocess.run([BINARY, "serve", "--ephemeral", "--listen", "127.0.0.1:0"], env=env,
                         capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert out.returncode == 2 and "--kernel-uid-range" in out.stderr, out.stderr


def test_isolation_needs_root(kernel_user, tmp_path):
    tmp_path.chmod(0o777)

    def drop():
        os.setgid(kernel_user.pw_gid)
        os.setuid(kernel_user.pw_uid)

    for args in (["--kernel-user", USER], ["--kernel-uid-range", RANGE]):
        out = subprocess.run([BINARY, "serve", "--ephemeral", "--listen", "127.0.0.1:0", *args],
                             capture_output=True, text=True, timeout=30, cwd=tmp_path,
                             preexec_fn=drop)
        assert out.returncode == 2 and "root" in out.stderr, out.stderr
