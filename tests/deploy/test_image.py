"""The container image, built and run for real.

scripts/build-image.sh builds kernelbridge:<version> (cached layers: fast
when nothing changed); each test runs it with podman as deploy/k8s's
StatefulSet runs it (imagelib.Container: uid 10001, read-only root,
--cap-drop=ALL, no new privileges, the state dir on a volume, /tmp and HOME
as tmpfs, KB_TOKEN from the environment, KB_SANDBOX_ID the pod's name) and
checks what a user would: /health, /contexts refused without the token,
Python and bash with state kept, a matplotlib PNG, exit 0 on SIGTERM within
the grace, no zombie left; the supervisor's restart of a daemon killed
inside the container (contexts back with their variables, pids and
generation within 2 s); the SDK's fleet test's steps over two such
containers (placement, SandboxUnavailable while a daemon is down, the
contexts back when it is up again), and what a container's end loses;
what the image holds.
"""

from __future__ import annotations

import base64
import os
import pathlib
import signal
import time
import uuid
from typing import Iterator, List

import pytest

from . import imagelib
from .imagelib import Container, children, cmdline, get, podman

import kernelbridge  # isort: skip  (the working tree's SDK, put on sys.path by imagelib)

HEALTH_AGAIN_WITHIN = 2.0  # seconds


@pytest.fixture(scope="module")
def image() -> str:
    return imagelib.build_image()


@pytest.fixture
def containers(image: str, tmp_path: pathlib.Path) -> Iterator[List[Container]]:
    """Started containers are appended; all are removed at the end."""
    made: List[Container] = []
    try:
        yield made
    finally:
        for c in made:
            c.remove()
        imagelib.remove_state(tmp_path)


def start(containers: List[Container], image: str, tmp: pathlib.Path, sandbox_id: str,
          token: str) -> Container:
    c = Container(image, sandbox_id, tmp / sandbox_id, token)
    containers.append(c)
    c.start()
    c.wait_healthy()
    return c


def daemon_pid(c: Container) -> int:
    """The daemon: the supervisor's (the container's first process's) child
    running kernelbridge."""
    supervisor = c.host_pid()
    assert cmdline(supervisor)[:3] == ["/usr/local/bin/kernelbridge", "serve", "--supervise"], \
        cmdline(supervisor)
    daemons = [p for p in children(supervisor) if cmdline(p)[:1] == ["/usr/local/bin/kernelbridge"]]
    assert len(daemons) == 1, [(p, cmdline(p)) for p in children(supervisor)]
    return daemons[0]


def test_the_image_serves_as_the_statefulset_runs_it(image, containers, tmp_path):
    token = "kbimg-" + uuid.uuid4().hex
    c = start(containers, image, tmp_path, "kb-0", token)
    # the process is what the manifest says: uid, capabilities, no new privileges, read-only root
    status = pathlib.Path(f"/proc/{c.host_pid()}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines())
    assert fields["Uid"].split()[:2] == ["10001", "10001"], fields["Uid"]
    assert fields["CapEff"].strip() == "0000000000000000" and fields["CapBnd"].strip() == "0000000000000000"
    assert fields["NoNewPrivs"].strip() == "1"
    assert c.exec("sh", "-c", "touch /usr/x 2>&1; echo $?", check=False).stdout.strip().endswith("1")
    # the token is wiped from every environment the daemon and its supervisor started with
    for pid in [c.host_pid()] + [p for p in children(c.host_pid()) if cmdline(p)[:1] == [cmdline(c.host_pid())[0]]]:
        assert token.encode() not in pathlib.Path(f"/proc/{pid}/environ").read_bytes()
    # /health needs no token; the API does
    code, health = get(c.url + "/health")
    assert code == 200 and health["sandbox_id"] == "kb-0", health
    assert get(c.url + "/contexts")[0] == 401
    assert get(c.url + "/contexts", token="wrong")[0] == 401
    assert get(c.url + "/contexts", token=token)[0] == 200
    # Python and bash, state kept
    c.api("POST", "/contexts", {"language": "python", "context_id": "py"})
    c.api("POST", "/run", {"context_id": "py", "code": "x = 21"})
    result = c.api("POST", "/run", {"context_id": "py", "code": "x * 2"})
    assert result["results"][0]["text"] == "42" and result["error"] is None, result
    c.api("POST", "/contexts", {"language": "bash", "context_id": "sh"})
    c.api("POST", "/run", {"context_id": "sh", "code": "cd /tmp && greeting=hello"})
    result = c.api("POST", "/run", {"context_id": "sh", "code": 'echo "$greeting from $PWD as $(id -u)"'})
    assert result["logs"]["stdout"] == "hello from /tmp as 10001\n", result
    # orphans (a subshell's background job) go to the supervisor, which reaps them
    c.api("POST", "/run", {"context_id": "sh", "code": "(sleep 0.2 &); (sleep 0.3 &)"})
    time.sleep(1.0)
    states = [pathlib.Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
              for p in children(c.host_pid()) if pathlib.Path(f"/proc/{p}").exists()]
    assert "Z" not in states, states
    # a matplotlib figure comes back as a PNG
    plot = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"
    result = c.api("POST", "/run", {"context_id": "py", "code": plot})
    pngs = [r["png"] for r in result["results"] if r.get("png")]
    assert result["error"] is None and len(pngs) == 1, result
    assert base64.b64decode(pngs[0]).startswith(b"\x89PNG\r\n\x1a\n")
    # SIGTERM: exit 0 within the pod's grace, kernels shut down with it
    code, took = c.stop()
    assert code == 0, c.logs()
    assert took < imagelib.grace_seconds(), took
    assert '"stopped"' in c.logs() or "stopped" in c.logs()


def test_a_daemon_killed_inside_the_container_loses_no_context(image, containers, tmp_path):
    token = "kbimg-" + uuid.uuid4().hex
    c = start(containers, image, tmp_path, "kb-0", token)
    ids = [f"ctx{i}" for i in range(10)]
    for i, cid in enumerate(ids):
        c.api("POST", "/contexts", {"language": "python", "context_id": cid})
        assert c.api("POST", "/run", {"context_id": cid, "code": f"v = {i} * 7"})["error"] is None
    before = {x["context_id"]: x for x in c.api("GET", "/contexts")["contexts"]}
    assert sorted(before) == sorted(ids)
    supervisor, daemon = c.host_pid(), daemon_pid(c)
    kernels = {before[cid]["pid"] for cid in ids}

    os.kill(daemon, signal.SIGKILL)
    t0 = time.monotonic()
    while get(c.url + "/health", timeout=0.5)[0] != 200:
        assert time.monotonic() - t0 < 10, c.logs()
        time.sleep(0.02)
    back_in = time.monotonic() - t0
    print(f"/health again {back_in:.3f} s after SIGKILL to the daemon;",
          *[line for line in c.logs().splitlines() if "supervisor" in line or "serving" in line], sep="\n")
    assert back_in < HEALTH_AGAIN_WITHIN, back_in
    assert c.running() and c.host_pid() == supervisor
    assert daemon_pid(c) != daemon
    # the kernels stayed, re-parented to the supervisor, and were adopted
    on_host = {imagelib.ns_pid(p): p for p in children(supervisor)}  # a context's pid is the container's
    assert kernels <= set(on_host), (kernels, on_host)
    after = {x["context_id"]: x for x in c.api("GET", "/contexts")["contexts"]}
    assert sorted(after) == sorted(ids)
    for i, cid in enumerate(ids):
        assert (after[cid]["pid"], after[cid]["generation"]) == (before[cid]["pid"], before[cid]["generation"])
        result = c.api("POST", "/run", {"context_id": cid, "code": "v"})
        assert result["results"][0]["text"] == str(i * 7), result
    assert "died of SIGKILL" in c.logs()

    # SIGTERM still ends everything cleanly within the grace
    code, took = c.stop()
    assert code == 0, c.logs()
    assert took < imagelib.grace_seconds(), took
    assert not any(pathlib.Path(f"/proc/{on_host[pid]}").exists() for pid in kernels)


def kb1_unavailable(kb, dead, live, values):
    """kb-1 down: its context's run is SandboxUnavailable at once, kb-0's
    contexts go on, and a new context goes to kb-0 (returned)."""
    t0 = time.monotonic()
    with pytest.raises(kernelbridge.SandboxUnavailable) as info:
        dead[0].run("w")
    assert info.value.sandbox_id == "kb-1" and time.monotonic() - t0 < 2.0
    assert [x.run("w").text for x in live] == [values[x.context_id] for x in live]
    extra = kb.create_context(language="python")
    assert extra.sandbox_id == "kb-0"
    return extra


def test_the_sdk_routes_over_two_containers(image, containers, tmp_path):
    token = "kbimg-" + uuid.uuid4().hex
    fleet = {sid: start(containers, image, tmp_path, sid, token) for sid in ("kb-0", "kb-1")}
    with kernelbridge.InterpreterService(sandboxes={s: c.url for s, c in fleet.items()}, token=token) as kb:
        contexts = [kb.create_context(language="python") for _ in range(4)]
        assert sorted(x.sandbox_id for x in contexts) == ["kb-0", "kb-0", "kb-1", "kb-1"]
        for i, ctx in enumerate(contexts):
            assert ctx.run(f"w = {i}").error is None
        assert [ctx.run("w").text for ctx in contexts] == ["0", "1", "2", "3"]
        for sid, c in fleet.items():  # each context is where the SDK says
            on = sorted(x["context_id"] for x in c.api("GET", "/contexts")["contexts"])
            assert on == sorted(x.context_id for x in contexts if x.sandbox_id == sid)
        values = {x.context_id: str(i) for i, x in enumerate(contexts)}
        dead = [x for x in contexts if x.sandbox_id == "kb-1"]
        live = [x for x in contexts if x.sandbox_id == "kb-0"]
        # a daemon crash in kb-1 is a restart inside its container: its contexts stay
        os.kill(daemon_pid(fleet["kb-1"]), signal.SIGKILL)
        fleet["kb-1"].wait_healthy()
        assert [ctx.run("w").text for ctx in contexts] == ["0", "1", "2", "3"]
        # as the SDK's fleet test does: kb-1's daemon dead, its kernels running, until
        # it is started again (here its supervisor is held by SIGSTOP meanwhile)
        supervisor = fleet["kb-1"].host_pid()
        os.kill(supervisor, signal.SIGSTOP)
        try:
            os.kill(daemon_pid(fleet["kb-1"]), signal.SIGKILL)
            while get(fleet["kb-1"].url + "/health", timeout=0.5)[0] == 200:
                time.sleep(0.02)
            extra = kb1_unavailable(kb, dead, live, values)
            kb.delete_context(extra.context_id, sandbox_id="kb-0")
        finally:
            os.kill(supervisor, signal.SIGCONT)
        fleet["kb-1"].wait_healthy()
        # the handles made before: every context back with its variable
        assert [x.run("w").text for x in contexts] == ["0", "1", "2", "3"]
        # kb-1's container gone: SandboxUnavailable at once, kb-0 goes on, new contexts go there
        podman("kill", fleet["kb-1"].name)
        podman("wait", fleet["kb-1"].name, check=False)
        kb1_unavailable(kb, dead, live, values)
        # the container started again (a pod replacement): records kept, contexts not
        podman("start", fleet["kb-1"].name)
        hostport = podman("port", fleet["kb-1"].name).stdout.strip().splitlines()[0]
        fleet["kb-1"].port = int(hostport.rsplit(":", 1)[1])
        fleet["kb-1"].started_at = time.monotonic()
        fleet["kb-1"].wait_healthy()
        kb.set_sandbox_url("kb-1", fleet["kb-1"].url)
        with pytest.raises(kernelbridge.KernelBridgeError) as gone:
            dead[0].run("w")
        assert gone.value.code == "SESSION_NOT_FOUND", gone.value
        processes = fleet["kb-1"].api("GET", "/processes")
        assert len(processes["processes"]) >= 2, processes


def test_the_image_holds_the_runtime_only(image):
    run = ["run", "--rm", "--runtime", imagelib.RUNTIME, "--network", "none", *imagelib.ulimits(),
           "--entrypoint", "/bin/sh", image, "-c"]
    found = podman(*run, "for p in /usr/bin/cc /usr/bin/gcc /usr/bin/cmake /usr/bin/make /usr/include/zmq.h "
                         "/usr/include/stdio.h /src /stage /build; do [ -e $p ] && echo $p; done; true").stdout
    assert found.strip() == "", found
    packages = set(podman(*run, "dpkg-query -W -f '${Package}\\n'").stdout.split())
    for needed in ("libzmq5", "libczmq4", "libjansson4", "libmicrohttpd12", "libsqlite3-0", "libwslay1",
                   "python3-ipykernel", "python3-metakernel", "python3-matplotlib"):
        assert needed in packages, needed
    for unwanted in ("gcc", "cpp", "cmake", "make", "libc6-dev", "libzmq3-dev", "pkg-config"):
        assert unwanted not in packages, unwanted
    # no secret in any layer: the image's config and history hold no token
    config = podman("image", "inspect", image).stdout
    history = podman("history", "--no-trunc", "--format", "{{.CreatedBy}}", image).stdout
    for text in (config, history):
        assert "KB_TOKEN=" not in text
    assert podman("image", "inspect", "--format", "{{.Config.User}}", image).stdout.strip() == "10001:10001"
