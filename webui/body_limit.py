"""Request bodies are cut at a size per route before anything parses them (an ASGI
middleware, outermost): a declared ``Content-Length`` above the route's limit is answered 413
without reading a byte; a body without one (chunked) is counted as it arrives and refused as
soon as it passes the limit. A body within the limit is held (at most the limit) and handed
to the app unchanged.

A route may allow more to credentialed requests than to anonymous ones: ``limit_for`` is
asked for both, and only when they differ is ``credentialed(scope)`` asked (a signed-cookie
check or one token-hash lookup) whether the request may have the larger one. Everyone else
gets the anonymous limit, so an anonymous client cannot make the server hold a large body
before its 401.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LimitFor = Callable[[str, str, bool], int]  # (method, path, credentialed) -> bytes
Credentialed = Callable[[Scope], Awaitable[bool]]


class BodyLimit:
    def __init__(
        self,
        app: ASGIApp,
        limit_for: LimitFor,
        headers: Mapping[str, str] | None = None,
        credentialed: Credentialed | None = None,
    ) -> None:
        self._app = app
        self._limit_for = limit_for
        self._credentialed = credentialed
        self._headers = dict(headers or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        limit = self._limit_for(scope["method"], scope["path"], False)
        declared = _content_length(scope)
        larger = self._limit_for(scope["method"], scope["path"], True)
        if (
            larger > limit
            and (declared is None or declared > limit)
            and self._credentialed is not None
            and await self._credentialed(scope)
        ):
            limit = larger
        if declared is not None and declared > limit:
            await self._too_large(scope, limit)(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._too_large(scope, limit)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self._app(scope, _replay(b"".join(chunks), receive), send)

    def _too_large(self, scope: Scope, limit: int) -> Response:
        message = f"the request body is larger than the {limit} bytes this URL accepts."
        headers = {**self._headers, "Connection": "close"}
        if str(scope["path"]).startswith("/api/"):
            return JSONResponse({"detail": [message]}, status_code=413, headers=headers)
        return PlainTextResponse(message, status_code=413, headers=headers)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed length itself
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # afterwards: the disconnect, when it comes

    return replay
