"""Forks, checkpoints and restores through the SDK (SPEC section 13), blocking
and async, against a real daemon with real ipykernel kernels; and the
``rollback`` argument of run, which the SDK passes on only when given."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import Any, Dict, List

import pytest

import kernelbridge
from kernelbridge import (
    Checkpoint,
    CheckpointNotFoundError,
    ContextExistsError,
    ForkOrigin,
    InterpreterContext,
    LimitExceededError,
    RestoreOrigin,
    SessionNotFoundError,
    UnsupportedOptionError,
)

from .kbsdk_testlib import arun, start_daemon


@pytest.fixture(scope="module")
def small_daemon(tmp_path_factory: pytest.TempPathFactory):
    """A daemon of its own with --max-checkpoints 2 (the shared one keeps 8)."""
    d = start_daemon(tmp_path_factory.mktemp("forkdaemon"), "--max-checkpoints", "2",
                     token="kbfork-" + uuid.uuid4().hex)
    try:
        yield d
    finally:
        assert d.stop() == 0, d.log()[-4000:]


def test_fork_context_blocking(kb, new_id):
    parent = kb.create_context(language="python", context_id=new_id("parent"))
    try:
        parent.run("x = 41\nimport os; os.environ['FORKED'] = 'yes'")
        (child,) = kb.fork_context(parent)
        try:
            assert isinstance(child, InterpreterContext)
            assert child.context_id.startswith("ctx_") and child.context_id != parent.context_id
            assert child.sandbox_id == parent.sandbox_id and child.language == "python"
            assert child.generation == 1
            assert child.forked_from == ForkOrigin(parent.context_id, execution_count=1, generation=1)
            assert child.restored_from is None
            got = child.run("import os; print(x + 1, os.environ['FORKED'])")
            assert got.error is None and got.logs.stdout == "42 yes\n"
            child.run("x = 'changed in the fork'")
            assert parent.run("x").text == "41"  # the parent is not disturbed
            assert kb.get_context(child.context_id).forked_from.context_id == parent.context_id
        finally:
            child.close()
    finally:
        parent.close()


def test_fork_many_named_and_with_limits(kb, new_id):
    parent = kb.create_context(language="python", context_id=new_id("p"))
    made: List[InterpreterContext] = []
    try:
        parent.run("y = 7")
        made += kb.fork_context(parent, count=2, memory_limit=512 << 20, pids_limit=64)
        assert len(made) == 2 and made[0].context_id != made[1].context_id
        assert all(c.memory_limit == 512 << 20 and c.pids_limit == 64 for c in made)
        ids = [new_id("f"), new_id("f")]
        made += kb.fork_context(parent.to_json(), context_ids=ids)  # the JSON form works too
        assert [c.context_id for c in made[2:]] == ids
        assert [c.run("y * 2").text for c in made] == ["14"] * 4
        # a fork of a fork
        (grandchild,) = kb.fork_context(made[0].context_id, context_ids=[new_id("g")])
        made.append(grandchild)
        assert grandchild.forked_from.context_id == made[0].context_id
        assert grandchild.run("y").text == "7"
        # what the daemon refuses
        with pytest.raises(ContextExistsError):
            kb.fork_context(parent, context_ids=[ids[0]])
        with pytest.raises(SessionNotFoundError):
            kb.fork_context(new_id("nope"))
    finally:
        for ctx in made + [parent]:
            ctx.close()


@pytest.mark.parametrize("kwargs", [
    {"count": 0}, {"count": 65}, {"count": True}, {"count": "2"},
    {"count": 2, "context_ids": ["only-one"]}, {"context_ids": []}, {"context_ids": ["a", "a"]},
    {"context_ids": ["bad id"]},
])
def test_bad_fork_arguments_fail_before_any_request(kb, kwargs):
    with pytest.raises(ValueError):
        kb.fork_context("no-such-context", **kwargs)  # ValueError, not SessionNotFoundError


def test_fork_of_a_kernel_that_cannot_fork(kb, new_id):
    bash = kb.create_context(language="bash", context_id=new_id("bash"))
    try:
        with pytest.raises(UnsupportedOptionError, match="ipykernel"):
            kb.fork_context(bash)
        with pytest.raises(UnsupportedOptionError):
            kb.checkpoint_context(bash)
        with pytest.raises(UnsupportedOptionError):
            kb.restore_context(bash, "cp_x")
    finally:
        bash.close()


def test_checkpoints_blocking(small_daemon, new_id):
    with kernelbridge.connect(small_daemon.url, small_daemon.token) as kb:
        ctx = kb.create_context(language="python", context_id=new_id("c"))
        other = kb.create_context(language="python", context_id=new_id("o"))
        try:
            ctx.run("x = 1")
            cp = kb.checkpoint_context(ctx)
            assert isinstance(cp, Checkpoint) and cp.checkpoint_id.startswith("cp_")
            assert cp.context_id == ctx.context_id and cp.sandbox_id == ctx.sandbox_id
            assert cp.execution_count == 1 and 0 < cp.memory_bytes < 64 << 20
            assert cp.created_at is not None
            ctx.run("x = 2")
            assert kb.list_checkpoints(ctx) == [cp]
            assert kb.list_checkpoints(other) == []

            for generation in (2, 3):  # a checkpoint stays restorable
                restored = kb.restore_context(ctx, cp)
                assert isinstance(restored, InterpreterContext)
                assert restored.context_id == ctx.context_id and restored.generation == generation
                assert restored.restored_from == RestoreOrigin(cp.checkpoint_id, execution_count=1)
                assert ctx.run("x").text == "1"
                ctx.run("x = 3")

            second = kb.checkpoint_context(ctx.context_id)
            assert [c.checkpoint_id for c in kb.list_checkpoints(ctx)] == [cp.checkpoint_id,
                                                                          second.checkpoint_id]
            with pytest.raises(LimitExceededError):
                kb.checkpoint_context(ctx)
            with pytest.raises(CheckpointNotFoundError):  # another context's checkpoint
                kb.restore_context(other, cp)
            kb.delete_checkpoint(ctx, cp)
            with pytest.raises(CheckpointNotFoundError):
                kb.delete_checkpoint(ctx, cp.checkpoint_id)
            with pytest.raises(CheckpointNotFoundError):
                kb.restore_context(ctx, cp)
            assert kb.list_checkpoints(ctx) == [second]
            restored = kb.restore_context(ctx, second.checkpoint_id)  # by id
            assert restored.restored_from.checkpoint_id == second.checkpoint_id
            assert ctx.run("x").text == "3"
            with pytest.raises(TypeError):
                kb.restore_context(ctx, 7)  # type: ignore[arg-type]
        finally:
            ctx.close()
            other.close()


def test_fork_and_checkpoints_async(daemon):
    async def body(svc: kernelbridge.AsyncInterpreterService) -> None:
        parent = await svc.create_context(language="python", context_id="a-" + uuid.uuid4().hex[:10])
        forks: List[kernelbridge.AsyncInterpreterContext] = []
        try:
            await parent.run("z = [1, 2, 3]")
            forks = await svc.fork_context(parent, count=3)
            assert [f.forked_from.context_id for f in forks] == [parent.context_id] * 3
            texts = await asyncio.gather(*(f.run("sum(z)") for f in forks))
            assert [t.text for t in texts] == ["6"] * 3
            cp = await svc.checkpoint_context(parent)
            await parent.run("z.append(4)")
            assert await svc.list_checkpoints(parent) == [cp]
            restored = await svc.restore_context(parent, cp)
            assert restored.generation == 2 and restored.restored_from.checkpoint_id == cp.checkpoint_id
            assert (await parent.run("len(z)")).text == "3"
            await svc.delete_checkpoint(parent, cp)
            assert await svc.list_checkpoints(parent) == []
        finally:
            for ctx in forks + [parent]:
                await ctx.close()

    arun(daemon, body)


def _record_run_bodies(service: kernelbridge.InterpreterService) -> List[Dict[str, Any]]:
    """Record the body of each POST /run the service sends (the request still goes to the daemon)."""
    transport = service._impl.transport  # type: ignore[attr-defined]
    bodies: List[Dict[str, Any]] = []
    real_stream = transport.stream

    def stream(method: str, path: str, **kwargs: Any) -> Any:
        if path == "/run":
            bodies.append(dict(kwargs.get("body") or {}))
        return real_stream(method, path, **kwargs)

    transport.stream = stream
    return bodies


def test_run_sends_rollback_only_when_given(kb, new_id):
    bodies = _record_run_bodies(kb)
    ctx = kb.create_context(language="python", context_id=new_id("rb"))
    try:
        assert kb.run("1 + 1", context=ctx).text == "2"
        assert kb.run("2 + 2", context=ctx, rollback="on_error").text == "4"
        assert ctx.run("3 + 3", rollback="never").text == "6"
        result = kb.run("kb_default_rb = 1", rollback="on_error")  # the default context
        assert result.error is None and result.rolled_back is False
        assert [b.get("rollback", "absent") for b in bodies] == ["absent", "on_error", "never", "on_error"]
        for bad in ("always", "", "ON_ERROR"):
            with pytest.raises(ValueError, match="rollback"):
                kb.run("1", context=ctx, rollback=bad)  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="rollback"):
                ctx.run("1", rollback=bad)  # type: ignore[arg-type]
        assert len(bodies) == 4  # nothing was sent for a bad value
    finally:
        ctx.close()


def test_models_read_the_daemons_json():
    ctx = kernelbridge.AsyncInterpreterContext.from_json(
        {"context_id": "f", "language": "python",
         "forked_from": {"context_id": "p", "execution_count": 4, "generation": 2},
         "restored_from": {"checkpoint_id": "cp_1", "execution_count": 3}}, "kb-0")
    assert ctx.forked_from == ForkOrigin("p", 4, 2) and ctx.restored_from == RestoreOrigin("cp_1", 3)
    plain = kernelbridge.AsyncInterpreterContext.from_json(
        {"context_id": "f", "language": "python", "forked_from": None, "restored_from": "junk"}, "kb-0")
    assert plain.forked_from is None and plain.restored_from is None
    assert plain == ctx  # the handle's identity is sandbox, id and language
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    cp = Checkpoint.from_json({"checkpoint_id": "cp_2", "context_id": "f", "execution_count": 3,
                               "created_at": now, "memory_bytes": 4096}, "kb-0")
    assert cp == Checkpoint("cp_2", "f", 3, now, 4096, "kb-0")
    assert kernelbridge.InterpreterResult.from_json({"rolled_back": True}).rolled_back is True
    assert kernelbridge.InterpreterResult.from_json({}).rolled_back is False
