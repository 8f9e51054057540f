"""--kernel-ports A-B: kernels reached over tcp listen on ports of the range,
five each, handed out in turn; a range with no five free ports fails the
start typed and leaves nothing behind. (The python language is mapped to
python3 so that no fork template takes the range's ports first.)"""

import os
import socket
import subprocess

from conftest import BINARY, error_of, pid_alive, wait_until
from outside_testlib import free_tcp_ports

BASE = ("--transport", "tcp", "--kernel", "python=python3", "--pool", "python=0")


def listening_ports(pid):
    """The TCP ports process pid listens on (its sockets in LISTEN state):
    its connection's five and, for ipykernel, the port its output streams
    bind for subprocesses' output (one the system chose)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    with open(f"/proc/{pid}/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                ports.add(int(fields[1].split(":")[1], 16))
    return ports


def a_range(n):
    """n consecutive ports under the ephemeral range, all free now."""
    for _ in range(50):
        first = free_tcp_ports(1)[0]
        try:
            held = []
            for port in range(first, first + n):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return first, first + n - 1
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports")


def test_kernels_and_forks_listen_on_the_range(daemon_factory):
    first, last = a_range(20)
    d = daemon_factory(*BASE, "--kernel-ports", f"{first}-{last}")
    seen = set()
    a = d.ok("POST", "/contexts", {"language": "python"}, status=201)
    b = d.ok("POST", "/contexts", {"language": "python"}, status=201)
    d.run("x = 41", context_id=a["context_id"])
    fork = d.ok("POST", "/contexts/%s/fork" % a["context_id"], {}, status=201)["contexts"][0]
    for ctx in (a, b, fork):
        listening = listening_ports(ctx["pid"])
        ports = {p for p in listening if first <= p <= last}
        assert len(ports) == 5, (listening, first, last)
        assert not ports & seen, "each kernel has five of its own"
        seen |= ports
    assert d.run("print(x + 1)", context_id=fork["context_id"])["logs"]["stdout"] == "42\n"
    assert d.run("print(2)", context_id=b["context_id"])["logs"]["stdout"] == "2\n"


def test_a_range_without_five_free_ports_fails_the_start_typed(daemon_factory):
    first, last = a_range(5)
    d = daemon_factory(*BASE, "--kernel-ports", f"{first}-{last}")
    kernels = d.state_dir / "kernels"
    before = sorted(os.listdir(kernels))
    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", first + 2))
        taken.listen()
        body = error_of(d.post("/contexts", {"language": "python"}), 503, "KERNEL_START_FAILED")
        assert body["message"] == ("no five free TCP ports on 127.0.0.1 in the kernels' range "
                                   f"{first}-{last}"), body
        assert sorted(os.listdir(kernels)) == before, "no connection file or log is left"
    finally:
        taken.close()
    ctx = d.ok("POST", "/contexts", {"language": "python"}, status=201)
    assert set(range(first, last + 1)) <= listening_ports(ctx["pid"])
    # the range is all in use now: the next start fails the same way
    error_of(d.post("/contexts", {"language": "python"}), 503, "KERNEL_START_FAILED")
    d.ok("DELETE", "/contexts/" + ctx["context_id"], status=204)
    assert wait_until(lambda: not pid_alive(ctx["pid"]), 10)
    again = d.ok("POST", "/contexts", {"language": "python"}, status=201)
    assert d.run("print(1 + 1)", context_id=again["context_id"])["logs"]["stdout"] == "2\n"


def test_bad_ranges_are_refused():
    for value in ("5-3", "1000-1010", "2000-2003", "60000-70000", "a-b", "2000", "-2000-2010"):
        out = subprocess.run([BINARY, "serve", "--ephemeral", "--listen", "127.0.0.1:0",
                              "--kernel-ports", value], capture_output=True, text=True, timeout=30)
        assert out.returncode == 2, (value, out)
        assert out.stderr.startswith(f"kernelbridge serve: --kernel-ports: bad value '{value}' "
                                     "(A-B: ports from 1024 to 65535, at least 5 of them)"), out


def serve_in_a_network_namespace(state_dir, sysctls, *args):
    """The daemon's log up to its first line of service, started in a network
    namespace of its own (sysctls written there, not on the machine), then
    stopped."""
    setup = "".join(f"open('/proc/sys/net/ipv4/{name}', 'w').write({value!r})\n"
                    for name, value in sysctls.items())
    argv = [BINARY, "serve", "--state-dir", str(state_dir), "--listen", "127.0.0.1:0", "--pool",
            "python=0", *args]
    code = setup + f"import os\nos.execv({BINARY!r}, {argv!r})\n"
    proc = subprocess.Popen(["unshare", "--net", "/usr/bin/python3", "-c", code],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = []
    try:
        for line in proc.stderr:
            log.append(line)
            if " serving sandbox " in line:
                break
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    return "".join(log)


def test_a_range_the_system_may_hand_out_is_warned_of(tmp_path):
    ephemeral = {"ip_local_port_range": "32768 60999",
                 "ip_local_reserved_ports": "40000-40005,40008"}
    log = serve_in_a_network_namespace(tmp_path / "a", ephemeral, "--kernel-ports",
                                       "40000-40008")
    assert ("warn kernel ports 40000-40008: 2 of them are in the system's ephemeral range "
            "32768-60999 and not reserved") in log, log  # 40006 and 40007
    log = serve_in_a_network_namespace(tmp_path / "b", ephemeral, "--kernel-ports",
                                       "40000-40005")
    assert " serving sandbox " in log and "warn kernel ports" not in log, log
    log = serve_in_a_network_namespace(tmp_path / "c", ephemeral, "--kernel-ports",
                                       "30000-30100")
    assert " serving sandbox " in log and "warn kernel ports" not in log, log
