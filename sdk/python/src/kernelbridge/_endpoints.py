"""The daemon's context and run endpoints as async functions of a transport.

Both async APIs (AsyncInterpreterService and the earlier-style
AsyncCodeInterpreter) are written on these: the request bodies of
POST /contexts and POST /run, the context calls, and the fold of a run's
Server-Sent Events into callbacks and one InterpreterResult. Not for: handles,
argument checks against a sandbox (the services do that), blocking calls.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, AsyncGenerator, Dict, List, Mapping, Optional, Sequence

from ._transport import AsyncTransport, Response, SSEEvent, quote_segment
from .errors import KernelBridgeConnectionError, KernelBridgeError
from .types import (
    DisplayCallback,
    ErrorCallback,
    InterpreterError,
    InterpreterResult,
    JsonObject,
    OutputCallback,
    call_back,
    check_rollback,
    displays_of,
)

__all__ = [
    "check_context_id",
    "create_context",
    "get_context",
    "list_contexts",
    "delete_context",
    "fork_context",
    "create_checkpoint",
    "list_checkpoints",
    "delete_checkpoint",
    "restore_context",
    "run_body",
    "run",
]

_CONTEXT_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# How long to wait, after the final `result` event, for the stream's end so
# the connection can be kept; a daemon that keeps the stream open costs a
# reconnect, never a hang.
_DRAIN_AFTER_RESULT = 2.0


def check_context_id(context_id: str) -> str:
    """``context_id`` if the daemon would accept it; ValueError otherwise."""
    if not _CONTEXT_ID.match(context_id):
        raise ValueError(f"invalid context id {context_id!r}: 1-64 characters of [A-Za-z0-9._-]")
    return context_id


def _put_limits(body: Dict[str, Any], memory_limit: Optional[int], pids_limit: Optional[int]) -> None:
    if memory_limit is not None:
        body["memory_limit"] = memory_limit
    if pids_limit is not None:
        body["pids_limit"] = pids_limit


async def create_context(transport: AsyncTransport, *, language: str, context_id: Optional[str] = None,
                         cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                         request_timeout: Optional[float] = None, memory_limit: Optional[int] = None,
                         pids_limit: Optional[int] = None) -> JsonObject:
    """POST /contexts; the daemon's JSON of the new context."""
    body: Dict[str, Any] = {"language": language}
    _put_limits(body, memory_limit, pids_limit)
    if context_id is not None:
        body["context_id"] = context_id
    if cwd is not None:
        body["cwd"] = cwd
    if env is not None:
        body["env"] = dict(env)
    context: JsonObject = await transport.request("POST", "/contexts", body=body, timeout=request_timeout)
    return context


async def get_context(transport: AsyncTransport, context_id: str) -> JsonObject:
    """GET /contexts/{id}; SessionNotFoundError when it does not exist."""
    context: JsonObject = await transport.request("GET", f"/contexts/{quote_segment(context_id)}")
    return context


async def list_contexts(transport: AsyncTransport, request_timeout: Optional[float] = None) -> List[JsonObject]:
    """GET /contexts: the created contexts' JSON (default contexts are not listed)."""
    obj = await transport.request("GET", "/contexts", timeout=request_timeout)
    return list((obj or {}).get("contexts") or [])


async def delete_context(transport: AsyncTransport, context_id: str,
                         request_timeout: Optional[float] = None) -> None:
    """DELETE /contexts/{id}."""
    await transport.request("DELETE", f"/contexts/{quote_segment(context_id)}", timeout=request_timeout)


_MAX_FORKS = 64  # a fork request's count, 1..64 (SPEC section 13)


async def fork_context(transport: AsyncTransport, context_id: str, *, count: Optional[int] = None,
                       context_ids: Optional[Sequence[str]] = None, memory_limit: Optional[int] = None,
                       pids_limit: Optional[int] = None, request_timeout: Optional[float] = None) -> List[JsonObject]:
    """POST /contexts/{id}/fork; the daemon's JSON of each new context, in order.

    ``count`` and ``context_ids`` are checked as the daemon would (count
    1..64; ids valid, distinct and as many as ``count`` when both are given)
    so that a bad call fails with ValueError before any I/O.
    """
    body: Dict[str, Any] = {}
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= _MAX_FORKS:
            raise ValueError(f"count must be an int from 1 to {_MAX_FORKS}, not {count!r}")
        body["count"] = count
    if context_ids is not None:
        if isinstance(context_ids, str):
            raise TypeError("context_ids is a list of ids, not one string")
        ids = [check_context_id(i) for i in context_ids]
        if not 1 <= len(ids) <= _MAX_FORKS or len(set(ids)) != len(ids):
            raise ValueError(f"context_ids must be 1 to {_MAX_FORKS} distinct ids, not {ids!r}")
        if count is not None and count != len(ids):
            raise ValueError(f"count {count} and {len(ids)} context_ids disagree")
        body["context_ids"] = ids
    _put_limits(body, memory_limit, pids_limit)
    obj = await transport.request("POST", f"/contexts/{quote_segment(context_id)}/fork", body=body,
                                  timeout=request_timeout)
    return list((obj or {}).get("contexts") or [])


def _checkpoints(context_id: str) -> str:
    return f"/contexts/{quote_segment(context_id)}/checkpoints"


async def create_checkpoint(transport: AsyncTransport, context_id: str,
                            request_timeout: Optional[float] = None) -> JsonObject:
    """POST /contexts/{id}/checkpoints; the daemon's JSON of the checkpoint."""
    checkpoint: JsonObject = await transport.request("POST", _checkpoints(context_id), body={},
                                                     timeout=request_timeout)
    return checkpoint


async def list_checkpoints(transport: AsyncTransport, context_id: str,
                           request_timeout: Optional[float] = None) -> List[JsonObject]:
    """GET /contexts/{id}/checkpoints: the checkpoints' JSON, oldest first."""
    obj = await transport.request("GET", _checkpoints(context_id), timeout=request_timeout)
    return list((obj or {}).get("checkpoints") or [])


async def delete_checkpoint(transport: AsyncTransport, context_id: str, checkpoint_id: str,
                            request_timeout: Optional[float] = None) -> None:
    """DELETE /contexts/{id}/checkpoints/{checkpoint_id}."""
    await transport.request("DELETE", f"{_checkpoints(context_id)}/{quote_segment(checkpoint_id)}",
                            timeout=request_timeout)


async def restore_context(transport: AsyncTransport, context_id: str, checkpoint_id: str,
                          request_timeout: Optional[float] = None) -> JsonObject:
    """POST /contexts/{id}/restore; the daemon's JSON of the restored context."""
    context: JsonObject = await transport.request("POST", f"/contexts/{quote_segment(context_id)}/restore",
                                                  body={"checkpoint_id": checkpoint_id}, timeout=request_timeout)
    return context


def run_body(code: str, *, language: Optional[str], context_id: Optional[str], isolated: bool = False,
             timeout: Optional[float] = None, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
             strip_ansi: bool = False, memory_limit: Optional[int] = None,
             pids_limit: Optional[int] = None, rollback: Optional[str] = None) -> Dict[str, Any]:
    """The JSON body of POST /run (a context id, else the default context of ``language``)."""
    body: Dict[str, Any] = {"code": code}
    if context_id is not None:
        body["context_id"] = context_id
    else:
        body["language"] = language
    if isolated:
        body["isolated"] = True
    if timeout is not None:
        body["timeout"] = timeout
    if cwd is not None:
        body["cwd"] = cwd
    if env is not None:
        body["env"] = dict(env)
    if strip_ansi:
        body["strip_ansi"] = True
    _put_limits(body, memory_limit, pids_limit)
    if rollback is not None:
        body["rollback"] = check_rollback(rollback)
    return body


async def run(transport: AsyncTransport, body: Mapping[str, Any], *, on_stdout: Optional[OutputCallback] = None,
              on_stderr: Optional[OutputCallback] = None, on_error: Optional[ErrorCallback] = None,
              on_display: Optional[DisplayCallback] = None) -> InterpreterResult:
    """POST /run read as Server-Sent Events: callbacks in event order, then the result.

    An exception raised by a callback ends the call with that exception (the
    run goes on on the daemon). A stream that ends before its ``result``
    event raises KernelBridgeConnectionError whose ``process_id`` names the
    record that keeps the result.
    """
    async with transport.stream("POST", "/run", body=body) as resp:
        if resp.content_type != "text/event-stream":
            return await _replay_json_result(resp, on_stdout, on_stderr, on_error, on_display)
        return await _fold_events(resp, on_stdout, on_stderr, on_error, on_display)


async def _replay_json_result(resp: Response, on_stdout: Optional[OutputCallback],
                              on_stderr: Optional[OutputCallback], on_error: Optional[ErrorCallback],
                              on_display: Optional[DisplayCallback]) -> InterpreterResult:
    # A daemon (or proxy) that answered with the plain JSON result: the
    # callbacks still see the run's output, in the result's order.
    result = InterpreterResult.from_json(await resp.json())
    if result.logs.stdout:
        await call_back(on_stdout, result.logs.stdout)
    if result.logs.stderr:
        await call_back(on_stderr, result.logs.stderr)
    for output in result.results:
        for display in output.displays():
            await call_back(on_display, display)
    if result.error is not None:
        await call_back(on_error, result.error)
    return result


async def _fold_events(resp: Response, on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback],
                       on_error: Optional[ErrorCallback],
                       on_display: Optional[DisplayCallback]) -> InterpreterResult:
    process_id: Optional[str] = None
    events = resp.iter_sse()
    try:
        async for event in events:
            name = event.event
            if name == "start":
                process_id = (event.json() or {}).get("process_id")
            elif name == "stdout":
                await call_back(on_stdout, str((event.json() or {}).get("text", "")))
            elif name == "stderr":
                await call_back(on_stderr, str((event.json() or {}).get("text", "")))
            elif name in ("display", "display_update"):
                if on_display is not None:
                    bundle = (event.json() or {}).get("data") or {}
                    for display in displays_of(bundle):
                        await call_back(on_display, display)
            elif name == "error":
                if on_error is not None:
                    await call_back(on_error, InterpreterError.from_json(event.json() or {}))
            elif name == "result":
                result = InterpreterResult.from_json(event.json() or {})
                await _drain(events)
                return result
            # clear_output and system frames change nothing a callback sees
    finally:
        await events.aclose()
    where = f" (process {process_id}: its record keeps the result)" if process_id else ""
    exc = KernelBridgeConnectionError(f"POST /run: the event stream ended before the result{where}")
    exc.process_id = process_id  # type: ignore[attr-defined]
    raise exc


async def _drain(events: AsyncGenerator[SSEEvent, None]) -> None:
    try:
        async with asyncio.timeout(_DRAIN_AFTER_RESULT):
            async for _ in events:
                pass
    except (TimeoutError, KernelBridgeError):
        pass  # the connection is then closed rather than reused
