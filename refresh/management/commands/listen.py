"""`manage.py listen`: the notification listener (SPEC 5.3, docs/events.md).

    python manage.py listen [--shard I/N] [--refresh-on-start]
    python manage.py listen --status [--shard I/N] [--json]

The first form runs until SIGTERM/SIGINT; the second prints what the running
listener(s) of this machine report and exits 1 when one is not running or
has stopped reloading.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from typing import Any

import anyio
from django.core.management.base import BaseCommand, CommandError, CommandParser

from refresh import metrics
from refresh.listener import (
    Listener,
    ListenerConfig,
    Shard,
    read_status,
    status_age,
    status_dir,
    status_is_fresh,
    status_path,
)

logger = logging.getLogger("toolsync.listener")


class Command(BaseCommand):
    help = (
        "Keep a session to every enabled gateway and refresh its catalog when it "
        "announces notifications/*/list_changed (debounced; SPEC 5.3)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--shard",
            metavar="I/N",
            help="listen only to the gateways whose id mod N is I (numbered from "
            "0); run N listeners, 0/N to N-1/N, to split the gateways between them",
        )
        parser.add_argument(
            "--refresh-on-start",
            action="store_true",
            help="refresh every gateway once its first session is listening "
            "(covers announcements made while no listener ran; costs one "
            "refresh per gateway per start)",
        )
        parser.add_argument(
            "--status",
            action="store_true",
            help="print the running listener's status and exit (1 if it is not "
            "running or has stopped reloading)",
        )
        parser.add_argument(
            "--json", action="store_true", help="with --status: print JSON"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            shard = Shard.parse(opts["shard"]) if opts["shard"] else None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if opts["status"]:
            self._status(shard, as_json=opts["json"])
            return
        config = ListenerConfig.from_settings(
            shard=shard or Shard(), refresh_on_start=opts["refresh_on_start"]
        )
        # Fold the sample files of listeners that died, so /metrics does not
        # keep summing their last live gauges.
        metrics.compact_dead_processes()
        anyio.run(_serve, Listener(config))

    def _status(self, shard: Shard | None, *, as_json: bool) -> None:
        paths = (
            [status_path(shard)]
            if shard is not None
            else sorted(status_dir().glob("shard-*.json"))
        )
        if not paths:
            raise CommandError(
                f"no listener is running (no status file in {status_dir()})",
                returncode=1,
            )
        reports = {str(path): read_status(path) for path in paths}
        healthy = all(
            report is not None and "error" not in report and status_is_fresh(report)
            for report in reports.values()
        )
        if as_json:
            self.stdout.write(json.dumps(reports, indent=1, sort_keys=True))
        else:
            for path, report in reports.items():
                self.stdout.write(_render(path, report))
        if not healthy:
            raise CommandError(
                "a listener is not running or has stopped reloading", returncode=1
            )


async def _serve(listener: Listener) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.run)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for received in signals:
                logger.info("received %s; closing every session", received.name)
                tg.cancel_scope.cancel()
                break


def _render(path: str, report: dict[str, Any] | None) -> str:
    if report is None:
        return f"{path}: no listener running\n"
    if "error" in report:
        return f"{path}: {report['error']}\n"
    fresh = status_is_fresh(report)
    age = status_age(report)
    up = time.time() - float(report.get("started_at") or time.time())
    sessions = report.get("sessions") or {}
    lines = [
        f"listener shard {report.get('shard')}: pid {report.get('pid')}, up "
        f"{up:.0f} s, last reload {age:.1f} s ago - "
        + ("OK" if fresh else "NOT RUNNING OR STUCK"),
        "  sessions: " + ", ".join(f"{k} {v}" for k, v in sessions.items()),
    ]
    gateways = report.get("gateways") or {}
    if gateways:
        lines.append(
            f"  {'id':>6} {'prefix':<20} {'transport':<15} {'era':<7} {'state':<12} "
            f"{'reconn':>6} {'notif':>6} {'refr':>5}  last error"
        )
        for gid, g in gateways.items():
            lines.append(
                f"  {gid:>6} {str(g.get('prefix'))[:20]:<20} "
                f"{str(g.get('transport')):<15} {str(g.get('era') or '?'):<7} "
                f"{str(g.get('state')):<12} {g.get('reconnects', 0):>6} "
                f"{g.get('notifications', 0):>6} {g.get('refreshes', 0):>5}  "
                f"{g.get('last_error') or ''}"
            )
    for gid, reason in (report.get("skipped") or {}).items():
        lines.append(f"  {gid:>6} skipped: {reason}")
    return "\n".join(lines) + "\n"
