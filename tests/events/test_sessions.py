"""Notification sessions against real MCP test servers: both eras, three transports.

The adapter runs in this process (anyio); the servers are real subprocesses
over Streamable HTTP, SSE and stdio. Covers how each era receives
notifications, the fallback when a 2026 server will not listen, and the
silent deaths the SDK does not report: a restarted server, a frozen one
(SIGSTOP: the connection stays open, nothing answers) and a killed stdio
child.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from refresh.notifications import (
    PROMPTS_LIST_CHANGED,
    RESOURCES_LIST_CHANGED,
    TOOLS_LIST_CHANGED,
    NotificationAdapter,
    SessionEnded,
    SessionInfo,
    SessionSettings,
)
from refresh.probe import ProbeTarget

pytestmark = pytest.mark.anyio

ALL_THREE = {TOOLS_LIST_CHANGED, PROMPTS_LIST_CHANGED, RESOURCES_LIST_CHANGED}
FAST = SessionSettings(ping_interval=60, ping_timeout=5, check_interval=0.2)


class Session:
    """Runs `adapter.run_session` in a task and records what happens."""

    def __init__(self, adapter: NotificationAdapter) -> None:
        self.adapter = adapter
        self.infos: list[SessionInfo] = []
        self.ended: list[SessionEnded] = []
        self.got: list[str] = []
        adapter.add_notification_listener(
            lambda method, params: self.got.append(method)
        )

    async def run(self, sessions: int = 1) -> None:
        for _ in range(sessions):
            try:
                await self.adapter.run_session(self.infos.append)
            except SessionEnded as ended:
                self.ended.append(ended)

    async def until(
        self, predicate: Callable[[], object], what: str, timeout: float = 20.0
    ) -> None:
        with anyio.fail_after(timeout):
            while not predicate():
                await anyio.sleep(0.02)
        assert predicate(), what


def http_target(server, transport: str = "streamable_http", **kw) -> ProbeTarget:
    url = server.url if transport == "streamable_http" else server.sse_url
    return ProbeTarget(transport=transport, url=url, **kw)


def stdio_target(stdio) -> ProbeTarget:
    return ProbeTarget(
        transport="stdio",
        command=stdio.command,
        args=tuple(stdio.args),
        env=dict(stdio.env),
    )


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("transport", ["streamable_http", "sse", "stdio"])
async def test_every_list_changed_arrives_once_in_each_era_and_transport(
    mcp_server_factory, stdio_server_factory, transport, era
):
    if transport == "stdio":
        stdio = stdio_server_factory(tools=3, prompts=1, resources=1, era=era)
        target = stdio_target(stdio)
        notify = stdio.notify
    else:
        server = mcp_server_factory(tools=3, prompts=1, resources=1, era=era)
        target = http_target(server, transport)
        notify = server.notify
    session = Session(NotificationAdapter(target, settings=FAST))
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.run)
        await session.until(lambda: session.infos, "listening")
        [info] = session.infos
        assert info.era == era
        await anyio.to_thread.run_sync(
            lambda: notify(["tools", "prompts", "resources"])
        )
        await session.until(lambda: set(session.got) == ALL_THREE, "all three kinds")
        await anyio.sleep(0.3)
        # 2026 events are teed to the message handler too: dispatched once.
        assert sorted(session.got) == sorted(ALL_THREE)
        assert session.adapter.era == era  # remembered for the next connect
        tg.cancel_scope.cancel()
    assert session.ended == []  # cancelled, not ended


async def test_a_2026_server_that_will_not_listen_is_heard_in_the_handshake_era(
    mcp_server_factory,
):
    # SDK servers advertise listChanged: false and still notify handshake
    # sessions: the flags are not trusted.
    server = mcp_server_factory(era="both", notify_capable=False)
    session = Session(NotificationAdapter(http_target(server), settings=FAST))
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.run, 2)
        await session.until(lambda: session.infos, "listening")
        [refused] = session.ended
        assert refused.code == "listen_unsupported" and refused.retry_now
        assert session.infos[0].era == "legacy"
        assert session.infos[0].capabilities["tools"]["listChanged"] is False
        await anyio.to_thread.run_sync(server.notify)
        await session.until(lambda: session.got == [TOOLS_LIST_CHANGED], "notified")
        tg.cancel_scope.cancel()


async def test_a_2026_only_server_that_will_not_listen_is_reported_unsupported(
    mcp_server_factory,
):
    server = mcp_server_factory(era="modern", notify_capable=False)
    session = Session(NotificationAdapter(http_target(server), settings=FAST))
    with anyio.fail_after(30):
        await session.run(2)
    refused, unsupported = session.ended
    assert refused.retry_now and not refused.unsupported
    assert unsupported.unsupported and unsupported.code == "listen_unsupported"
    assert "cannot announce changes" in unsupported.reason
    assert session.infos == []


async def test_a_stale_remembered_era_is_renegotiated(mcp_server_factory):
    server = mcp_server_factory(era="modern")
    adapter = NotificationAdapter(http_target(server, era="legacy"), settings=FAST)
    session = Session(adapter)
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.run, 2)
        await session.until(lambda: session.infos, "listening")
        assert session.ended[0].retry_now
        assert session.infos[0].era == "modern" and adapter.era == "modern"
        tg.cancel_scope.cancel()


async def test_a_restarted_server_ends_a_handshake_session_the_sdk_keeps_silent(
    mcp_server_factory,
):
    """No ping is due (60 s): the GET stream watch notices the session died."""
    server = mcp_server_factory(era="legacy")
    session = Session(NotificationAdapter(http_target(server), settings=FAST))
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.run, 2)
        await session.until(lambda: session.infos, "listening")
        await anyio.to_thread.run_sync(server.restart)
        await session.until(lambda: session.ended, "the session ended", timeout=30)
        [ended] = session.ended
        assert ended.established and ended.code == "session_lost"
        assert "notification stream" in ended.reason
        # The next session on the restarted server hears notifications.
        await session.until(lambda: len(session.infos) == 2, "listening again")
        await anyio.to_thread.run_sync(server.notify)
        await session.until(lambda: session.got == [TOOLS_LIST_CHANGED], "notified")
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_a_frozen_server_is_noticed_by_the_liveness_round_trip(
    mcp_server_factory, era
):
    """SIGSTOP: connections stay open and silent; only a round trip can tell."""
    server = mcp_server_factory(era=era)
    settings = SessionSettings(ping_interval=0.5, ping_timeout=1.0, check_interval=0.2)
    session = Session(NotificationAdapter(http_target(server), settings=settings))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.run)
            await session.until(lambda: session.infos, "listening")
            os.kill(server.pid, signal.SIGSTOP)
            await session.until(lambda: session.ended, "the session ended", timeout=30)
            tg.cancel_scope.cancel()
    finally:
        os.kill(server.pid, signal.SIGCONT)
    [ended] = session.ended
    assert ended.established and "liveness check failed" in ended.reason


async def test_traffic_on_the_stream_stands_in_for_round_trips(mcp_server_factory):
    """At rest a session costs nothing while its server writes to its stream."""
    server = mcp_server_factory(era="legacy")
    settings = SessionSettings(ping_interval=2.0, ping_timeout=5, check_interval=0.2)
    session = Session(NotificationAdapter(http_target(server), settings=settings))

    def round_trips() -> int:
        return sum(1 for r in server.seen_auth() if r["method"] == "POST")

    async with anyio.create_task_group() as tg:
        tg.start_soon(session.run)
        await session.until(lambda: session.infos, "listening")
        await anyio.to_thread.run_sync(server.clear_seen_auth)
        for _ in range(16):  # traffic every 0.3 s for ~5 s (interval >= 1.6 s)
            await anyio.to_thread.run_sync(server.notify)
            await anyio.sleep(0.3)
        assert await anyio.to_thread.run_sync(round_trips) == 0
        await anyio.sleep(4.0)  # quiet for longer than the interval (+20 %)
        assert await anyio.to_thread.run_sync(round_trips) >= 1
        assert session.ended == []
        tg.cancel_scope.cancel()


async def test_a_killed_stdio_server_ends_the_session_at_once(stdio_server_factory):
    stdio = stdio_server_factory(era="legacy")
    session = Session(NotificationAdapter(stdio_target(stdio), settings=FAST))
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.run)
        await session.until(lambda: session.infos, "listening")
        [child] = stdio_children(stdio.state_file)
        os.kill(child, signal.SIGKILL)
        started = time.monotonic()
        await session.until(lambda: session.ended, "the session ended")
        tg.cancel_scope.cancel()
    [ended] = session.ended
    assert ended.established and ended.code == "session_lost"
    # Noticed by the dispatcher, not by the 60 s ping.
    assert time.monotonic() - started < 30


async def test_connect_failures_are_classified_and_credentials_are_sent(
    mcp_server_factory,
):
    dead = mcp_server_factory()
    dead_url = dead.url
    dead.kill()
    refused = Session(
        NotificationAdapter(ProbeTarget(transport="streamable_http", url=dead_url))
    )
    await refused.run()
    [ended] = refused.ended
    assert (ended.code, ended.established, ended.retryable) == (
        "connect_failed",
        False,
        True,
    )

    secret = "s3cret-listener-token"
    guarded = mcp_server_factory(require_bearer=secret)
    anonymous = Session(NotificationAdapter(http_target(guarded), settings=FAST))
    await anonymous.run()
    [ended] = anonymous.ended
    assert ended.code == "auth_failed" and not ended.retryable
    assert secret not in ended.reason

    authorised = Session(
        NotificationAdapter(
            http_target(guarded, headers={"Authorization": f"Bearer {secret}"}),
            settings=FAST,
        )
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(authorised.run)
        await authorised.until(lambda: authorised.infos, "listening")
        tg.cancel_scope.cancel()


def stdio_children(state_file: Path) -> list[int]:
    """PIDs of this process's stdio test servers serving `state_file`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and str(state_file).encode() in cmdline:
            found.append(int(entry.name))
    return found
