"""Routing by sandbox (SPEC section 12): a fleet of real daemons.

Three daemons on this machine with sandbox ids kb-0..2, each on its own
state dir (no kernel pool: ``--pool python=0``), are one service to the SDK
(``sandboxes={id: url}``). Contexts created without a sandbox spread over
them; one daemon is killed with SIGKILL (its kernels keep running): calls on
its contexts raise SandboxUnavailable within the connect timeout while the
others work, new contexts go to the live ones; restarted on its state dir
(same sandbox id, a new port, told to the service with ``set_sandbox_url``
or by a new service over the new URL), it adopts its kernels and every
context comes back with its variable. The template form is checked with a
router of the kind deploy/README.md describes (one URL, the sandbox id in
the path), and SandboxUnavailable's timing against a listening socket whose
backlog is full (a connect that hangs), on loopback only.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

from .kbsdk_testlib import Daemon, start_daemon  # isort: skip
import kernelbridge  # isort: skip
from kernelbridge._routing import choose_sandbox, id_order  # isort: skip

IDS = ["kb-0", "kb-1", "kb-2"]
CONTEXTS = 30
DEAD_WITHIN = 2.0  # seconds: the default connect timeout, and the target


class Fleet:
    """Three daemons kb-0..2 with private state dirs; one can be killed and restarted."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.token = "kbfleet-" + uuid.uuid4().hex
        self.daemons: Dict[str, Daemon] = {}
        for sid in IDS:
            self.start(sid)

    def start(self, sid: str) -> Daemon:
        home = self.root / sid
        (home / "port").unlink(missing_ok=True)  # a restart must wait for its own port
        self.daemons[sid] = start_daemon(home, "--sandbox-id", sid, "--pool", "python=0", token=self.token)
        return self.daemons[sid]

    def urls(self) -> Dict[str, str]:
        return {sid: d.url for sid, d in self.daemons.items()}

    def kill(self, sid: str) -> None:
        """SIGKILL, as in a crash: its kernels keep running for the next daemon to adopt."""
        proc = self.daemons[sid].proc
        proc.kill()
        proc.wait()

    def contexts(self, sid: str) -> List[Dict[str, Any]]:
        """The daemon's own GET /contexts, without the SDK."""
        req = urllib.request.Request(self.daemons[sid].url + "/contexts",
                                     headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return list(json.load(resp)["contexts"])

    def reset(self) -> None:
        """Every daemon up and without contexts, whatever a test before left:
        a failed test must not fail the ones after it."""
        for sid in IDS:
            if self.daemons[sid].proc.poll() is not None:
                self.start(sid)
            for ctx in self.contexts(sid):
                req = urllib.request.Request(f"{self.daemons[sid].url}/contexts/{ctx['context_id']}",
                                             method="DELETE",
                                             headers={"Authorization": f"Bearer {self.token}"})
                urllib.request.urlopen(req, timeout=30).close()

    def stop(self) -> None:
        for d in self.daemons.values():
            if d.proc.poll() is None:
                d.stop()
        for sid in IDS:  # kernels a killed daemon left and nobody adopted
            for pid in kernel_pids(self.root / sid / "state"):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def kernel_pids(state_dir: Path) -> List[int]:
    """Live processes started with a connection file under ``state_dir``/kernels."""
    mark = (str(state_dir) + "/kernels/").encode()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if mark in Path(f"/proc/{entry}/cmdline").read_bytes():
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


@pytest.fixture(scope="module")
def module_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    f: Optional[Fleet] = None
    try:
        f = Fleet(tmp_path_factory.mktemp("fleet"))
        yield f
    finally:
        if f is not None:
            f.stop()


@pytest.fixture
def fleet(module_fleet: Fleet) -> Fleet:
    module_fleet.reset()
    return module_fleet


# -- placement and the routing forms, no daemon ------------------------------


def test_placement_prefers_fewest_then_round_robin_in_id_order():
    assert choose_sandbox({"kb-0": 3, "kb-1": 1, "kb-2": 2}, None) == "kb-1"
    assert choose_sandbox({"kb-0": 1, "kb-1": 1, "kb-2": 1}, None) == "kb-0"
    assert choose_sandbox({"kb-0": 1, "kb-1": 1, "kb-2": 1}, "kb-0") == "kb-1"
    assert choose_sandbox({"kb-0": 1, "kb-1": 1, "kb-2": 1}, "kb-2") == "kb-0"  # wraps around
    assert choose_sandbox({"kb-0": 1, "kb-1": 5, "kb-2": 1}, "kb-0") == "kb-2"  # skips the fuller one
    assert choose_sandbox({"kb-2": 0, "kb-10": 0}, None) == "kb-2"  # ids compare as numbers
    assert sorted(["kb-10", "kb-9", "kb-1"], key=id_order) == ["kb-1", "kb-9", "kb-10"]
    with pytest.raises(ValueError):
        choose_sandbox({}, None)
    # many placements on equal counts rotate over all sandboxes
    last, chosen = None, []
    for _ in range(6):
        last = choose_sandbox({"kb-0": 0, "kb-1": 0, "kb-2": 0}, last)
        chosen.append(last)
    assert chosen == ["kb-0", "kb-1", "kb-2"] * 2


def test_template_and_mapping_forms_build_the_urls():
    template = "http://{sandbox_id}.kernelbridge.default.svc:8899"
    with kernelbridge.InterpreterService(base_url=template, sandboxes=["kb-1", "kb-0", "kb-10"]) as kb:
        assert kb.sandbox_ids == ["kb-0", "kb-1", "kb-10"]
        assert kb.sandbox_urls == {f"kb-{n}": f"http://kb-{n}.kernelbridge.default.svc:8899" for n in (0, 1, 10)}
        with pytest.raises(ValueError, match="routes to sandboxes"):
            kb.sandbox_id  # noqa: B018 - a routed service has no one sandbox
        with pytest.raises(ValueError, match="say which sandbox"):
            kb.connect_context("abc")
        ctx = kb.connect_context("abc", sandbox_id="kb-10")
        assert (ctx.sandbox_id, ctx.context_id, ctx.language) == ("kb-10", "abc", "python")
        with pytest.raises(ValueError, match="unknown sandbox 'kb-7'"):
            kb.connect_context({"sandbox_id": "kb-7", "context_id": "abc", "language": "python"})
        kb.set_sandbox_url("kb-1", "http://127.0.0.1:1")
        assert kb.sandbox_urls["kb-1"] == "http://127.0.0.1:1"
    mapping = {"a": "http://10.0.0.1:8899", "b": "http://10.0.0.2:8899"}
    with kernelbridge.InterpreterService(sandboxes=mapping, token="t") as kb:
        assert kb.sandbox_urls == mapping
    with pytest.raises(ValueError, match="sandbox_id"):
        kernelbridge.InterpreterService(base_url=template)  # a template needs the ids
    with pytest.raises(ValueError, match="needs base_url"):
        kernelbridge.InterpreterService(sandboxes=["kb-0"])
    with pytest.raises(TypeError):
        kernelbridge.InterpreterService(sandboxes="kb-0", base_url=template)


# -- SandboxUnavailable's timing, loopback only --------------------------------


def _full_listener() -> List[socket.socket]:
    """A loopback socket that listens but never accepts (first), and the
    connections that fill its backlog, so that a new connect hangs (Linux
    drops the SYN) instead of being refused."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    for _ in range(16):
        s = socket.socket()
        s.settimeout(0.3)
        try:
            s.connect(listener.getsockname())
        except (socket.timeout, OSError):
            s.close()
            break
        fillers.append(s)
    else:
        pytest.fail("could not fill the listen backlog")
    return [listener] + fillers


@pytest.mark.parametrize("timeout", [0.5, None])
def test_a_connect_that_hangs_raises_sandbox_unavailable_within_the_connect_timeout(timeout):
    sockets = _full_listener()
    url = "http://127.0.0.1:%d" % sockets[0].getsockname()[1]
    limit = DEAD_WITHIN if timeout is None else timeout
    kwargs = {} if timeout is None else {"connect_timeout": timeout}
    try:
        with kernelbridge.InterpreterService(sandboxes={"kb-9": url}, **kwargs) as kb:
            ctx = kb.connect_context("x", sandbox_id="kb-9")
            t0 = time.monotonic()
            with pytest.raises(kernelbridge.SandboxUnavailable) as info:
                ctx.run("1")
            elapsed = time.monotonic() - t0
            assert limit * 0.9 <= elapsed < limit + 0.5, elapsed
            err = info.value
            assert (err.sandbox_id, err.url, err.code) == ("kb-9", url, "SANDBOX_UNAVAILABLE")
            assert isinstance(err, kernelbridge.KernelBridgeConnectionError)
            assert isinstance(err, ConnectionError) and isinstance(err, kernelbridge.KernelBridgeError)
            # placement skips it, and with nobody else to place on says so, within the timeout too
            t0 = time.monotonic()
            with pytest.raises(kernelbridge.SandboxUnavailable, match="no sandbox answered"):
                kb.create_context(language="python")
            assert time.monotonic() - t0 < limit + 0.5
    finally:
        for s in sockets:
            s.close()


def test_a_refused_connection_is_reported_at_once():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    url = "http://127.0.0.1:%d" % s.getsockname()[1]
    try:
        async def main() -> float:
            async with kernelbridge.AsyncInterpreterService(sandboxes={"kb-0": url}) as kb:
                t0 = time.monotonic()
                with pytest.raises(kernelbridge.SandboxUnavailable):
                    await kb.list_contexts()
                return time.monotonic() - t0

        assert asyncio.run(main()) < 0.5
    finally:
        s.close()


# -- the fleet simulation ---------------------------------------------------------


async def _create_many(kb: kernelbridge.AsyncInterpreterService, n: int,
                       parallel: int = 6) -> List[kernelbridge.AsyncInterpreterContext]:
    gate = asyncio.Semaphore(parallel)

    async def one() -> kernelbridge.AsyncInterpreterContext:
        async with gate:
            return await kb.create_context(language="python", request_timeout=120)

    return list(await asyncio.gather(*(one() for _ in range(n))))


def test_fleet_async(fleet: Fleet):
    async def main() -> None:
        kb = kernelbridge.AsyncInterpreterService(sandboxes=fleet.urls(), token=fleet.token)
        try:
            await simulate(kb)
        finally:
            await kb.aclose()

    async def simulate(kb: kernelbridge.AsyncInterpreterService) -> None:
        contexts = await _create_many(kb, CONTEXTS)
        by_sandbox = {sid: [c for c in contexts if c.sandbox_id == sid] for sid in IDS}
        assert sum(len(v) for v in by_sandbox.values()) == CONTEXTS, [c.sandbox_id for c in contexts]
        for sid in IDS:
            on_daemon = sorted(c["context_id"] for c in fleet.contexts(sid))
            assert on_daemon == sorted(c.context_id for c in by_sandbox[sid])
            assert len(on_daemon) >= 8, {s: len(v) for s, v in by_sandbox.items()}
            assert all(c["sandbox_id"] == sid for c in fleet.contexts(sid))
        results = await asyncio.gather(*(c.run(f"v = {i}\nv * 2") for i, c in enumerate(contexts)))
        assert [r.text for r in results] == [str(i * 2) for i in range(CONTEXTS)]
        listed = await kb.list_contexts()
        assert sorted((c.sandbox_id, c.context_id) for c in listed) == \
            sorted((c.sandbox_id, c.context_id) for c in contexts)

        fleet.kill("kb-1")
        dead = by_sandbox["kb-1"]
        live = [(i, c) for i, c in enumerate(contexts) if c.sandbox_id != "kb-1"]

        async def timed_dead_run(ctx: kernelbridge.AsyncInterpreterContext) -> float:
            t0 = time.monotonic()
            with pytest.raises(kernelbridge.SandboxUnavailable) as info:
                await ctx.run("v")
            assert info.value.sandbox_id == "kb-1"
            return time.monotonic() - t0

        outcome = await asyncio.gather(timed_dead_run(dead[0]), *(c.run("v") for _, c in live))
        assert outcome[0] < DEAD_WITHIN, outcome[0]
        assert [r.text for r in outcome[1:]] == [str(i) for i, _ in live]
        for ctx in dead:
            with pytest.raises(kernelbridge.SandboxUnavailable):
                await ctx.run("v")
        extra = await _create_many(kb, 4)
        # fewest first, one placement after another even when started together:
        # the gap between the live two closes by 4, or to its parity
        assert {c.sandbox_id for c in extra} <= {"kb-0", "kb-2"}
        before = [len(by_sandbox[sid]) for sid in ("kb-0", "kb-2")]
        after = [n + sum(c.sandbox_id == sid for c in extra) for n, sid in zip(before, ("kb-0", "kb-2"))]
        gap = abs(before[0] - before[1])
        assert abs(after[0] - after[1]) == (gap - 4 if gap >= 4 else gap % 2), (before, after)
        listed = await kb.list_contexts()  # the reachable sandboxes only
        assert {c.sandbox_id for c in listed} == {"kb-0", "kb-2"}
        assert len(listed) == len(live) + len(extra)
        await asyncio.gather(*(c.close() for c in extra))

        restarted = fleet.start("kb-1")  # same state dir and sandbox id, a new port
        kb.set_sandbox_url("kb-1", restarted.url)
        back = await asyncio.gather(*(c.run("v") for c in dead))  # the handles made before the kill
        index = {c.context_id: i for i, c in enumerate(contexts)}
        assert [r.text for r in back] == [str(index[c.context_id]) for c in dead], "a context lost its state"
        assert sorted(c["context_id"] for c in fleet.contexts("kb-1")) == sorted(c.context_id for c in dead)
        await asyncio.gather(*(c.close() for c in contexts))
        assert all(fleet.contexts(sid) == [] for sid in IDS)

    asyncio.run(main())


def test_fleet_sync(fleet: Fleet):
    kb = kernelbridge.InterpreterService(sandboxes=fleet.urls(), token=fleet.token)
    try:
        contexts = [kb.create_context(language="python") for _ in range(6)]
        assert sorted(c.sandbox_id for c in contexts) == sorted(IDS * 2)  # fewest first: 2 each
        for i, ctx in enumerate(contexts):
            assert ctx.run(f"w = {i}").error is None
        fleet.kill("kb-2")
        dead = [c for c in contexts if c.sandbox_id == "kb-2"]
        t0 = time.monotonic()
        with pytest.raises(kernelbridge.SandboxUnavailable):
            dead[0].run("w")
        assert time.monotonic() - t0 < DEAD_WITHIN
        assert [c.run("w").text for c in contexts if c.sandbox_id != "kb-2"] == \
            [str(i) for i, c in enumerate(contexts) if c.sandbox_id != "kb-2"]
        extra = kb.create_context(language="python")
        assert extra.sandbox_id in ("kb-0", "kb-1")
        kb.delete_context(extra.context_id, sandbox_id=extra.sandbox_id)
        assert kb.run("6 * 7", isolated=True).text == "42"  # placed like a context, on a live one
        with kernelbridge.InterpreterService(sandboxes=fleet.urls(), token="wrong") as bad:
            with pytest.raises(kernelbridge.UnauthorizedError):  # an answer, not an outage: raised
                bad.create_context(language="python")

        fleet.start("kb-2")
        # a new service over the new URL: stored handles reconnect without a round trip
        with kernelbridge.InterpreterService(sandboxes=fleet.urls(), token=fleet.token) as kb2:
            for i, ctx in enumerate(contexts):
                again = kb2.connect_context(ctx.to_json())
                assert again.sandbox_id == ctx.sandbox_id
                assert again.run("w").text == str(i)
            for ctx in contexts:
                kb2.delete_context(ctx.to_json())
    finally:
        kb.close()


# -- the template form, through a router keyed by sandbox id ---------------------


class PathRouter:
    """A router of the kind deploy/README.md describes: ``/<sandbox id>/<path>``
    goes to that sandbox's daemon (one request a connection, ``Connection:
    close``); an unknown or stopped sandbox gets 503, as from a router whose
    upstream is not ready."""

    def __init__(self, upstream: Dict[str, int]) -> None:
        self.upstream = upstream
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(asyncio.start_server(self.handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            line, rest = head.split(b"\r\n", 1)
            method, target, version = line.split(b" ")
            match = re.match(rb"^/([A-Za-z0-9-]+)(/.*)$", target)
            port = self.upstream.get(match.group(1).decode()) if match else None
            try:
                if port is None:
                    raise OSError("no upstream")
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 9\r\n"
                             b"Connection: close\r\n\r\nnot ready")
                await writer.drain()
                return
            rest = re.sub(rb"(?im)^connection:[^\r\n]*\r\n", b"", rest)
            up_writer.write(b"%s %s %s\r\nConnection: close\r\n%s" % (method, match.group(2), version, rest))
            await asyncio.gather(self.pipe(reader, up_writer), self.pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except OSError:
            pass
        finally:
            dst.close()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def test_template_form_through_a_router(fleet: Fleet):
    ports = {sid: int(d.url.rsplit(":", 1)[1]) for sid, d in fleet.daemons.items()}
    router = PathRouter(ports)
    template = f"http://127.0.0.1:{router.port}/{{sandbox_id}}"
    try:
        with kernelbridge.InterpreterService(base_url=template, sandboxes=IDS + ["kb-3"], token=fleet.token,
                                             connect_timeout=1.0) as kb:
            ctx = kb.create_context(language="python", sandbox_id="kb-1")
            assert ctx.sandbox_id == "kb-1"
            assert ctx.run("t = 5\nt + 1").text == "6"
            assert [c["context_id"] for c in fleet.contexts("kb-1")] == [ctx.context_id]
            placed = kb.create_context(language="python")  # kb-3 answers 503: skipped
            assert placed.sandbox_id in IDS
            with pytest.raises(kernelbridge.SandboxUnavailable) as info:
                kb.sandbox("kb-3").health()
            assert info.value.sandbox_id == "kb-3" and info.value.url == f"http://127.0.0.1:{router.port}/kb-3"
            view = kb.sandbox("kb-0")
            assert view.health()["sandbox_id"] == "kb-0" and view.sandbox_id == "kb-0"
            view.close()  # a view: the service's connections and thread stay
            assert kb.sandbox("kb-0").run("2 + 2").text == "4"
            assert ctx.run("t").text == "5"
            ctx.close()
            placed.close()
    finally:
        router.close()


def test_one_daemon_by_base_url_learns_its_sandbox_id(fleet: Fleet):
    d = fleet.daemons["kb-0"]
    with kernelbridge.InterpreterService(base_url=d.url, token=fleet.token) as kb:
        with pytest.raises(RuntimeError, match="first answer"):
            kb.sandbox_id  # noqa: B018 - not known before the daemon answered
        assert kb.run("3 * 3").text == "9"  # the default context: one daemon, no routing needed
        assert kb.health()["sandbox_id"] == "kb-0"
        assert kb.sandbox_id == "kb-0" and kb.sandbox_ids == ["kb-0"]
        assert kb.connect_context("default-python").sandbox_id == "kb-0"
        with pytest.raises(ValueError, match="belongs to sandbox 'kb-1'"):
            kb.connect_context({"sandbox_id": "kb-1", "context_id": "c", "language": "python"})


def test_forks_and_checkpoints_stay_in_the_contexts_sandbox(fleet: Fleet):
    with kernelbridge.InterpreterService(sandboxes=fleet.urls(), token=fleet.token) as kb:
        ctx = kb.create_context(language="python", sandbox_id="kb-1")
        try:
            ctx.run("v = 'on kb-1'")
            (child,) = kb.fork_context(ctx)
            assert child.sandbox_id == "kb-1" and child.forked_from.context_id == ctx.context_id
            assert child.context_id in [c["context_id"] for c in fleet.contexts("kb-1")]
            assert child.context_id not in [c["context_id"] for s in ("kb-0", "kb-2")
                                            for c in fleet.contexts(s)]
            assert child.run("v").text == "'on kb-1'"
            with pytest.raises(ValueError, match="sandbox"):
                kb.fork_context(ctx.context_id)  # a bare id: which sandbox is not said
            cp = kb.checkpoint_context(ctx.context_id, sandbox_id="kb-1")
            assert cp.sandbox_id == "kb-1"
            assert kb.list_checkpoints(ctx.to_json()) == [cp]
            assert kb.restore_context(ctx, cp).generation == 2
            kb.delete_checkpoint(ctx, cp)
            child.close()
        finally:
            ctx.close()
