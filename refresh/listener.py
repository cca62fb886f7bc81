"""The notification listener (SPEC 5.3): supervised sessions to every enabled gateway.

`python manage.py listen [--shard I/N]` runs one `Listener`: a single asyncio
process that

- re-reads the enabled gateways of its shard every
  TOOLSYNC_LISTENER_RELOAD_SECONDS (a gateway added, changed, disabled or
  removed is picked up at the next read, without a restart);
- keeps one `GatewayWatch` per gateway: a `NotificationAdapter` (the MCP
  session, `refresh.notifications`), its `RefreshHook` (the debouncer,
  `refresh.debounce`) and a supervisor that reopens the session when it
  fails or dies silently, with exponential backoff and jitter;
- asks for one refresh after every reconnect: neither protocol era replays
  what was announced while the session was down;
- publishes its health: `toolsync_listener_*` metrics and a status file that
  `manage.py listen --status` reads.

Capability flags are not trusted (MCP_NOTES): every enabled gateway gets a
session, whatever its `listChanged` says. Gateways that authenticate as the
caller have no credential to listen with and are skipped, with the reason
logged once. A gateway whose server cannot deliver notifications at all is
retried rarely; the schedule keeps it fresh either way.

Only this module reads the database (in a worker thread, off the event
loop); the sessions themselves never touch it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import F
from django.db.models.functions import Mod

from gateways.crypto import CredentialError
from gateways.models import Gateway
from gateways.services import GatewayConfigError, gateway_probe_target
from refresh import metrics
from refresh.debounce import Enqueue, RefreshHook, enqueue_event_refresh
from refresh.notifications import (
    NotificationAdapter,
    SessionEnded,
    SessionInfo,
    SessionSettings,
)
from refresh.probe import ProbeTarget

logger = logging.getLogger("toolsync.listener")

STATES = ("connecting", "listening", "backoff", "unsupported")
# Retry a gateway that cannot deliver notifications (no listen, no GET
# stream) this rarely: its server may be upgraded; the schedule covers it.
UNSUPPORTED_RETRY_SECONDS = 600.0
# A session that stayed up this long resets the backoff: a server that
# accepts connections and drops them at once keeps backing off.
STABLE_SESSION_SECONDS = 30.0
# Immediate retries in another era before backing off (guards a loop
# between two eras that both fail right after connecting).
MAX_IMMEDIATE_RETRIES = 2
_FINGERPRINT_FIELDS = (
    "transport",
    "url",
    "command",
    "args",
    "env",
    "auth_type",
    "credentials_encrypted",
)


@dataclass(frozen=True)
class Shard:
    """This listener's share of the gateways: those whose id mod `count` is `index`."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, text: str) -> Shard:
        """Parse `I/N` (0 <= I < N); a clear `ValueError` otherwise."""
        index_text, sep, count_text = text.strip().partition("/")
        try:
            index, count = int(index_text), int(count_text)
        except ValueError:
            raise ValueError(
                f"--shard takes I/N, two whole numbers (e.g. 0/4); got {text!r}"
            ) from None
        if not sep or count < 1 or not 0 <= index < count:
            raise ValueError(
                f"--shard I/N needs N >= 1 and 0 <= I < N (shards are numbered "
                f"from 0); got {text!r}"
            )
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def owns(self, gateway_id: int) -> bool:
        return gateway_id % self.count == self.index

    @property
    def slug(self) -> str:
        return f"{self.index}-of-{self.count}"


@dataclass(frozen=True)
class ListenerConfig:
    """Everything a listener needs to know; `from_settings` reads TOOLSYNC_*."""

    shard: Shard = Shard()
    reload_seconds: float = 2.0
    session: SessionSettings = SessionSettings()
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    unsupported_retry: float = UNSUPPORTED_RETRY_SECONDS
    stable_after: float = STABLE_SESSION_SECONDS
    debounce_seconds: float = 0.5
    max_delay_seconds: float = 5.0
    refresh_on_start: bool = False
    status_path: Path | None = None

    @classmethod
    def from_settings(
        cls, *, shard: Shard = Shard(), refresh_on_start: bool = False
    ) -> ListenerConfig:
        return cls(
            shard=shard,
            reload_seconds=settings.TOOLSYNC_LISTENER_RELOAD_SECONDS,
            session=SessionSettings(
                ping_interval=settings.TOOLSYNC_LISTENER_PING_SECONDS,
                ping_timeout=settings.TOOLSYNC_LISTENER_PING_TIMEOUT,
            ),
            backoff_initial=settings.TOOLSYNC_LISTENER_BACKOFF_INITIAL,
            backoff_max=settings.TOOLSYNC_LISTENER_BACKOFF_MAX,
            debounce_seconds=settings.TOOLSYNC_DEBOUNCE_SECONDS,
            max_delay_seconds=settings.TOOLSYNC_MAX_DELAY_SECONDS,
            refresh_on_start=refresh_on_start,
            status_path=status_path(shard),
        )


def status_dir() -> Path:
    return Path(settings.VAR_DIR) / "listener"


def status_path(shard: Shard) -> Path:
    """Where the listener of `shard` writes its status (read by `listen --status`)."""
    return status_dir() / f"shard-{shard.slug}.json"


# -- reading gateways (database; runs in a worker thread) ------------------


@dataclass(frozen=True)
class WatchSpec:
    """One gateway to listen to: where, with which credentials, as of which config."""

    gateway_id: int
    prefix: str
    target: ProbeTarget = field(repr=False)
    fingerprint: str


def gateway_fingerprint(values: Mapping[str, Any]) -> str:
    """A digest of the fields a session depends on (not the secrets themselves)."""
    raw = json.dumps(
        [values.get(name) for name in _FINGERPRINT_FIELDS],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(raw.encode()).hexdigest()


def gateways_to_watch(
    *, shard: Shard, known: Mapping[int, WatchSpec] | None = None
) -> tuple[dict[int, WatchSpec], dict[int, str]]:
    """The enabled gateways of `shard` to listen to, and why others are skipped.

    One narrow query of plain values per reload; credentials are decrypted
    (and model rows loaded) only for gateways that are new or whose
    connection settings changed: an unchanged gateway keeps its spec.
    """
    known = known or {}
    rows = Gateway.objects.filter(enabled=True)
    if shard.count > 1:
        rows = rows.annotate(shard=Mod(F("id"), shard.count)).filter(shard=shard.index)
    try:
        values = list(rows.order_by("pk").values_list("id", *_FINGERPRINT_FIELDS))
    except DatabaseError:
        # The listener lives for weeks: after a database restart the next
        # reload must reconnect instead of reusing the broken connection.
        if not connection.in_atomic_block:
            connection.close()
        raise
    specs: dict[int, WatchSpec] = {}
    skipped: dict[int, str] = {}
    fresh: dict[int, str] = {}
    for gateway_id, *fields in values:
        settings_of = dict(zip(_FINGERPRINT_FIELDS, fields, strict=True))
        if settings_of["auth_type"] == Gateway.AuthType.AS_CALLER:
            skipped[gateway_id] = (
                "authenticates as the calling user: there is no stored credential "
                "to listen with (scheduled and manual refreshes with a "
                "probe_credential still apply)"
            )
            continue
        fingerprint = gateway_fingerprint(settings_of)
        previous = known.get(gateway_id)
        if previous is not None and previous.fingerprint == fingerprint:
            specs[gateway_id] = previous
        else:
            fresh[gateway_id] = fingerprint
    if fresh:
        for gateway in Gateway.objects.filter(pk__in=list(fresh)):
            try:
                target = gateway_probe_target(gateway)
            except (GatewayConfigError, CredentialError) as exc:
                skipped[gateway.pk] = f"cannot build its connection: {exc}"
                continue
            specs[gateway.pk] = WatchSpec(
                gateway_id=gateway.pk,
                prefix=gateway.prefix,
                target=target,
                # As read above: a change since is seen at the next reload.
                fingerprint=fresh[gateway.pk],
            )
    return dict(sorted(specs.items())), skipped


# -- supervision ---------------------------------------------------------------


class Backoff:
    """Exponential backoff with jitter ("equal jitter": half fixed, half random).

    Delays double from `initial` up to `maximum`; the random half keeps
    gateways that failed together (a network blip) from retrying together.
    """

    def __init__(
        self,
        initial: float,
        maximum: float,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.attempt = 0
        self._rng = rng

    def next_delay(self) -> float:
        ceiling = min(self.maximum, self.initial * 2**self.attempt)
        self.attempt = min(self.attempt + 1, 64)
        return ceiling / 2 + self._rng() * ceiling / 2

    def reset(self) -> None:
        self.attempt = 0


class GatewayWatch:
    """One gateway's adapter, refresh hook and supervising task."""

    def __init__(
        self,
        spec: WatchSpec,
        config: ListenerConfig,
        *,
        enqueue: Enqueue = enqueue_event_refresh,
        replaces: bool = False,
    ) -> None:
        self.spec = spec
        self.config = config
        self.adapter = NotificationAdapter(
            spec.target,
            label=f"gateway {spec.gateway_id} ({spec.prefix})",
            settings=config.session,
        )
        self.hook = RefreshHook(
            self.adapter,
            spec.gateway_id,
            config.debounce_seconds,
            config.max_delay_seconds,
            enqueue=enqueue,
        )
        self.state = "connecting"
        # A watch that replaces one (its gateway's connection changed) treats
        # its first session as a reconnect: it refreshes once listening.
        self.listened = replaces
        self.reconnects = 0
        self.failures = 0
        self.era = spec.target.era
        self.protocol_version = ""
        self.listening_since: float | None = None
        self.last_error = ""
        self.next_attempt_at: float | None = None
        self._scope: anyio.CancelScope | None = None
        self._stopped = False

    @property
    def label(self) -> str:
        return self.adapter.label

    async def run(self) -> None:
        """Supervise until `stop()`."""
        with anyio.CancelScope() as scope:
            self._scope = scope
            if self._stopped:
                return
            await self._supervise()

    def stop(self) -> None:
        """End the session and the hook (a pending refresh is dropped)."""
        self._stopped = True
        self.hook.close(wait=False)
        if self._scope is not None:
            self._scope.cancel()

    async def _supervise(self) -> None:
        backoff = Backoff(self.config.backoff_initial, self.config.backoff_max)
        immediate = 0
        while True:
            self.state = "connecting"
            self.next_attempt_at = None
            listening_at: list[float] = []
            try:
                await self.adapter.run_session(
                    partial(self._on_listening, listening_at)
                )
            except SessionEnded as ended:
                outcome = ended
            except Exception as exc:  # noqa: BLE001 - a bug must not end the supervision
                logger.exception("%s: session crashed", self.label)
                outcome = SessionEnded(
                    f"internal error: {type(exc).__name__}", code="session_lost"
                )
            self.listening_since = None
            lived = time.monotonic() - listening_at[0] if listening_at else 0.0
            if lived >= self.config.stable_after:
                backoff.reset()
            if listening_at:
                immediate = 0  # an era switch that worked is not a loop
            self.failures += 1
            self.last_error = outcome.reason
            metrics.listener_session_failed(self.spec.gateway_id, outcome.code)
            if outcome.retry_now and immediate < MAX_IMMEDIATE_RETRIES:
                immediate += 1
                logger.info("%s: %s", self.label, outcome.reason)
                continue
            immediate = 0
            if outcome.unsupported:
                self.state = "unsupported"
                delay = self.config.unsupported_retry
                logger.warning(
                    "%s: %s; the schedule keeps it fresh; trying again in %.0f s",
                    self.label,
                    outcome.reason,
                    delay,
                )
            else:
                self.state = "backoff"
                delay = (
                    backoff.next_delay()
                    if outcome.retryable
                    else self.config.backoff_max
                )
                level = (
                    logging.WARNING
                    if listening_at or backoff.attempt <= 1
                    else logging.INFO
                )
                lost = listening_at and not outcome.reason.startswith("session lost")
                logger.log(
                    level,
                    "%s: %s%s; reconnecting in %.1f s",
                    self.label,
                    "session lost: " if lost else "",
                    outcome.reason,
                    delay,
                )
            self.next_attempt_at = time.time() + delay
            await anyio.sleep(delay)

    def _on_listening(self, listening_at: list[float], info: SessionInfo) -> None:
        listening_at.append(time.monotonic())
        self.state = "listening"
        self.listening_since = time.time()
        self.era = info.era
        self.protocol_version = info.protocol_version
        self.last_error = ""
        kinds = ["tools"] + [
            k for k in ("prompts", "resources") if k in info.capabilities
        ]
        if self.listened:
            # Nothing is replayed in either era: whatever was announced while
            # the session was down is found by reading the lists again.
            self.reconnects += 1
            metrics.listener_reconnected(self.spec.gateway_id)
            self.hook.request_refresh(kinds, reason="reconnect")
            logger.info(
                "%s: listening again (%s, %s); one refresh requested",
                self.label,
                info.era,
                info.protocol_version,
            )
        else:
            if self.config.refresh_on_start:
                self.hook.request_refresh(kinds, reason="start")
            logger.info(
                "%s: listening (%s, %s)", self.label, info.era, info.protocol_version
            )
        self.listened = True

    def status(self) -> dict[str, Any]:
        return {
            "prefix": self.spec.prefix,
            "transport": self.spec.target.transport,
            "state": self.state,
            "era": self.era,
            "protocol_version": self.protocol_version,
            "listening_since": self.listening_since,
            "reconnects": self.reconnects,
            "failures": self.failures,
            "notifications": self.hook.notification_count,
            "refreshes": self.hook.refresh_count,
            "refresh_pending": self.hook.pending,
            "last_error": self.last_error,
            "next_attempt_at": self.next_attempt_at,
        }


class Listener:
    """Keeps a `GatewayWatch` for every gateway of its shard, in step with the database."""

    def __init__(
        self,
        config: ListenerConfig,
        *,
        enqueue: Enqueue = enqueue_event_refresh,
        load: Callable[..., tuple[dict[int, WatchSpec], dict[int, str]]] = (
            gateways_to_watch
        ),
    ) -> None:
        self.config = config
        self.watches: dict[int, GatewayWatch] = {}
        self.skipped: dict[int, str] = {}
        self.started_at = time.time()
        self.heartbeat = 0.0
        self.reloads = 0
        self._enqueue = enqueue
        self._load = load
        self._tg: anyio.abc.TaskGroup | None = None

    async def run(self) -> None:
        """Reload, supervise and publish status until cancelled."""
        logger.info(
            "listener shard %s starting (reload every %g s)",
            self.config.shard,
            self.config.reload_seconds,
        )
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                while True:
                    await self.reload()
                    self.publish_status()
                    await anyio.sleep(self.config.reload_seconds)
        finally:
            for watch in self.watches.values():
                watch.hook.close(wait=False)
            self._tg = None
            self._remove_status()
            metrics.listener_stopped()
            logger.info("listener shard %s stopped", self.config.shard)

    async def reload(self) -> None:
        """Bring the watches in step with the database (start, restart, stop)."""
        known = {gid: watch.spec for gid, watch in self.watches.items()}
        try:
            specs, skipped = await anyio.to_thread.run_sync(
                partial(self._load, shard=self.config.shard, known=known)
            )
        except Exception:  # noqa: BLE001 - keep listening with what we have
            logger.exception(
                "could not read the gateways; keeping the current sessions"
            )
            return
        for gateway_id in list(self.watches):
            watch = self.watches[gateway_id]
            spec = specs.get(gateway_id)
            if spec is None:
                why = skipped.get(gateway_id) or "disabled or removed"
                logger.info("%s: %s; closing its session", watch.label, why)
                self._stop(gateway_id)
            elif spec.fingerprint != watch.spec.fingerprint:
                logger.info(
                    "%s: connection settings changed; reconnecting", watch.label
                )
                self._stop(gateway_id)
                self._start(spec, replaces=True)
        for gateway_id, spec in specs.items():
            if gateway_id not in self.watches:
                self._start(spec)
        for gateway_id, reason in skipped.items():
            if self.skipped.get(gateway_id) != reason:
                logger.warning("gateway %s: not listening: %s", gateway_id, reason)
        self.skipped = skipped
        self.reloads += 1
        self.heartbeat = time.time()

    def _start(self, spec: WatchSpec, *, replaces: bool = False) -> None:
        assert self._tg is not None, "reload() runs inside run()"
        watch = GatewayWatch(
            spec, self.config, enqueue=self._enqueue, replaces=replaces
        )
        self.watches[spec.gateway_id] = watch
        self._tg.start_soon(watch.run, name=f"watch-{spec.gateway_id}")

    def _stop(self, gateway_id: int) -> None:
        watch = self.watches.pop(gateway_id, None)
        if watch is not None:
            watch.stop()

    # -- health --------------------------------------------------------------

    def session_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STATES, 0)
        for watch in self.watches.values():
            counts[watch.state] = counts.get(watch.state, 0) + 1
        return counts

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "shard": str(self.config.shard),
            "started_at": self.started_at,
            "heartbeat": self.heartbeat,
            "reload_seconds": self.config.reload_seconds,
            "reloads": self.reloads,
            "sessions": self.session_counts(),
            "gateways": {
                str(gid): watch.status() for gid, watch in sorted(self.watches.items())
            },
            "skipped": {
                str(gid): reason for gid, reason in sorted(self.skipped.items())
            },
        }

    def publish_status(self) -> None:
        """Metrics gauges and the status file (written atomically)."""
        metrics.listener_health(
            shard=str(self.config.shard),
            sessions=self.session_counts(),
            heartbeat=self.heartbeat,
        )
        path = self.config.status_path
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            # No indent: only the compact form uses json's C encoder.
            tmp.write_text(json.dumps(self.status(), sort_keys=True))
            os.replace(tmp, path)
        except OSError:
            logger.warning("could not write the status file %s", path, exc_info=True)

    def _remove_status(self) -> None:
        path = self.config.status_path
        if path is None:
            return
        with contextlib.suppress(OSError):
            current = json.loads(path.read_text())
            if current.get("pid") == os.getpid():
                path.unlink()


def read_status(path: Path) -> dict[str, Any] | None:
    """A listener's status file, or None when there is none (not running)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"error": f"unreadable status file {path}"}
    return (
        data if isinstance(data, dict) else {"error": f"malformed status file {path}"}
    )


def status_age(status: Mapping[str, Any], now: float | None = None) -> float:
    """Seconds since the listener last reloaded the gateways."""
    heartbeat = status.get("heartbeat")
    if not isinstance(heartbeat, int | float) or heartbeat <= 0:
        return float("inf")
    return (now or time.time()) - heartbeat


def status_is_fresh(status: Mapping[str, Any], now: float | None = None) -> bool:
    """Whether the listener behind `status` is alive: reloaded recently, pid alive."""
    reload_seconds = status.get("reload_seconds")
    window = max(
        10.0, 3 * (reload_seconds if isinstance(reload_seconds, int | float) else 2.0)
    )
    pid = status.get("pid")
    if not isinstance(pid, int) or not _pid_alive(pid):
        return False
    return status_age(status, now) <= window


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True
