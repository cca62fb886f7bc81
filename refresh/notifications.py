"""One gateway's notification session (SPEC 5.3): the adapter the listener supervises.

`NotificationAdapter` holds one long-lived MCP session to one gateway and fans
every `notifications/*/list_changed` it receives out to its listeners
(`add_notification_listener`, `dispatch_notification`). It knows nothing of
the database: the listener (`refresh.listener`) gives it a `ProbeTarget` and
supervises it; the refresh hook (`refresh.debounce`) listens to it.

Two protocol eras (MCP_NOTES):

- handshake era: the server sends `list_changed` unsolicited; the SDK hands
  it to the client's `message_handler`. Over Streamable HTTP it rides the GET
  stream the SDK opens once the server issued an `Mcp-Session-Id`.
- 2026-07-28: events arrive only on a `subscriptions/listen` stream that the
  session opens (`Client.listen`). A server that refuses to listen but also
  speaks the handshake is reconnected in the handshake era, where SDK servers
  notify whatever their capability flags say.

Silent death. The SDK does not say when a long-lived session dies: the
Streamable HTTP GET stream gives up after two failed reconnects, and after a
server restart requests fail with "Session not found". So a session is
watched, and `run_session` ends (raising `SessionEnded`) when:

- the connection closed (stdio child exited, SSE stream ended): noticed by
  the dispatcher within `check_interval`, without any I/O;
- the handshake-era GET stream closed and was not reopened within
  `stream_grace` (it is tracked by wrapping its HTTP response stream);
- the `subscriptions/listen` stream ended or was lost;
- a liveness round trip failed (`ping` in the handshake era,
  `server/discover` in 2026): one after `ping_interval` without traffic on
  the session's event streams (servers send keep-alive comments on them, so
  a healthy HTTP session rarely needs one), and one at once after a
  transport error. This catches what ends no stream: a frozen server, a
  half-open connection (TCP keep-alive probes catch those too).

Reconnecting, backoff and the refresh after a reconnect (no replay exists in
either era) belong to the supervisor, `refresh.listener`.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    SubscriptionLost,
    ToolsListChanged,
)
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT, UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from refresh.probe import (
    CLIENT_INFO,
    ERA_LEGACY,
    ERA_MODERN,
    ProbeError,
    ProbeLimits,
    ProbeTarget,
    _connect_error,
    _describe,
    _leaf,
    _open_transport,
    _ProbeProgress,
    scrub_secrets,
    tls_context,
)

logger = logging.getLogger("toolsync.listener")

TOOLS_LIST_CHANGED = "notifications/tools/list_changed"
PROMPTS_LIST_CHANGED = "notifications/prompts/list_changed"
RESOURCES_LIST_CHANGED = "notifications/resources/list_changed"
LIST_CHANGED_KINDS: Mapping[str, str] = {
    TOOLS_LIST_CHANGED: "tools",
    PROMPTS_LIST_CHANGED: "prompts",
    RESOURCES_LIST_CHANGED: "resources",
}
"""list_changed method -> catalog kind."""

NotificationCallback = Callable[[str, dict[str, Any]], None]
"""`callback(method, params)`; called on the thread that dispatches."""

_HANDSHAKE_METHODS: Mapping[type[Any], str] = {
    types.ToolListChangedNotification: TOOLS_LIST_CHANGED,
    types.PromptListChangedNotification: PROMPTS_LIST_CHANGED,
    types.ResourceListChangedNotification: RESOURCES_LIST_CHANGED,
}
_LISTEN_METHODS: Mapping[type[Any], str] = {
    ToolsListChanged: TOOLS_LIST_CHANGED,
    PromptsListChanged: PROMPTS_LIST_CHANGED,
    ResourcesListChanged: RESOURCES_LIST_CHANGED,
}


# Kernel keepalive probes on every listener connection: a peer that vanished
# without a reset (a network partition, a host gone) fails the idle stream
# within about a minute, at no cost to this process.
_TCP_KEEPALIVE: list[tuple[int, int, int]] = [
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
] + [
    (socket.IPPROTO_TCP, getattr(socket, name), value)
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))
    if hasattr(socket, name)
]


@dataclass(frozen=True)
class SessionSettings:
    """How a session is watched (the listener fills these from settings)."""

    ping_interval: float = 60.0
    ping_timeout: float = 10.0
    check_interval: float = 2.0
    stream_grace: float = 5.0


@dataclass(frozen=True)
class SessionInfo:
    """What a session learned at connect time (for status and the reconnect refresh)."""

    era: str
    protocol_version: str
    capabilities: Mapping[str, Any]


class SessionEnded(Exception):
    """A session could not be opened, or it died. Always raised by `run_session`.

    `code` is a stable label (a `ProbeError` code, `session_lost`,
    `listen_unsupported`); `established` says whether the session had been
    up; `retry_now` asks for an immediate retry in another era (no backoff);
    `unsupported` means the server cannot deliver notifications to us at all
    (retry rarely; the schedule keeps the gateway fresh); `retryable` false
    means waiting will not help until the gateway's configuration changes.
    """

    def __init__(
        self,
        reason: str,
        *,
        code: str,
        established: bool = False,
        retry_now: bool = False,
        unsupported: bool = False,
        retryable: bool = True,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code
        self.established = established
        self.retry_now = retry_now
        self.unsupported = unsupported
        self.retryable = retryable


class NotificationAdapter:
    """A gateway's notification session, and the fan-out of what it receives.

    The listener API is thread-safe: listeners may be added, removed and
    dispatched to from any thread. `run_session` runs in the listener's event
    loop; a callback must return quickly (the refresh hook only records the
    notification and wakes its own timer thread).
    """

    def __init__(
        self,
        target: ProbeTarget,
        *,
        label: str = "",
        settings: SessionSettings | None = None,
    ) -> None:
        self.target = target
        self.label = label or target.url or target.command
        self.settings = settings or SessionSettings()
        self._lock = threading.Lock()
        self._listeners: tuple[NotificationCallback, ...] = ()
        # Remembered across sessions: `mode="auto"` costs a discover round
        # trip on every connect, and a known handshake-era server needs none.
        self.era = target.era
        # Set when a 2026 connection refused subscriptions/listen: reconnect
        # with the handshake, where notifications need no subscription.
        self.handshake_only = False

    # -- listeners -----------------------------------------------------------

    def add_notification_listener(self, callback: NotificationCallback) -> None:
        """Call `callback(method, params)` for every notification (once per callback)."""
        with self._lock:
            if callback not in self._listeners:
                self._listeners = (*self._listeners, callback)

    def remove_notification_listener(self, callback: NotificationCallback) -> bool:
        """Stop calling `callback`; False if it was not registered."""
        with self._lock:
            if callback not in self._listeners:
                return False
            self._listeners = tuple(c for c in self._listeners if c != callback)
            return True

    @property
    def listener_count(self) -> int:
        return len(self._listeners)

    def dispatch_notification(
        self, method: str, params: Mapping[str, Any] | None = None
    ) -> int:
        """Hand `method`/`params` to every listener; returns how many were called.

        A listener that raises is logged and does not keep the others from
        being called. Each listener gets its own copy of `params`.
        """
        listeners = self._listeners  # a tuple, replaced (never mutated) under the lock
        for callback in listeners:
            try:
                callback(method, dict(params or {}))
            except Exception:  # noqa: BLE001 - one broken listener must not starve the rest
                logger.exception(
                    "%s: notification listener %r failed on %s",
                    self.label,
                    callback,
                    method,
                )
        return len(listeners)

    # -- the session ---------------------------------------------------------

    async def run_session(
        self, on_listening: Callable[[SessionInfo], None] | None = None
    ) -> None:
        """Open a session, receive notifications until it dies, raise `SessionEnded`.

        `on_listening(info)` is called once the session can receive
        notifications (the listen stream acknowledged, the GET stream open),
        so that a refresh requested from it cannot miss a change announced
        after it. Cancelling the calling task closes the session cleanly.
        """
        mode = "legacy" if (self.era == ERA_LEGACY or self.handshake_only) else "auto"
        progress = _ProbeProgress()
        watch = _StreamWatch(progress)
        state = _SessionState()
        try:
            with anyio.CancelScope() as teardown:
                async with AsyncExitStack() as stack:
                    try:
                        await self._hold(
                            stack, mode, state, watch, progress, on_listening
                        )
                    finally:
                        # Closing must not hang whatever ended the session: a
                        # frozen server never answers the session DELETE.
                        teardown.deadline = (
                            anyio.current_time() + self.settings.ping_timeout
                        )
        except SessionEnded:
            raise
        except Exception as exc:  # noqa: BLE001 - classified; cancellation is not an Exception
            if state.ended is not None:
                raise state.ended from None
            raise self._classify(exc, mode, state, progress) from None
        if state.ended is not None:
            raise state.ended
        raise SessionEnded(
            "the session ended", code="session_lost", established=state.established
        )

    async def _hold(
        self,
        stack: AsyncExitStack,
        mode: str,
        state: _SessionState,
        watch: _StreamWatch,
        progress: _ProbeProgress,
        on_listening: Callable[[SessionInfo], None] | None,
    ) -> None:
        """Connect, then wait until a watcher ends the session."""
        transport = await self._open_transport(stack, watch, progress)
        client = Client(
            transport,
            mode=mode,
            read_timeout_seconds=self.settings.ping_timeout,
            message_handler=partial(self._on_message, state),
            client_info=CLIENT_INFO,
            cache=None,
        )
        # No cancel scope around the enter: the client's task group must exit
        # in the scope it entered; initialize is bounded by the read timeout.
        await stack.enter_async_context(client)
        state.established = True
        state.modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
        self.era = ERA_MODERN if state.modern else ERA_LEGACY
        info = SessionInfo(
            era=self.era,
            protocol_version=client.protocol_version,
            capabilities=client.server_capabilities.model_dump(
                by_alias=True, mode="json", exclude_none=True
            ),
        )
        # One round trip at once: proves the session answers, and lets servers
        # that broadcast to the connections they have seen requests on (as
        # SDK-based ones must) know this one.
        with anyio.fail_after(self.settings.ping_timeout):
            await _round_trip(client, state.modern)
        async with anyio.create_task_group() as tg:
            state.scope = tg.cancel_scope
            if state.modern:
                tg.start_soon(self._listen, client, state, info, on_listening)
            tg.start_soon(self._watchdog, client, state, watch, info, on_listening)

    async def _open_transport(
        self, stack: AsyncExitStack, watch: _StreamWatch, progress: _ProbeProgress
    ) -> Any:
        target = self.target

        # Probe's HTTP clients time out reads after the request timeout,
        # right for a probe and fatal for a stream that is quiet for hours
        # (the SDK gives the GET stream up after two such timeouts). Streams
        # here have no read timeout; the watchdog's round trips (bounded by
        # the session's read timeout) find a server that stopped answering.
        def http_client(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            # Whatever timeout the SDK asks for: reads never time out here.
            return httpx2.AsyncClient(
                headers=headers,
                timeout=httpx2.Timeout(self.settings.ping_timeout, read=None),
                auth=auth,
                transport=httpx2.AsyncHTTPTransport(
                    # One CA bundle per process, not one per session (~1 MB).
                    verify=tls_context(),
                    socket_options=_TCP_KEEPALIVE,
                ),
                event_hooks={"response": [watch.on_response]},
            )

        if target.transport == "streamable_http":
            client = await stack.enter_async_context(
                http_client(headers=dict(target.headers))
            )
            return streamable_http_client(target.url, http_client=client)
        if target.transport == "sse":
            return sse_client(
                target.url,
                headers=dict(target.headers),
                timeout=self.settings.ping_timeout,
                httpx_client_factory=http_client,
            )
        # stdio (and the error for an unknown transport): exactly the probe's.
        limits = ProbeLimits(request_timeout=self.settings.ping_timeout)
        return await _open_transport(target, limits, progress, stack)

    async def _on_message(self, state: _SessionState, message: Any) -> None:
        if isinstance(message, Exception):
            # A transport fault: do not wait for the next scheduled ping.
            logger.debug("%s: transport error: %s", self.label, _describe(message))
            state.check_now = True
            return
        if state.modern:
            # 2026 events arrive through the listen stream (the SDK tees them
            # here too); dispatching both would count each one twice.
            return
        method = _HANDSHAKE_METHODS.get(type(message))
        if method is None:
            return
        params = getattr(message, "params", None)
        self.dispatch_notification(
            method,
            params.model_dump(by_alias=True, mode="json", exclude_none=True)
            if params is not None
            else {},
        )

    async def _listen(
        self,
        client: Client,
        state: _SessionState,
        info: SessionInfo,
        on_listening: Callable[[SessionInfo], None] | None,
    ) -> None:
        try:
            async with client.listen(
                tools_list_changed=True,
                prompts_list_changed=True,
                resources_list_changed=True,
            ) as subscription:
                state.mark_listening(info, on_listening)
                async for event in subscription:
                    method = _LISTEN_METHODS.get(type(event))
                    if method is not None:
                        self.dispatch_notification(method, {})
        except SubscriptionLost:
            state.end(
                SessionEnded(
                    "the subscriptions/listen stream was lost",
                    code="session_lost",
                    established=True,
                )
            )
            return
        except TimeoutError:
            state.end(
                SessionEnded(
                    "subscriptions/listen was not acknowledged within "
                    f"{self.settings.ping_timeout:g} s",
                    code="timeout",
                    established=True,
                )
            )
            return
        except MCPError as exc:
            if exc.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                state.end(
                    SessionEnded(
                        f"subscriptions/listen failed: {_describe(exc)}",
                        code="session_lost",
                        established=True,
                    )
                )
                return
            # The server speaks 2026 but will not stream events to us.
            self.handshake_only = True
            state.end(
                SessionEnded(
                    f"the server refused subscriptions/listen ({_describe(exc)}); "
                    "trying the initialize handshake, whose notifications need "
                    "no subscription",
                    code="listen_unsupported",
                    established=True,
                    retry_now=True,
                )
            )
            return
        state.end(
            SessionEnded(
                "the server closed the subscriptions/listen stream",
                code="session_lost",
                established=True,
            )
        )

    async def _watchdog(
        self,
        client: Client,
        state: _SessionState,
        watch: _StreamWatch,
        info: SessionInfo,
        on_listening: Callable[[SessionInfo], None] | None,
    ) -> None:
        settings = self.settings
        started = time.monotonic()
        next_ping = started + _jittered(settings.ping_interval)
        # Which stream carries notifications: the listen stream (2026; marked
        # by `_listen`), the GET stream (Streamable HTTP handshake era), or
        # the connection itself (stdio, SSE: it ends when they do).
        get_stream = not state.modern and self.target.transport == "streamable_http"
        if not state.modern and not get_stream:
            state.mark_listening(info, on_listening)
        while True:
            # A plain sleep, not a cancellable wait: with hundreds of sessions
            # a cancel scope per tick was most of the listener's idle CPU. A
            # transport error is acted on at the next tick instead.
            await anyio.sleep(settings.check_interval)
            forced, state.check_now = state.check_now, False
            now = time.monotonic()
            if _dispatcher_closed(client):
                state.end(
                    SessionEnded(
                        "the connection closed", code="session_lost", established=True
                    )
                )
                return
            if get_stream:
                if watch.open_streams > 0:
                    state.mark_listening(info, on_listening)
                elif watch.ever_opened:
                    if now - watch.closed_at > settings.stream_grace:
                        state.end(
                            SessionEnded(
                                "the notification stream (HTTP GET) closed and was "
                                f"not reopened within {settings.stream_grace:g} s",
                                code="session_lost",
                                established=True,
                            )
                        )
                        return
                elif now - started > settings.stream_grace:
                    statuses = sorted({s for s in watch.get_statuses if s != 200})
                    why = f" (HTTP {', '.join(map(str, statuses))})" if statuses else ""
                    state.end(
                        SessionEnded(
                            "the server opened no notification stream (HTTP GET)"
                            f"{why}: it cannot announce changes to this client",
                            code="listen_unsupported",
                            established=True,
                            unsupported=True,
                        )
                    )
                    return
            if (
                not forced
                and now >= next_ping
                and watch.last_traffic > now - (settings.ping_interval)
            ):
                # The server wrote to one of our streams within the interval:
                # that is as good as a round trip, and costs nothing.
                next_ping = watch.last_traffic + _jittered(settings.ping_interval)
            if forced or now >= next_ping:
                try:
                    with anyio.fail_after(settings.ping_timeout):
                        await _round_trip(client, state.modern)
                except Exception as exc:  # noqa: BLE001 - any failure means the session is gone
                    state.end(
                        SessionEnded(
                            scrub_secrets(
                                f"liveness check failed: {_describe(exc)}",
                                self.target.secrets,
                            ),
                            code="session_lost",
                            established=True,
                        )
                    )
                    return
                next_ping = time.monotonic() + _jittered(settings.ping_interval)

    def _classify(
        self,
        exc: BaseException,
        mode: str,
        state: _SessionState,
        progress: _ProbeProgress,
    ) -> SessionEnded:
        leaf = _leaf(exc)
        if state.established:
            return SessionEnded(
                scrub_secrets(f"session lost: {_describe(leaf)}", self.target.secrets),
                code="session_lost",
                established=True,
            )
        if (
            mode == "legacy"
            and isinstance(leaf, MCPError)
            and leaf.code == UNSUPPORTED_PROTOCOL_VERSION
        ):
            if self.handshake_only:
                # 2026-only, and it refused to listen: nothing can arrive.
                self.handshake_only = False
                return SessionEnded(
                    "the server speaks only the 2026-07-28 protocol and refuses "
                    "subscriptions/listen: it cannot announce changes to this client",
                    code="listen_unsupported",
                    unsupported=True,
                )
            self.era = ""  # the remembered era is stale; negotiate afresh
            return SessionEnded(
                "the server no longer speaks the initialize handshake; negotiating",
                code="protocol_error",
                retry_now=True,
            )
        error: ProbeError = _connect_error(leaf, progress, self.target)
        return SessionEnded(error.message, code=error.code, retryable=error.retryable)


@dataclass(eq=False)
class _SessionState:
    """One session's flags, shared by its tasks."""

    established: bool = False
    modern: bool = False
    listening: bool = False
    ended: SessionEnded | None = None
    scope: anyio.CancelScope | None = None
    check_now: bool = False

    def end(self, ended: SessionEnded) -> None:
        """Record why the session ends (the first reason wins) and stop its tasks."""
        if self.ended is None:
            self.ended = ended
        if self.scope is not None:
            self.scope.cancel()

    def mark_listening(
        self, info: SessionInfo, callback: Callable[[SessionInfo], None] | None
    ) -> None:
        if self.listening:
            return
        self.listening = True
        if callback is not None:
            callback(info)


class _StreamWatch:
    """Response hook: records statuses, tracks event streams and their traffic.

    The SDK opens the handshake era's GET stream in a task of its own and
    gives it up silently; wrapping a stream's body is the one place its end
    (and its traffic) can be seen from outside. Bytes arriving on any event
    stream (a GET stream, the 2026 listen stream, the SSE transport's stream;
    servers send keep-alive comments on them) prove the server alive and the
    connection intact: the watchdog only pings a session whose streams have
    been quiet for a whole ping interval.
    """

    def __init__(self, progress: _ProbeProgress) -> None:
        self.progress = progress
        self.open_streams = 0
        self.ever_opened = False
        self.closed_at = 0.0
        self.last_traffic = 0.0
        self.get_statuses: list[int] = []

    async def on_response(self, response: httpx2.Response) -> None:
        self.progress.http_statuses.append(response.status_code)
        is_get = response.request.method == "GET"
        if is_get:
            self.get_statuses.append(response.status_code)
        content_type = response.headers.get("content-type", "")
        if response.status_code != 200 or not content_type.startswith(
            "text/event-stream"
        ):
            return
        if is_get:
            self.open_streams += 1
            self.ever_opened = True
        response.stream = _TrackedStream(
            response.stream, self._traffic, self._closed if is_get else None
        )

    def _traffic(self) -> None:
        self.last_traffic = time.monotonic()

    def _closed(self) -> None:
        self.open_streams -= 1
        self.closed_at = time.monotonic()


class _TrackedStream(httpx2.AsyncByteStream):
    """A response body that reports its traffic, and, once, when it is closed."""

    def __init__(
        self,
        inner: Any,
        on_chunk: Callable[[], None],
        on_close: Callable[[], None] | None,
    ) -> None:
        self._inner = inner
        self._on_chunk = on_chunk
        self._on_close = on_close

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                self._on_chunk()
                yield chunk
        finally:
            self._report()

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._report()

    def _report(self) -> None:
        callback, self._on_close = self._on_close, None
        if callback is not None:
            callback()


async def _round_trip(client: Client, modern: bool) -> None:
    """The era's cheapest request: `ping` (handshake), `server/discover` (2026)."""
    if modern:
        await client.session.send_discover(client.protocol_version)
    else:
        await client.session.send_ping()


def _dispatcher_closed(client: Client) -> bool:
    """Whether the session's connection reached EOF (the SDK exposes no flag)."""
    dispatcher = getattr(client.session, "_dispatcher", None)
    return bool(getattr(dispatcher, "_closed", False))


def _jittered(seconds: float) -> float:
    """`seconds` +/- 20 %: sessions opened together do not ping together forever."""
    return seconds * random.uniform(0.8, 1.2)  # noqa: S311 - spreading load, not security
