"""The mistakes a user can make, as exception classes: `rhythm` prints their message on one line and
exits 2 (no traceback unless `--debug` or RHYTHM_DEBUG=1); anything else is a bug and keeps its
traceback."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in what the user asked for: an argument, an input file, an output path, a key."""


class BadInput(UserError, ValueError):
    """An input that cannot be used as given; the message names the argument or file."""


# Faults that pass when tried again a little later: a connection refused, reset or timed out, or a server
# that answered "busy" (HTTP 429, 5xx). Named, not imported: botocore, aiohttp and huggingface_hub raise them.
_TRANSIENT_NAMES = frozenset({
    "EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError",
    "ClientConnectorError", "ClientOSError", "ServerDisconnectedError", "ServerTimeoutError", "ProxyConnectionError",
    "RemoteDisconnected", "IncompleteRead", "ChunkedEncodingError", "ConnectTimeout", "ReadTimeout", "SlowDown",
})


def _http_status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if status is None and isinstance(response, dict):  # botocore's ClientError
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is a fault worth retrying: a network or server hiccup, never a
    user's mistake (`UserError`), a missing file or a refused permission."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if getattr(exc, "transient", False):  # an error that says so itself (the store's unreachable endpoint)
            return True
        if isinstance(exc, UserError):
            return False
        if isinstance(exc, ConnectionError | TimeoutError) or type(exc).__name__ in _TRANSIENT_NAMES:
            return True
        status = _http_status(exc)
        if status is not None and (status == 429 or status >= 500):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
