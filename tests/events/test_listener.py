"""The listener's supervision, in this process: shards, reloads, reconnects, status.

Real PostgreSQL and real MCP test servers; the Celery enqueue is replaced by
a recorder so each test sees exactly which refreshes the listener asked for
(test_end_to_end.py drives the same code as `manage.py listen` with a real
worker and broker).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from io import StringIO
from typing import Any

import anyio
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from gateways.models import Gateway
from gateways.services import gateway_create, gateway_update, tenant_get_or_create
from refresh.debounce import RefreshRequest
from refresh.listener import (
    Backoff,
    Listener,
    ListenerConfig,
    Shard,
    WatchSpec,
    gateways_to_watch,
    read_status,
)
from refresh.notifications import SessionSettings

pytestmark = [pytest.mark.postgres]


class Recorder:
    def __init__(self) -> None:
        self.requests: list[RefreshRequest] = []
        self.lock = threading.Lock()

    def __call__(self, request: RefreshRequest) -> None:
        with self.lock:
            self.requests.append(request)

    def for_gateway(self, gateway_id: int) -> list[RefreshRequest]:
        with self.lock:
            return [r for r in self.requests if r.gateway_id == gateway_id]


def config(tmp_path, **overrides: Any) -> ListenerConfig:
    values: dict[str, Any] = {
        "reload_seconds": 0.3,
        "session": SessionSettings(
            ping_interval=60, ping_timeout=5, check_interval=0.2
        ),
        "backoff_initial": 0.2,
        "backoff_max": 1.0,
        "debounce_seconds": 0.2,
        "max_delay_seconds": 2.0,
        "status_path": tmp_path / "listener" / "shard-0-of-1.json",
    }
    values.update(overrides)
    return ListenerConfig(**values)


def make_gateway(prefix: str, url: str, **kw: Any) -> Gateway:
    tenant = tenant_get_or_create(slug="listener")
    return gateway_create(tenant=tenant, name=prefix, prefix=prefix, url=url, **kw)


async def until(
    predicate: Callable[[], object], what: str, timeout: float = 20
) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.05)
    assert predicate(), what


def state_of(listener: Listener, gateway: Gateway) -> str | None:
    watch = listener.watches.get(gateway.pk)
    return watch.state if watch is not None else None


# -- pure parts ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0/1", Shard(0, 1)), ("3/4", Shard(3, 4)), (" 1/2 ", Shard(1, 2))],
)
def test_shard_parses_i_of_n(text, expected):
    assert Shard.parse(text) == expected
    assert str(expected) == text.strip()


@pytest.mark.parametrize(
    "text", ["", "1", "4/4", "-1/2", "1/0", "a/b", "1/2/3", "0.5/2"]
)
def test_shard_refuses_anything_else_with_a_clear_error(text):
    with pytest.raises(ValueError, match="--shard"):
        Shard.parse(text)


def test_listen_command_refuses_a_bad_shard_and_reports_no_listener(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    with pytest.raises(CommandError, match="0 <= I < N"):
        call_command("listen", "--shard", "2/2")
    with pytest.raises(CommandError, match="no listener is running"):
        call_command("listen", "--status")


@pytest.mark.parametrize(
    ("content", "shown"),
    [
        ("{not json", "unreadable status file"),
        ("[1, 2]", "malformed status file"),
        # A listener that died without removing its file: its pid is gone.
        (
            json.dumps({"pid": 2**22 + 12345, "heartbeat": 1e12, "shard": "0/1"}),
            "NOT RUNNING",
        ),
    ],
)
def test_status_of_a_broken_or_dead_listener_exits_1_and_says_so(
    settings, tmp_path, content, shown
):
    settings.VAR_DIR = tmp_path
    path = tmp_path / "listener" / "shard-0-of-1.json"
    path.parent.mkdir()
    path.write_text(content)
    out = StringIO()
    with pytest.raises(CommandError, match="not running") as raised:
        call_command("listen", "--status", stdout=out)
    assert raised.value.returncode == 1
    assert shown in out.getvalue()


def test_backoff_doubles_with_jitter_up_to_the_cap_and_resets():
    low = Backoff(1.0, 8.0, rng=lambda: 0.0)
    high = Backoff(1.0, 8.0, rng=lambda: 0.999999)
    lows = [low.next_delay() for _ in range(6)]
    highs = [high.next_delay() for _ in range(6)]
    assert lows == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]  # half of each ceiling
    assert [round(h, 3) for h in highs] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    real = Backoff(1.0, 8.0)
    delays = [real.next_delay() for _ in range(50)]
    assert all(0.5 <= d <= 8.0 for d in delays) and len(set(delays)) > 40
    low.reset()
    assert low.next_delay() == 0.5


# -- reading gateways ----------------------------------------------------------


@pytest.mark.django_db
def test_shards_split_the_gateways_stably_and_completely():
    gateways = [make_gateway(f"s{i}", f"http://127.0.0.1:9/{i}") for i in range(12)]
    ids = {g.pk for g in gateways}
    for count in (1, 3, 5):
        seen: list[int] = []
        for index in range(count):
            shard = Shard(index, count)
            specs, _ = gateways_to_watch(shard=shard)
            assert all(shard.owns(gid) for gid in specs)
            seen += list(specs)
        assert sorted(seen) == sorted(ids)  # each gateway in exactly one shard


@pytest.mark.django_db
def test_disabled_and_as_caller_gateways_are_not_listened_to_and_skips_say_why():
    listened = make_gateway("on", "http://127.0.0.1:9/a")
    off = make_gateway("off", "http://127.0.0.1:9/b")
    Gateway.objects.filter(pk=off.pk).update(enabled=False)
    caller = make_gateway("caller", "http://127.0.0.1:9/c", auth_type="as_caller")
    specs, skipped = gateways_to_watch(shard=Shard())
    assert set(specs) == {listened.pk}
    assert set(skipped) == {caller.pk}
    assert "calling user" in skipped[caller.pk]


@pytest.mark.django_db
def test_credentials_reach_the_session_and_only_changed_gateways_are_rebuilt():
    secret = "tok-listener-123"
    gateway = make_gateway(
        "cred", "http://127.0.0.1:9/x", auth_type="bearer", auth_token=secret
    )
    other = make_gateway("plain", "http://127.0.0.1:9/y")
    specs, _ = gateways_to_watch(shard=Shard())
    assert specs[gateway.pk].target.headers == {"Authorization": f"Bearer {secret}"}
    assert secret not in repr(specs[gateway.pk])
    # Unchanged: the same spec object comes back (nothing decrypted again).
    again, _ = gateways_to_watch(shard=Shard(), known=specs)
    assert again[gateway.pk] is specs[gateway.pk] and again[other.pk] is specs[other.pk]
    gateway_update(gateway=gateway, fields={}, auth_token="tok-rotated-456")
    gateway_update(gateway=other, fields={"name": "renamed"})  # not a connection field
    changed, _ = gateways_to_watch(shard=Shard(), known=again)
    assert changed[gateway.pk].fingerprint != specs[gateway.pk].fingerprint
    assert changed[gateway.pk].target.headers["Authorization"].endswith("456")
    assert changed[other.pk] is specs[other.pk]


# -- the running listener ------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.anyio
async def test_gateways_added_changed_disabled_and_removed_while_it_runs(
    mcp_server_factory, tmp_path
):
    first = mcp_server_factory(tools=2)
    second = mcp_server_factory(tools=2, era="modern")
    recorder = Recorder()
    listener = Listener(config(tmp_path), enqueue=recorder)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.run)
        await until(lambda: listener.reloads >= 1, "first reload")
        assert listener.watches == {}

        gateway = await anyio.to_thread.run_sync(
            lambda: make_gateway("live", first.url)
        )
        await until(lambda: state_of(listener, gateway) == "listening", "added")
        await anyio.to_thread.run_sync(first.notify)
        await until(lambda: recorder.for_gateway(gateway.pk), "notified refresh")

        # A changed URL: a new session to the new server, and one refresh.
        await anyio.to_thread.run_sync(
            lambda: gateway_update(gateway=gateway, fields={"url": second.url})
        )
        await until(
            lambda: (
                listener.watches[gateway.pk].spec.target.url == second.url
                and state_of(listener, gateway) == "listening"
            ),
            "reconnected to the new URL",
        )
        assert listener.watches[gateway.pk].era == "modern"
        await until(lambda: len(recorder.for_gateway(gateway.pk)) == 2, "refresh")
        assert recorder.for_gateway(gateway.pk)[1].reason == "reconnect"

        await anyio.to_thread.run_sync(
            lambda: Gateway.objects.filter(pk=gateway.pk).update(enabled=False)
        )
        await until(lambda: gateway.pk not in listener.watches, "disabled")
        await anyio.to_thread.run_sync(lambda: second.notify())
        await anyio.sleep(0.5)
        assert len(recorder.for_gateway(gateway.pk)) == 2  # nobody listens now

        await anyio.to_thread.run_sync(
            lambda: Gateway.objects.filter(pk=gateway.pk).update(enabled=True)
        )
        await until(lambda: state_of(listener, gateway) == "listening", "re-enabled")
        await anyio.to_thread.run_sync(
            lambda: Gateway.objects.filter(pk=gateway.pk).delete()
        )
        await until(lambda: gateway.pk not in listener.watches, "removed")
        tg.cancel_scope.cancel()
    assert not (tmp_path / "listener" / "shard-0-of-1.json").exists()  # clean exit


@pytest.mark.django_db(transaction=True)
@pytest.mark.anyio
async def test_a_reconnect_after_a_server_restart_asks_for_exactly_one_refresh(
    mcp_server_factory, tmp_path
):
    server = mcp_server_factory(tools=2, prompts=1, era="legacy")
    gateway = await anyio.to_thread.run_sync(lambda: make_gateway("rs", server.url))
    recorder = Recorder()
    listener = Listener(config(tmp_path), enqueue=recorder)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.run)
        await until(lambda: state_of(listener, gateway) == "listening", "listening")
        assert recorder.requests == []  # no refresh on a first connect
        await anyio.to_thread.run_sync(server.restart)
        await until(lambda: listener.watches[gateway.pk].reconnects == 1, "reconnect")
        await until(lambda: recorder.for_gateway(gateway.pk), "reconnect refresh")
        [request] = recorder.for_gateway(gateway.pk)
        # The server advertises prompts: a missed prompts change is re-read too.
        assert request.reason == "reconnect" and request.include_prompts
        assert state_of(listener, gateway) == "listening"
        await anyio.to_thread.run_sync(server.notify)
        await until(lambda: len(recorder.for_gateway(gateway.pk)) == 2, "honoured")
        assert recorder.for_gateway(gateway.pk)[1].reason == "notification"
        tg.cancel_scope.cancel()


@pytest.mark.django_db(transaction=True)
@pytest.mark.anyio
async def test_refresh_on_start_refreshes_each_gateway_once_it_listens(
    mcp_server_factory, tmp_path
):
    server = mcp_server_factory(tools=2, resources=1, era="modern")
    gateway = await anyio.to_thread.run_sync(lambda: make_gateway("st", server.url))
    recorder = Recorder()
    listener = Listener(config(tmp_path, refresh_on_start=True), enqueue=recorder)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.run)
        await until(lambda: recorder.for_gateway(gateway.pk), "start refresh")
        [request] = recorder.for_gateway(gateway.pk)
        assert request.reason == "start" and request.include_resources
        assert listener.watches[gateway.pk].reconnects == 0
        tg.cancel_scope.cancel()


@pytest.mark.django_db(transaction=True)
@pytest.mark.anyio
async def test_an_unreachable_gateway_backs_off_and_the_status_says_why(
    mcp_server_factory, tmp_path, settings
):
    dead = mcp_server_factory()
    url = dead.url
    dead.kill()
    gateway = await anyio.to_thread.run_sync(lambda: make_gateway("down", url))
    caller = await anyio.to_thread.run_sync(
        lambda: make_gateway("asc", url, auth_type="as_caller")
    )
    cfg = config(tmp_path)
    listener = Listener(cfg, enqueue=Recorder())
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.run)
        await until(
            lambda: (
                listener.watches.get(gateway.pk) is not None
                and listener.watches[gateway.pk].failures >= 3
            ),
            "three failed attempts",
        )
        watch = listener.watches[gateway.pk]
        assert watch.state in ("backoff", "connecting")
        assert "connect" in watch.last_error

        def status_failures() -> int:
            status = read_status(cfg.status_path) or {}
            return (
                (status.get("gateways") or {})
                .get(str(gateway.pk), {})
                .get("failures", 0)
            )

        await until(lambda: status_failures() >= 3, "the status file shows them")
        status = read_status(cfg.status_path)
        assert "calling user" in status["skipped"][str(caller.pk)]
        assert status["sessions"]["listening"] == 0

        settings.VAR_DIR = tmp_path
        out = StringIO()
        call_command("listen", "--status", "--shard", "0/1", stdout=out)
        text = out.getvalue()
        assert "OK" in text and "down" in text and "skipped" in text
        out = StringIO()
        call_command("listen", "--status", "--json", stdout=out)
        assert json.loads(out.getvalue())
        tg.cancel_scope.cancel()


@pytest.mark.django_db(transaction=True)
@pytest.mark.anyio
async def test_a_database_outage_keeps_the_sessions_open(mcp_server_factory, tmp_path):
    server = mcp_server_factory()
    gateway = await anyio.to_thread.run_sync(lambda: make_gateway("db", server.url))
    calls = {"n": 0}

    def flaky_load(**kw: Any) -> tuple[dict[int, WatchSpec], dict[int, str]]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("database unavailable (test)")
        return gateways_to_watch(**kw)

    listener = Listener(config(tmp_path), enqueue=Recorder(), load=flaky_load)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.run)
        await until(lambda: state_of(listener, gateway) == "listening", "listening")
        await until(lambda: calls["n"] >= 4, "failing reloads")
        assert state_of(listener, gateway) == "listening"
        tg.cancel_scope.cancel()


def test_listener_config_reads_the_settings(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    settings.TOOLSYNC_DEBOUNCE_SECONDS = 0.25
    settings.TOOLSYNC_LISTENER_PING_SECONDS = 12
    cfg = ListenerConfig.from_settings(shard=Shard(1, 3))
    assert cfg.debounce_seconds == 0.25 and cfg.session.ping_interval == 12
    assert cfg.status_path == tmp_path / "listener" / "shard-1-of-3.json"
