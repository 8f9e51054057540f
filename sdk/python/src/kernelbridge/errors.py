"""Typed errors of the kernelbridge SDK.

Every error response of the daemon (SPEC section 5) becomes an instance of
the subclass of :class:`KernelBridgeError` named after its ``code``; failures
below HTTP (refused connection, broken stream) become
:class:`KernelBridgeConnectionError` (:class:`SandboxUnavailable`, a
subclass, when the daemon of a known sandbox cannot be reached), and a ``request_timeout`` that runs out
becomes :class:`KernelBridgeTimeoutError`.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    "KernelBridgeError",
    "KernelBridgeConnectionError",
    "KernelBridgeTimeoutError",
    "SandboxUnavailable",
    "BadRequestError",
    "InvalidRequestBodyError",
    "UnauthorizedError",
    "SessionNotFoundError",
    "ProcessNotFoundError",
    "LanguageNotSupportedError",
    "NotFoundError",
    "MethodNotAllowedError",
    "ContextExistsError",
    "ProtectedContextError",
    "UnsupportedOptionError",
    "ProcessRunningError",
    "KernelStartFailedError",
    "PayloadTooLargeError",
    "TooManyContextsError",
    "UnavailableError",
    "InternalError",
    "error_from_response",
]


class KernelBridgeError(Exception):
    """An error reported by the daemon, or met on the way to it.

    ``code`` is the daemon's error code (``"SESSION_NOT_FOUND"``, ...),
    ``message`` its words, ``status`` the HTTP status (None when no response
    came). ``path``, ``method`` and ``timestamp`` echo the error body when the
    daemon sent them; ``body`` is the whole decoded error body.
    """

    code: str
    message: str
    status: Optional[int]

    def __init__(
        self,
        code: str,
        message: str,
        status: Optional[int] = None,
        *,
        path: Optional[str] = None,
        method: Optional[str] = None,
        timestamp: Optional[str] = None,
        body: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(code, message, status)
        self.code = code
        self.message = message
        self.status = status
        self.path = path
        self.method = method
        self.timestamp = timestamp
        self.body: Dict[str, Any] = dict(body) if body else {}

    def __str__(self) -> str:
        where = f" ({self.method} {self.path})" if self.method and self.path else ""
        status = f" [{self.status}]" if self.status is not None else ""
        return f"{self.code}{status}: {self.message}{where}"

    def __reduce__(self) -> Any:
        # Keep the keyword fields when an error crosses a process boundary.
        return (
            _rebuild_error,
            (type(self), self.code, self.message, self.status,
             self.path, self.method, self.timestamp, self.body),
        )


def _rebuild_error(cls: Type[KernelBridgeError], code: str, message: str,
                   status: Optional[int], path: Optional[str], method: Optional[str],
                   timestamp: Optional[str], body: Dict[str, Any]) -> KernelBridgeError:
    if cls in (KernelBridgeConnectionError, KernelBridgeTimeoutError):
        return cls(message)  # type: ignore[call-arg]
    return cls(code, message, status, path=path, method=method, timestamp=timestamp, body=body)


class KernelBridgeConnectionError(KernelBridgeError, ConnectionError):
    """The daemon could not be reached, or the connection broke mid-answer."""

    def __init__(self, message: str) -> None:
        KernelBridgeError.__init__(self, "CONNECTION_ERROR", message, None)


class SandboxUnavailable(KernelBridgeConnectionError):
    """The daemon of sandbox ``sandbox_id`` at ``url`` did not answer: the
    connection was refused or not accepted within the connect timeout, or a
    router in front of it answered 503 (SPEC section 12). Nothing was sent to
    the daemon, so the call can be retried once the sandbox is back."""

    def __init__(self, sandbox_id: str, url: str, message: str) -> None:
        KernelBridgeError.__init__(self, "SANDBOX_UNAVAILABLE", message, None)
        self.sandbox_id = sandbox_id
        self.url = url

    def __reduce__(self) -> Any:
        return (SandboxUnavailable, (self.sandbox_id, self.url, self.message))


class KernelBridgeTimeoutError(KernelBridgeError, TimeoutError):
    """A ``request_timeout`` ran out before the daemon answered."""

    def __init__(self, message: str) -> None:
        KernelBridgeError.__init__(self, "REQUEST_TIMEOUT", message, None)


class BadRequestError(KernelBridgeError):
    """BAD_REQUEST (400): well-formed JSON with a missing field, a wrong type or an invalid value."""


class InvalidRequestBodyError(KernelBridgeError):
    """INVALID_REQUEST_BODY (400): the request body is not valid JSON."""


class UnauthorizedError(KernelBridgeError):
    """UNAUTHORIZED (401): missing or wrong bearer token."""


class SessionNotFoundError(KernelBridgeError):
    """SESSION_NOT_FOUND (404): unknown, deleted or vanished context; the message says when and why."""


class ProcessNotFoundError(KernelBridgeError):
    """PROCESS_NOT_FOUND (404): unknown or evicted process record."""


class LanguageNotSupportedError(KernelBridgeError):
    """LANGUAGE_NOT_SUPPORTED (404): no kernelspec for the language; the message lists the installed ones."""


class NotFoundError(KernelBridgeError):
    """NOT_FOUND (404): no such route on the daemon."""


class MethodNotAllowedError(KernelBridgeError):
    """METHOD_NOT_ALLOWED (405): the route exists but not for this method."""


class ContextExistsError(KernelBridgeError):
    """CONTEXT_EXISTS (409): the context id is taken."""


class ProtectedContextError(KernelBridgeError):
    """PROTECTED_CONTEXT (400): default contexts cannot be deleted."""


class UnsupportedOptionError(KernelBridgeError):
    """UNSUPPORTED_OPTION (400): e.g. per-run cwd/env for a language with no adapter."""


class ProcessRunningError(KernelBridgeError):
    """PROCESS_RUNNING (409): the process has not ended yet."""


class KernelStartFailedError(KernelBridgeError):
    """KERNEL_START_FAILED (503): the message carries the tail of the kernel's stderr."""


class PayloadTooLargeError(KernelBridgeError):
    """PAYLOAD_TOO_LARGE (413): request body or code over the daemon's limit."""


class TooManyContextsError(KernelBridgeError):
    """TOO_MANY_CONTEXTS (429): the daemon's context limit is reached."""


class UnavailableError(KernelBridgeError):
    """UNAVAILABLE (503): the daemon is shutting down."""


class InternalError(KernelBridgeError):
    """INTERNAL_ERROR (500): a fault of the daemon, never of the input."""


class UriTooLongError(KernelBridgeError):
    """URI_TOO_LONG (414): the request line is longer than the daemon reads."""


class HeadersTooLargeError(KernelBridgeError):
    """HEADERS_TOO_LARGE (431): the request's headers are larger than the daemon reads."""


class LimitExceededError(KernelBridgeError):
    """LIMIT_EXCEEDED (409): a per-context count is full (--max-checkpoints)."""


class CheckpointNotFoundError(KernelBridgeError):
    """CHECKPOINT_NOT_FOUND (404): no such checkpoint of this context (never made, or deleted)."""


class HttpVersionNotSupportedError(KernelBridgeError):
    """HTTP_VERSION_NOT_SUPPORTED (505): only HTTP/1.0 and HTTP/1.1 are spoken."""


_BY_CODE: Dict[str, Type[KernelBridgeError]] = {
    "BAD_REQUEST": BadRequestError,
    "INVALID_REQUEST_BODY": InvalidRequestBodyError,
    "UNAUTHORIZED": UnauthorizedError,
    "SESSION_NOT_FOUND": SessionNotFoundError,
    "PROCESS_NOT_FOUND": ProcessNotFoundError,
    "LANGUAGE_NOT_SUPPORTED": LanguageNotSupportedError,
    "NOT_FOUND": NotFoundError,
    "METHOD_NOT_ALLOWED": MethodNotAllowedError,
    "CONTEXT_EXISTS": ContextExistsError,
    "PROTECTED_CONTEXT": ProtectedContextError,
    "UNSUPPORTED_OPTION": UnsupportedOptionError,
    "PROCESS_RUNNING": ProcessRunningError,
    "KERNEL_START_FAILED": KernelStartFailedError,
    "PAYLOAD_TOO_LARGE": PayloadTooLargeError,
    "TOO_MANY_CONTEXTS": TooManyContextsError,
    "UNAVAILABLE": UnavailableError,
    "INTERNAL_ERROR": InternalError,
    "URI_TOO_LONG": UriTooLongError,
    "HEADERS_TOO_LARGE": HeadersTooLargeError,
    "LIMIT_EXCEEDED": LimitExceededError,
    "CHECKPOINT_NOT_FOUND": CheckpointNotFoundError,
    "HTTP_VERSION_NOT_SUPPORTED": HttpVersionNotSupportedError,
}

# Used only when an error response carries no code the SDK can read
# (e.g. a proxy's HTML page); the code is then derived from the status.
_BY_STATUS: Dict[int, str] = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
    414: "URI_TOO_LONG",
    429: "TOO_MANY_CONTEXTS",
    431: "HEADERS_TOO_LARGE",
    500: "INTERNAL_ERROR",
    503: "UNAVAILABLE",
    505: "HTTP_VERSION_NOT_SUPPORTED",
}


def error_class(code: str) -> Type[KernelBridgeError]:
    """The subclass for a daemon error code (KernelBridgeError for unknown codes)."""
    return _BY_CODE.get(code, KernelBridgeError)


def error_from_response(status: int, body: Any, *, method: str = "", path: str = "") -> KernelBridgeError:
    """Build the typed error of one non-2xx response (``body`` already decoded, or raw text)."""
    if isinstance(body, dict) and isinstance(body.get("code"), str):
        code = body["code"]
        message = str(body.get("message", ""))
        return error_class(code)(
            code,
            message,
            status,
            path=body.get("path") if isinstance(body.get("path"), str) else path or None,
            method=body.get("method") if isinstance(body.get("method"), str) else method or None,
            timestamp=body.get("timestamp") if isinstance(body.get("timestamp"), str) else None,
            body=body,
        )
    code = _BY_STATUS.get(status, "HTTP_ERROR")
    text = body if isinstance(body, str) else ""
    message = text.strip()[:500] or f"HTTP {status} with no error body"
    return error_class(code)(code, message, status, path=path or None, method=method or None)
