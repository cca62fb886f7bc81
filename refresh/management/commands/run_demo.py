"""`manage.py run_demo` (what `make run` runs): a whole Toolsync on one machine.

Migrates the embedded SQLite database, creates a demo tenant and an admin
login, starts the bundled demo MCP server (its catalog changes every minute),
registers it, runs a first refresh and prints the report, then starts the web
server and the background processes (worker, beat, notification listener) and
supervises them until Ctrl-C. Every child is stopped by its PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from gateways.models import Gateway, Role
from gateways.services import gateway_create, membership_set, tenant_get_or_create
from refresh.metrics import wipe_multiprocess_dir
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.report import render_report_text
from refresh.services import refresh_gateway

DEMO_USER = "admin"
DEMO_PASSWORD = "toolsync-demo"


def background_processes(python: str, web_port: int) -> list[tuple[str, list[str]]]:
    """The processes `make run` supervises, besides the demo MCP server."""
    celery = str(Path(python).with_name("celery"))
    return [
        (
            "web",
            [python, "manage.py", "runserver", f"127.0.0.1:{web_port}", "--noreload"],
        ),
        # One worker for all three queues (refresh, health, schedule) and
        # beat's database scheduler, over the embedded filesystem broker.
        (
            "worker",
            [
                celery,
                *"-A project worker -l info -Q refresh,health,schedule".split(),
                *"--concurrency 2 -n demo@%h".split(),
            ],
        ),
        (
            "beat",
            [
                celery,
                *"-A project beat -l info --pidfile".split(),
                str(Path(settings.VAR_DIR) / "beat.pid"),
            ],
        ),
        # The notification listener: a list_changed from the demo server is
        # debounced and refreshed through the worker (docs/events.md).
        ("listener", [python, "manage.py", "listen"]),
    ]


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


class Command(BaseCommand):
    help = "Run the demo: database, demo MCP server, first refresh, web and background processes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--web-port", type=int, default=8000)
        parser.add_argument("--mcp-port", type=int, default=8765)
        parser.add_argument("--mutate-every", type=float, default=60.0)
        parser.add_argument(
            "--no-serve", action="store_true", help="set up and refresh, then exit"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        # `kill <pid>` or a closed terminal must stop the children too, the
        # way Ctrl-C does; left alone they would outlive the demo.
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGHUP, _interrupt)
        var = Path(settings.VAR_DIR)
        var.mkdir(parents=True, exist_ok=True)
        call_command("migrate", verbosity=0)
        # Every process of this machine starts afresh: samples of a previous
        # demo's processes would otherwise be summed into /metrics.
        wipe_multiprocess_dir()
        self._admin_login()
        children: list[tuple[str, subprocess.Popen[bytes]]] = []
        python = sys.executable
        try:
            mcp_url = f"http://127.0.0.1:{opts['mcp_port']}/mcp"
            server = self._spawn(
                "demo-mcp",
                [
                    python,
                    "-m",
                    "testservers",
                    "--transport",
                    "http",
                    "--port",
                    str(opts["mcp_port"]),
                    "--tools",
                    "25",
                    "--prompts",
                    "3",
                    "--state-file",
                    str(var / "demo-mcp-state.json"),
                    "--mutate-every",
                    str(opts["mutate_every"]),
                    "--notify-on-mutate",
                ],
                var,
            )
            children.append(("demo-mcp", server))
            self._wait_for_port(opts["mcp_port"])
            gateway = self._demo_gateway(mcp_url)
            run = refresh_gateway(
                gateway=gateway,
                trigger=RefreshRun.Trigger.CLI,
                options=RefreshOptions(apply=True),
            )
            self.stdout.write(render_report_text(run.report))
            self._demo_skill(gateway)
            if opts["no_serve"]:
                return
            for name, argv in background_processes(python, opts["web_port"]):
                children.append((name, self._spawn(name, argv, var)))
            self.stdout.write(
                self.style.SUCCESS(
                    f"\nToolsync is running: http://127.0.0.1:{opts['web_port']}/admin/ "
                    f"(login {DEMO_USER} / {DEMO_PASSWORD})\n"
                    f"Demo MCP server: {mcp_url} - its catalog changes every "
                    f"{opts['mutate_every']:g} s. Logs: {var}/*.log. Ctrl-C stops everything.\n"
                    "Change its catalog now (it announces the change; the listener "
                    "refreshes within about a second):\n"
                    f"  curl -s -X POST http://127.0.0.1:{opts['mcp_port']}/control/mutate "
                    "-H 'Content-Type: application/json' -d '{\"add\": 0.2}'"
                )
            )
            self._supervise(children)
        finally:
            for _name, child in reversed(children):
                if child.poll() is None:
                    os.kill(child.pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            for _name, child in children:
                try:
                    child.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    os.kill(child.pid, signal.SIGKILL)

    def _admin_login(self) -> None:
        user_model = get_user_model()
        user = user_model.objects.filter(username=DEMO_USER).first()
        if user is None:
            user = user_model.objects.create_superuser(
                DEMO_USER, "admin@example.com", DEMO_PASSWORD
            )
        tenant = tenant_get_or_create(slug="demo", name="Demo")
        membership_set(user=user, tenant=tenant, role=Role.OWNER)

    def _demo_gateway(self, url: str) -> Gateway:
        tenant = tenant_get_or_create(slug="demo", name="Demo")
        gateway = Gateway.objects.filter(tenant=tenant, prefix="demo").first()
        if gateway is None:
            gateway = gateway_create(
                tenant=tenant,
                name="Demo MCP server",
                prefix="demo",
                url=url,
                refresh_interval=60,
            )
        elif gateway.url != url:
            gateway.url = url
            gateway.save(update_fields=["url", "updated_at"])
        return gateway

    def _demo_skill(self, gateway: Gateway) -> None:
        from skills.services import demo_skill_ensure

        skill = demo_skill_ensure(gateway=gateway)
        if skill is not None and skill.current_revision is not None:
            self.stdout.write(
                f"Demo skill {skill.name} names "
                f"{', '.join(skill.current_revision.tools)} (status: {skill.status}). "
                "Remove one from the demo server and refresh: the preview names "
                f"{skill.name}@{skill.revision_number}, and applying with "
                "deactivate_missing fails the skill."
            )

    def _spawn(self, name: str, argv: list[str], var: Path) -> subprocess.Popen[bytes]:
        log = open(var / f"{name}.log", "ab")  # noqa: SIM115 - lives as long as the child
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, cwd=settings.BASE_DIR, env=env
        )

    def _wait_for_port(self, port: int, timeout: float = 20.0) -> None:
        import socket

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                sock.settimeout(0.3)
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.1)
        raise SystemExit(f"port {port} did not open within {timeout:g} s")

    def _supervise(self, children: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
        try:
            while True:
                for name, child in children:
                    if child.poll() is not None:
                        self.stderr.write(
                            f"{name} exited with {child.returncode}; stopping"
                        )
                        return
                time.sleep(0.5)
        except KeyboardInterrupt:
            self.stdout.write("stopping")
