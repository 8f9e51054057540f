"""The earlier-style code interpreter API, kept for code written against it.

``AsyncCodeInterpreter`` / ``CodeInterpreter`` run Python only. By default
code runs in the default shared context (``default-python``), which keeps
variables, imports and functions across runs; ``create_context()`` gives an
isolated one. The default context cannot be deleted and is not listed.

This module only gathers the names: the async class is in
_async_code_interpreter (below the service, whose ``code_interpreter``
property builds it), the blocking one is generated into sync, and the data
classes are models (types).
"""

from __future__ import annotations

from ._async_code_interpreter import AsyncCodeInterpreter, ContextArg, Handler
from .sync import CodeInterpreter
from .types import CodeInterpreterContext, ExecutionError, ExecutionResult, OutputMessage

__all__ = [
    "AsyncCodeInterpreter",
    "CodeInterpreter",
    "CodeInterpreterContext",
    "OutputMessage",
    "ExecutionError",
    "ExecutionResult",
    "ContextArg",
    "Handler",
]
