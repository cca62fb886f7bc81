"""`make run` end to end: a change announced by the demo server shows in the admin.

Runs `manage.py run_demo` as `make run` does (SQLite, the filesystem broker,
web + worker + beat + listener), changes the demo server's catalog through
its control API (the server announces the change), and watches the tool list
of the admin in a real browser (Debian's Chromium through Playwright) until
the new tool appears. Every process is stopped by its PID.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from tests.events.conftest import child_pids, kill_quietly

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("TOOLSYNC_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(predicate, timeout: float, what: str, proc: subprocess.Popen, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"run_demo exited ({proc.returncode}):\n{log.read_text()[-4000:]}"
            )
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out: {what}\n{log.read_text()[-4000:]}")


def listening(var: Path) -> bool:
    try:
        status = json.loads((var / "listener" / "shard-0-of-1.json").read_text())
    except (OSError, ValueError):
        return False
    states = [g.get("state") for g in (status.get("gateways") or {}).values()]
    return states == ["listening"]


def test_make_run_shows_an_announced_change_in_the_admin(tmp_path):
    if not Path(CHROMIUM).exists():
        if settings.TOOLSYNC_REQUIRE_POSTGRES:
            pytest.fail(f"no Chromium at {CHROMIUM} (CI installs Debian's)")
        pytest.skip(f"no Chromium at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    web_port, mcp_port = free_port(), free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DEBUG": "1",
        "TOOLSYNC_VAR_DIR": str(tmp_path),
        "CELERY_BROKER_URL": "filesystem://",
        "PYTHONUNBUFFERED": "1",
    }
    log = tmp_path / "run_demo.out"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "manage.py", "run_demo",
                "--web-port", str(web_port), "--mcp-port", str(mcp_port),
                "--mutate-every", "3600",
            ],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait(
            lambda: "Toolsync is running" in log.read_text(), 120, "demo up", proc, log
        )
        wait(lambda: listening(tmp_path), 60, "the listener listens", proc, log)
        wait(
            lambda: "ready." in (tmp_path / "worker.log").read_text(errors="replace"),
            60,
            "the worker is ready",
            proc,
            log,
        )
        base = f"http://127.0.0.1:{web_port}"
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS
            )
            try:
                page = browser.new_page()
                page.set_default_timeout(30_000)
                page.goto(f"{base}/admin/login/?next=/admin/")
                page.fill("#id_username", "admin")
                page.fill("#id_password", "toolsync-demo")
                page.click("input[type=submit]")
                page.wait_for_url(f"{base}/admin/")

                # Change the demo server's catalog; it announces the change.
                request = urllib.request.Request(
                    f"http://127.0.0.1:{mcp_port}/control/mutate",
                    data=json.dumps({"add": 0.2, "seed": 42}).encode(),
                    headers={"Content-Type": "application/json"},
                    method="POST",
                )
                changed = time.monotonic()
                with urllib.request.urlopen(request, timeout=30) as response:
                    added = json.loads(response.read())["added"]
                assert added
                name = added[0]
                shown = None
                while time.monotonic() - changed < 30:
                    page.goto(f"{base}/admin/tools/tool/?q={name}")
                    if page.locator("#result_list", has_text=name).count():
                        shown = time.monotonic() - changed
                        break
                    time.sleep(0.1)
                assert shown is not None, (
                    f"{name} not in the admin after 30 s:\n"
                    + (tmp_path / "listener.log").read_text(errors="replace")[-3000:]
                )
                print(f"announced change -> visible in the admin: {shown:.2f} s")
            finally:
                browser.close()
        # `kill <pid>` stops the demo and every process it started, like Ctrl-C.
        children = {pid: cmdline(pid) for pid in child_pids(proc.pid, "")}
        assert children
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
            cmdline(pid) == line for pid, line in children.items()
        ):
            time.sleep(0.1)
        left = [line for pid, line in children.items() if cmdline(pid) == line]
        assert not left, f"run_demo left children running after SIGTERM: {left}"
    finally:
        children = {pid: cmdline(pid) for pid in child_pids(proc.pid, "")}
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # run_demo stops its children by PID
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for pid, line in children.items():
            if line and cmdline(pid) == line:  # still ours, not a reused PID
                kill_quietly(pid, signal.SIGKILL)


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
