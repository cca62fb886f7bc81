"""The real browser of the admin tests: Debian's Chromium driven by Playwright.

One fixture, `page`, for every browser test: a fresh headless Chromium per
test (Playwright's sync API keeps an event loop in the test's thread, so it
must not outlive the test and leak into the asyncio code of other tests),
pointed at pytest-django's `live_server`. The browser is the system package
(`apt-get install chromium`, which `.ci/run` does); Playwright never downloads
one. Where CI insists on real parts (TOOLSYNC_REQUIRE_POSTGRES) a missing
browser or Playwright fails the test instead of skipping it.

Screenshots are test artifacts under `test-artifacts/` (gitignored): the ones
a test takes with `shot()`, and a last one of every page at teardown, so a
failure in CI can be looked at.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connections

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("TOOLSYNC_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
]
VIEWPORT = {"width": 1360, "height": 900}
# Generous: two shared cores, and a click may run a whole refresh server-side.
TIMEOUT_MS = 30_000


def _unavailable(reason: str) -> None:
    if settings.TOOLSYNC_REQUIRE_POSTGRES:
        pytest.fail(f"{reason} (CI runs the browser tests; .ci/run installs it)")
    pytest.skip(reason)


def artifact_path(request: pytest.FixtureRequest, name: str) -> Path:
    """`test-artifacts/<module>-<test>-<name>.png`, safe as a file name."""
    module = request.node.module.__name__.rsplit(".", 1)[-1]
    stem = f"{module}-{request.node.name}-{name}"
    return ARTIFACTS / (re.sub(r"[^A-Za-z0-9_.-]+", "_", stem) + ".png")


@pytest.fixture
def page(
    live_server: Any, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """A Chromium tab whose relative URLs resolve against the live server."""
    if not Path(CHROMIUM).exists():
        _unavailable(f"{CHROMIUM} is missing: `apt-get install -y chromium`")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (requirements-dev.txt)")
    # Playwright's sync API runs an event loop in this thread between calls;
    # the ORM calls a test makes between page actions are still synchronous.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(base_url=live_server.url, viewport=VIEWPORT)
        context.set_default_timeout(TIMEOUT_MS)
        tab = context.new_page()
        try:
            yield tab
        finally:
            try:
                tab.screenshot(path=str(artifact_path(request, "last")), full_page=True)
            except Exception:  # noqa: BLE001 - a dead page must not hide the real failure
                pass
            context.close()
            browser.close()
            # With Playwright's loop marked running, asgiref's Local keeps the
            # ORM connections the test body opened apart from the thread's
            # own; close them here or they outlive the test database.
            connections.close_all()


@pytest.fixture
def screenshot(page: Any, request: pytest.FixtureRequest) -> Any:
    """`screenshot(name)`: a full-page screenshot saved as a test artifact."""

    def take(name: str) -> Path:
        target = artifact_path(request, name)
        page.screenshot(path=str(target), full_page=True)
        return target

    return take


def log_in(page: Any, username: str, password: str) -> None:
    """Log in through the admin's own login form."""
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
