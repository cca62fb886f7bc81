"""Read a gateway's catalog over MCP (SPEC 3.1). The only code that talks to servers.

Uses the official `mcp` 2.x client over Streamable HTTP, SSE or stdio, in
either protocol era. Pages are read leniently: the SDK validates a whole
`tools/list` page at once and rejects it for one malformed tool, so pages are
fetched through the session's raw request path and every entry is validated
on its own later (`refresh.normalize`). Imports no ORM; opens no transaction.

Credentials arrive in `ProbeTarget.headers`; they are never logged, and every
message this module produces is scrubbed of them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import (
    CONNECTION_CLOSED,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    REQUEST_TIMEOUT,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

logger = logging.getLogger(__name__)
T = TypeVar("T")

CLIENT_INFO = types.Implementation(name="toolsync", version="1.0")
ERA_LEGACY = "legacy"
ERA_MODERN = "modern"


class ProbeError(Exception):
    """The server could not be reached or initialized at all.

    `code` is a stable machine label (`connect_failed`, `timeout`,
    `auth_failed`, `protocol_error`, `bad_target`); `retryable` says whether
    trying again later may help.
    """

    def __init__(self, message: str, *, code: str, retryable: bool) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retryable = retryable


@dataclass(frozen=True)
class ProbeLimits:
    """Guards of SPEC 3.1 (settings supply the values)."""

    max_pages: int = 1000
    max_entries: int = 50_000
    request_timeout: float = 30.0
    deadline: float = 120.0


@dataclass(frozen=True)
class ProbeTarget:
    """Where and how to connect. `headers` carry credentials: never print them."""

    transport: str
    url: str = ""
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    era: str = ""

    @property
    def secrets(self) -> tuple[str, ...]:
        values = [v for v in self.headers.values() if v]
        # "Bearer xyz": scrub the bare token too, in case a server echoes it.
        values += [v.split(" ", 1)[1] for v in values if " " in v]
        return tuple(v for v in values if len(v) >= 4)


@dataclass(frozen=True, eq=False)
class Listing:
    """Raw entries of one list method, and whether they are the whole list."""

    # Out of repr: asyncio formats a finished task's result, and a repr of
    # 10,000 raw tools took 0.2 s on every probe.
    entries: tuple[Any, ...] = field(repr=False)
    complete: bool
    incomplete_reason: str | None = None
    pages: int = 0
    restarted: bool = False


@dataclass(frozen=True, eq=False)
class ProbeResult:
    """What one probe learned. `prompts`/`resources` are None when not read."""

    protocol_version: str
    era: str
    capabilities: Mapping[str, Any]
    server_info: Mapping[str, Any]
    tools: Listing
    prompts: Listing | None = None
    resources: Listing | None = None
    prompts_note: str | None = None
    resources_note: str | None = None
    duration_ms: int = 0


@dataclass
class _ListingProgress:
    entries: list[Any] = field(default_factory=list, repr=False)
    pages: int = 0
    complete: bool = False
    reason: str | None = None
    restarted: bool = False
    started: bool = False

    def stop(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.complete = False

    def freeze(self) -> Listing:
        return Listing(
            entries=tuple(self.entries),
            complete=self.complete and self.reason is None,
            incomplete_reason=None
            if self.complete and self.reason is None
            else self.reason,
            pages=self.pages,
            restarted=self.restarted,
        )


@dataclass
class _ProbeProgress:
    """Everything learned so far; survives an exception escaping the client."""

    connected: bool = False
    protocol_version: str = ""
    era: str = ""
    capabilities: dict[str, Any] = field(default_factory=dict)
    server_info: dict[str, Any] = field(default_factory=dict)
    listings: dict[str, _ListingProgress] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    http_statuses: list[int] = field(default_factory=list)
    transport_errors: list[str] = field(default_factory=list)

    def current(self) -> _ListingProgress | None:
        for progress in reversed(self.listings.values()):
            if progress.started and not progress.complete and progress.reason is None:
                return progress
        return None


_LIST_METHODS: dict[str, tuple[str, str]] = {
    "tools": ("tools/list", "tools"),
    "prompts": ("prompts/list", "prompts"),
    "resources": ("resources/list", "resources"),
}


def run_sync(coroutine_fn: Callable[[], Awaitable[T]]) -> T:
    """Run `coroutine_fn` to its end on an event loop of its own.

    Synchronous callers may sit in a thread whose event loop is already running
    (Playwright's sync API in a test, an async Django view): `anyio.run` refuses
    that, so the probe then gets a short-lived thread of its own.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(coroutine_fn)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="probe") as pool:
        return pool.submit(anyio.run, coroutine_fn).result()


def probe_gateway(
    target: ProbeTarget,
    limits: ProbeLimits = ProbeLimits(),
    *,
    include_prompts: bool = False,
    include_resources: bool = False,
) -> ProbeResult:
    """Synchronous wrapper around `probe_gateway_async` (own event loop)."""
    return run_sync(
        partial(
            probe_gateway_async,
            target,
            limits,
            include_prompts=include_prompts,
            include_resources=include_resources,
        )
    )


async def probe_gateway_async(
    target: ProbeTarget,
    limits: ProbeLimits = ProbeLimits(),
    *,
    include_prompts: bool = False,
    include_resources: bool = False,
) -> ProbeResult:
    """Connect, initialize, and read the whole catalog within the guards."""
    started = time.monotonic()
    deadline_at = started + limits.deadline
    kinds = (
        ["tools"]
        + (["prompts"] if include_prompts else [])
        + (["resources"] if include_resources else [])
    )
    progress = _ProbeProgress()
    modes = ["legacy", "auto"] if target.era == ERA_LEGACY else ["auto"]
    for attempt, mode in enumerate(modes):
        progress = _ProbeProgress()
        try:
            # Last-resort net: every request already has its own timeout.
            with anyio.move_on_after(limits.deadline + 5):
                await _session(target, limits, mode, progress, kinds, deadline_at)
        except Exception as exc:  # noqa: BLE001 - classified below
            leaf = _leaf(exc)
            if not progress.connected:
                if (
                    attempt + 1 < len(modes)
                    and isinstance(leaf, MCPError)
                    and leaf.code == UNSUPPORTED_PROTOCOL_VERSION
                ):
                    continue  # the remembered era is stale; negotiate afresh
                raise _connect_error(leaf, progress, target) from None
            current = progress.current()
            if current is not None:
                current.stop(
                    _scrub(
                        f"page {current.pages + 1} failed: {_describe(leaf)}", target
                    )
                )
        if not progress.connected:
            raise ProbeError(
                _scrub(f"timed out connecting after {limits.deadline:g} s", target),
                code="timeout",
                retryable=True,
            )
        break
    for kind in kinds:
        listing = progress.listings.get(kind)
        if listing is not None and not listing.complete and listing.reason is None:
            listing.stop(f"overall deadline of {limits.deadline:g} s reached")
    tools = progress.listings.get("tools", _ListingProgress()).freeze()
    return ProbeResult(
        protocol_version=progress.protocol_version,
        era=progress.era,
        capabilities=progress.capabilities,
        server_info=progress.server_info,
        tools=tools,
        prompts=progress.listings["prompts"].freeze()
        if "prompts" in progress.listings
        else None,
        resources=(
            progress.listings["resources"].freeze()
            if "resources" in progress.listings
            else None
        ),
        prompts_note=progress.notes.get("prompts"),
        resources_note=progress.notes.get("resources"),
        duration_ms=int((time.monotonic() - started) * 1000),
    )


async def _session(
    target: ProbeTarget,
    limits: ProbeLimits,
    mode: str,
    progress: _ProbeProgress,
    kinds: Sequence[str],
    deadline_at: float,
) -> None:
    async def record_transport_error(message: Any) -> None:
        if isinstance(message, Exception):
            progress.transport_errors.append(_describe(message))

    async with AsyncExitStack() as stack:
        transport = await _open_transport(target, limits, progress, stack)
        client = Client(
            transport,
            mode=mode,
            read_timeout_seconds=limits.request_timeout,
            message_handler=record_transport_error,
            client_info=CLIENT_INFO,
            cache=None,
        )
        # No cancel scope around the enter: the client's task group must exit
        # in the scope it entered. initialize is bounded by the read timeout.
        await stack.enter_async_context(client)
        progress.connected = True
        progress.protocol_version = client.protocol_version
        progress.era = (
            ERA_MODERN
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS
            else ERA_LEGACY
        )
        progress.capabilities = client.server_capabilities.model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
        info = client.server_info
        progress.server_info = (
            info.model_dump(by_alias=True, mode="json", exclude_none=True)
            if info
            else {}
        )
        for kind in kinds:
            if kind != "tools" and kind not in progress.capabilities:
                progress.notes[kind] = f"the server does not advertise {kind}"
                continue
            listing = progress.listings.setdefault(kind, _ListingProgress())
            await _walk(client.session, kind, limits, listing, deadline_at, target)
            if not listing.complete:
                break  # the deadline or the connection is gone; stop here


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One verifying TLS context per process, shared by every probe.

    httpx builds a new one per client by default, and loading the system's CA
    bundle took ~20 ms: more than half of a 100-tool probe on a fast network,
    and of every health check. A context is safe to share between threads.
    """
    return httpx2.create_ssl_context()


async def _open_transport(
    target: ProbeTarget,
    limits: ProbeLimits,
    progress: _ProbeProgress,
    stack: AsyncExitStack,
) -> Any:
    headers = dict(target.headers)

    async def record_status(response: httpx2.Response) -> None:
        progress.http_statuses.append(response.status_code)

    def http_client(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            headers=headers,
            timeout=timeout or httpx2.Timeout(limits.request_timeout),
            auth=auth,
            verify=tls_context(),
            event_hooks={"response": [record_status]},
        )

    if target.transport == "streamable_http":
        client = await stack.enter_async_context(http_client(headers=headers))
        return streamable_http_client(target.url, http_client=client)
    if target.transport == "sse":
        return sse_client(
            target.url,
            headers=headers,
            timeout=limits.request_timeout,
            sse_read_timeout=limits.deadline,
            httpx_client_factory=http_client,
        )
    if target.transport == "stdio":
        if not target.command:
            raise ProbeError(
                "no command configured", code="bad_target", retryable=False
            )
        return StdioServerParameters(
            command=target.command, args=list(target.args), env=dict(target.env) or None
        )
    raise ProbeError(
        f"unknown transport {target.transport!r}", code="bad_target", retryable=False
    )


async def _raw_request(
    session: ClientSession, method: str, params: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """Send one request and return the raw result dict, unvalidated.

    The SDK's typed `list_*` calls reject a whole page for one bad entry; the
    SDK's own `subscriptions/listen` driver uses this same stamped raw path.
    """
    data: dict[str, Any] = {"method": method, "params": params}
    opts: dict[str, Any] = {"timeout": timeout}
    session._stamp(data, opts)  # type: ignore[arg-type]  # noqa: SLF001
    return await session._dispatcher.send_raw_request(method, data.get("params"), opts)  # type: ignore[arg-type]  # noqa: SLF001


async def _walk(
    session: ClientSession,
    kind: str,
    limits: ProbeLimits,
    listing: _ListingProgress,
    deadline_at: float,
    target: ProbeTarget,
) -> None:
    """Follow `nextCursor` to the end, within every guard."""
    method, key = _LIST_METHODS[kind]
    listing.started = True
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        if listing.pages >= limits.max_pages:
            listing.stop(
                f"stopped after {listing.pages:,} pages (max pages {limits.max_pages:,})"
            )
            return
        remaining = deadline_at - time.monotonic()
        if remaining <= 0:
            listing.stop(
                f"overall deadline of {limits.deadline:g} s reached after {listing.pages} pages"
            )
            return
        bounded_by_deadline = remaining < limits.request_timeout
        timeout = min(limits.request_timeout, remaining)
        page_no = listing.pages + 1
        try:
            raw = await _raw_request(
                session,
                method,
                {"cursor": cursor} if cursor is not None else {},
                timeout,
            )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                listing.stop(
                    f"overall deadline of {limits.deadline:g} s reached during page {page_no}"
                    if bounded_by_deadline
                    else f"page {page_no} timed out after {limits.request_timeout:g} s"
                )
                return
            if (
                exc.code == INVALID_PARAMS
                and cursor is not None
                and not listing.restarted
            ):
                # Stale cursor: the listing changed under us. Cursors are not
                # stable across changes, so restart once from page one.
                logger.info(
                    "%s: cursor rejected on page %s; restarting from page one",
                    method,
                    page_no,
                )
                listing.entries.clear()
                listing.pages = 0
                listing.restarted = True
                cursor = None
                seen.clear()
                continue
            listing.stop(_scrub(f"page {page_no} failed: {_describe(exc)}", target))
            return
        listing.pages = page_no
        page = raw.get(key) if isinstance(raw, dict) else None
        if not isinstance(page, list):
            listing.stop(f"page {page_no}: {key!r} is not an array")
            return
        room = limits.max_entries - len(listing.entries)
        if len(page) > room:
            listing.entries.extend(page[:room])
            listing.stop(
                f"more than {limits.max_entries:,} {kind} listed (max {kind} {limits.max_entries:,})"
            )
            return
        listing.entries.extend(page)
        next_cursor = raw.get("nextCursor")
        if next_cursor is None:
            listing.complete = True
            return
        if not isinstance(next_cursor, str):
            listing.stop(f"page {page_no}: nextCursor is not a string")
            return
        if next_cursor in seen or next_cursor == cursor:
            listing.stop(f"cursor loop: page {page_no} returned a cursor already seen")
            return
        seen.add(next_cursor)
        cursor = next_cursor


@dataclass(frozen=True)
class Liveness:
    """A successful liveness check: the era that answered and how fast."""

    era: str
    protocol_version: str
    latency_ms: int


def check_liveness(target: ProbeTarget, timeout: float) -> Liveness:
    """Cheap liveness check, bounded by `timeout` seconds; raises `ProbeError`.

    Era-appropriate: a handshake-era server is `initialize`d and then pinged
    (`ping`); a 2026-era server answers `server/discover`, which is the whole
    check (`ping` no longer exists there). An unknown era negotiates (discover,
    falling back to the handshake). Lists nothing, so it costs one or two
    round trips.
    """
    return run_sync(partial(check_liveness_async, target, timeout))


async def check_liveness_async(target: ProbeTarget, timeout: float) -> Liveness:
    """Async form of `check_liveness`."""
    started = time.monotonic()
    limits = ProbeLimits(request_timeout=timeout, deadline=timeout)
    progress = _ProbeProgress()
    answered: list[str] = []
    modes = ["legacy", "auto"] if target.era == ERA_LEGACY else ["auto"]
    # Whole sessions inside the scope (the client's task group must exit in
    # the scope it entered), so a server that accepts and then stalls is cut
    # off at the deadline instead of holding the health worker.
    with anyio.move_on_after(timeout):
        for attempt, mode in enumerate(modes):
            progress = _ProbeProgress()
            try:
                await _liveness_session(target, limits, mode, progress, answered)
            except Exception as exc:  # noqa: BLE001 - classified below
                leaf = _leaf(exc)
                if (
                    attempt + 1 < len(modes)
                    and isinstance(leaf, MCPError)
                    and leaf.code == UNSUPPORTED_PROTOCOL_VERSION
                ):
                    continue  # the remembered era is stale; negotiate afresh
                raise _connect_error(leaf, progress, target) from None
            break
    if not answered:
        raise ProbeError(
            f"no answer within {timeout:g} s", code="timeout", retryable=True
        )
    return Liveness(
        era=progress.era,
        protocol_version=progress.protocol_version,
        latency_ms=int((time.monotonic() - started) * 1000),
    )


async def _liveness_session(
    target: ProbeTarget,
    limits: ProbeLimits,
    mode: str,
    progress: _ProbeProgress,
    answered: list[str],
) -> None:
    async with AsyncExitStack() as stack:
        transport = await _open_transport(target, limits, progress, stack)
        client = Client(
            transport,
            mode=mode,
            read_timeout_seconds=limits.request_timeout,
            client_info=CLIENT_INFO,
            cache=None,
        )
        await stack.enter_async_context(client)
        progress.connected = True
        progress.protocol_version = client.protocol_version
        if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
            progress.era = ERA_MODERN
            answered.append("server/discover")
            return
        progress.era = ERA_LEGACY
        # The handshake proves the server accepts sessions; ping proves the
        # session answers (SPEC 5.2: handshake-era liveness is `ping`).
        await client.session.send_ping()
        answered.append("ping")


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    exc = _leaf(exc)
    if isinstance(exc, MCPError):
        return f"JSON-RPC error {exc.code}: {exc.error.message}"
    if isinstance(exc, httpx2.ConnectError):
        return "connection refused or host unreachable"
    if isinstance(exc, httpx2.TimeoutException):
        return "HTTP timeout"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


def _connect_error(
    exc: BaseException, progress: _ProbeProgress, target: ProbeTarget
) -> ProbeError:
    statuses = [s for s in progress.http_statuses if s >= 400]
    if statuses and statuses[-1] in (401, 403):
        return ProbeError(
            f"the server refused our credentials (HTTP {statuses[-1]})",
            code="auth_failed",
            retryable=False,
        )
    if isinstance(exc, ProbeError):
        return exc
    if isinstance(exc, httpx2.ConnectError | ConnectionError | httpx2.ConnectTimeout):
        return ProbeError(
            "cannot connect: connection refused or host unreachable",
            code="connect_failed",
            retryable=True,
        )
    if isinstance(exc, FileNotFoundError | PermissionError):
        return ProbeError(
            _scrub(f"cannot start the server command: {exc}", target),
            code="bad_target",
            retryable=False,
        )
    if isinstance(exc, TimeoutError | httpx2.TimeoutException):
        return ProbeError(
            "timed out connecting or initializing", code="timeout", retryable=True
        )
    if isinstance(exc, MCPError):
        status = f" (HTTP {statuses[-1]})" if statuses else ""
        if exc.code == REQUEST_TIMEOUT:
            return ProbeError("initialize timed out", code="timeout", retryable=True)
        if exc.code == CONNECTION_CLOSED:
            return ProbeError(
                _scrub(f"connection closed during initialize{status}", target),
                code="connect_failed",
                retryable=True,
            )
        if exc.code == METHOD_NOT_FOUND and statuses and statuses[-1] == 404:
            return ProbeError(
                "no MCP endpoint at this URL (HTTP 404)",
                code="protocol_error",
                retryable=False,
            )
        return ProbeError(
            _scrub(f"initialize failed{status}: {_describe(exc)}", target),
            code="protocol_error",
            retryable=bool(statuses and statuses[-1] >= 500),
        )
    return ProbeError(
        _scrub(f"initialize failed: {_describe(exc)}", target),
        code="protocol_error",
        retryable=True,
    )


def _scrub(text: str, target: ProbeTarget) -> str:
    return scrub_secrets(text, target.secrets)


def scrub_secrets(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of a secret with `***`."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
