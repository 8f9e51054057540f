"""Routing by sandbox (SPEC section 12): which daemon a call goes to, and
where a new context goes.

One kernelbridge daemon per sandbox; a context lives in exactly one of them,
so every call on a context must reach the daemon whose ``sandbox_id`` it
carries. A Router holds one connection pool (AsyncTransport, made with the
sandbox's id so that an unreachable daemon raises SandboxUnavailable) and
one AsyncProcessService per sandbox, from a ``{sandbox: url}`` mapping or a
``{sandbox_id}`` URL template over a list of ids. Placement asks every
sandbox's ``/health`` for its context count at once, each bounded by the
connect timeout, and picks the fewest (ties: round robin in id order).

Not for: handles, context JSON, runs (AsyncInterpreterService does those).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ._transport import AsyncTransport
from .errors import KernelBridgeTimeoutError, SandboxUnavailable
from .process import AsyncProcessService

__all__ = ["Sandboxes", "Sandbox", "Router", "sandbox_url", "choose_sandbox", "id_order"]

#: A list of sandbox ids (with a ``{sandbox_id}`` URL template), or each sandbox's URL.
Sandboxes = Union[Sequence[str], Mapping[str, str]]

PLACEHOLDER = "{sandbox_id}"


def sandbox_url(template: str, sandbox_id: str) -> str:
    """The URL of ``sandbox_id`` under a ``{sandbox_id}`` template (other braces are left alone)."""
    if PLACEHOLDER not in template:
        raise ValueError(f"base_url {template!r} has no {PLACEHOLDER} to route by sandbox")
    return template.replace(PLACEHOLDER, sandbox_id)


def id_order(sandbox_id: str) -> Tuple[Tuple[int, str], ...]:
    """Sort key of sandbox ids with numbers compared as numbers: kb-2 before kb-10."""
    return tuple((int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", sandbox_id))


def choose_sandbox(counts: Mapping[str, int], last: Optional[str]) -> str:
    """The sandbox with the fewest contexts; among ties the first in id order
    after ``last`` (the previous choice), wrapping around: round robin."""
    if not counts:
        raise ValueError("no sandbox to choose from")
    fewest = min(counts.values())
    tied = sorted((s for s, n in counts.items() if n == fewest), key=id_order)
    if last is not None:
        after = [s for s in tied if id_order(s) > id_order(last)]
        if after:
            return after[0]
    return tied[0]


@dataclass(frozen=True)
class Sandbox:
    """One daemon: its URL, its connection pool and its process service."""

    sandbox_id: str
    url: str
    transport: AsyncTransport
    processes: AsyncProcessService


class Router:
    """The sandboxes of one service, by id, and the placement of new contexts."""

    def __init__(self, token: Optional[str], connect_timeout: float) -> None:
        self._token = token
        self._connect_timeout = connect_timeout
        self._sandboxes: Dict[str, Sandbox] = {}
        self._retired: List[AsyncTransport] = []
        self._pending: Dict[str, int] = {}  # contexts being created, not yet in /health
        self._last: Optional[str] = None

    @classmethod
    def of(cls, base_url: Optional[str], sandboxes: Sandboxes, token: Optional[str],
           connect_timeout: float) -> "Router":
        """A router over ``{id: url}``, or over ids whose URLs ``base_url`` (a template) gives."""
        router = cls(token, connect_timeout)
        if isinstance(sandboxes, Mapping):
            if base_url is not None:
                raise ValueError("give base_url with a list of sandbox ids, or a {sandbox_id: url} mapping, not both")
            for sandbox_id, url in sandboxes.items():
                router.set_url(sandbox_id, url)
        else:
            if isinstance(sandboxes, str):
                raise TypeError("sandboxes is a list of ids or a {sandbox_id: url} mapping, not a string")
            if base_url is None:
                raise ValueError("a list of sandbox ids needs base_url, a template with {sandbox_id}")
            for sandbox_id in sandboxes:
                router.set_url(sandbox_id, sandbox_url(base_url, sandbox_id))
        if not router._sandboxes:
            raise ValueError("no sandbox given")
        return router

    @classmethod
    def single(cls, sandbox_id: str, transport: AsyncTransport, processes: AsyncProcessService) -> "Router":
        """A router over one daemon whose transport the caller made."""
        router = cls(transport.token, 0.0)
        router._sandboxes[sandbox_id] = Sandbox(sandbox_id, transport.url, transport, processes)
        return router

    @classmethod
    def unnamed(cls, url: str, token: Optional[str], connect_timeout: float) -> "Router":
        """A router over one daemon whose sandbox id is not known yet (``learn`` names it)."""
        router = cls(token, connect_timeout)
        transport = AsyncTransport(url, token, connect_timeout=connect_timeout)
        router._sandboxes[""] = Sandbox("", url, transport, AsyncProcessService(transport))
        return router

    def learn(self, sandbox_id: str) -> None:
        """Name the one unnamed sandbox after its daemon's answer; nothing if already named."""
        old = self._sandboxes.get("")
        if old is None or not sandbox_id:
            return
        old.transport.sandbox_id = sandbox_id
        self._sandboxes = {sandbox_id: Sandbox(sandbox_id, old.url, old.transport, old.processes)}

    @property
    def ids(self) -> List[str]:
        return sorted(self._sandboxes, key=id_order)

    def urls(self) -> Dict[str, str]:
        return {sid: self._sandboxes[sid].url for sid in self.ids}

    def get(self, sandbox_id: str) -> Sandbox:
        """The sandbox ``sandbox_id``; ValueError for one this router does not know."""
        try:
            return self._sandboxes[sandbox_id]
        except KeyError:
            raise ValueError(f"unknown sandbox {sandbox_id!r}: this service routes to "
                             f"{', '.join(self.ids)}") from None

    def set_url(self, sandbox_id: str, url: str) -> None:
        """Route ``sandbox_id`` to ``url`` from now on (a new or moved sandbox).

        The old connection pool is closed with the router: no I/O here."""
        if not sandbox_id:
            raise ValueError("a sandbox id must not be empty")
        old = self._sandboxes.get(sandbox_id)
        if old is not None:
            self._retired.append(old.transport)
        transport = AsyncTransport(url, self._token, connect_timeout=self._connect_timeout, sandbox_id=sandbox_id)
        self._sandboxes[sandbox_id] = Sandbox(sandbox_id, url, transport, AsyncProcessService(transport))

    async def aclose(self) -> None:
        for transport in self._retired + [s.transport for s in self._sandboxes.values()]:
            await transport.aclose()

    # -- placement -----------------------------------------------------------

    async def _count(self, sandbox: Sandbox) -> Optional[int]:
        """Contexts on ``sandbox`` from its /health, or None when it does not
        answer within the connect timeout."""
        try:
            health = await sandbox.transport.request("GET", "/health", timeout=self._connect_timeout)
        except (SandboxUnavailable, KernelBridgeTimeoutError):
            return None
        contexts = health.get("contexts") if isinstance(health, dict) else None
        return contexts if isinstance(contexts, int) else 0

    async def reachable(self) -> Dict[str, int]:
        """{sandbox id: context count from /health} of the sandboxes that answer;
        SandboxUnavailable if none does."""
        sandboxes = [self._sandboxes[sid] for sid in self.ids]
        counts = await asyncio.gather(*(self._count(s) for s in sandboxes))
        answered = {s.sandbox_id: n for s, n in zip(sandboxes, counts) if n is not None}
        if not answered:
            first = sandboxes[0]
            raise SandboxUnavailable(first.sandbox_id, first.url,
                                     f"no sandbox answered /health within {self._connect_timeout} s: "
                                     f"{', '.join(self.ids)}")
        return answered

    async def place(self) -> str:
        """The sandbox for a new context; the caller must call ``placed()`` once it exists (or failed).

        The contexts being placed are added to the /health counts here, after
        the last await: placements started together each see the others'
        choices, not only the counts all of them read before any chose."""
        counts = await self.reachable()
        counts = {sid: n + self._pending.get(sid, 0) for sid, n in counts.items()}
        chosen = choose_sandbox(counts, self._last)
        self._last = chosen
        self._pending[chosen] = self._pending.get(chosen, 0) + 1
        return chosen

    def placed(self, sandbox_id: str) -> None:
        self._pending[sandbox_id] -= 1
