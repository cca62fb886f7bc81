"""The demo's skill: created by `make run`, failed by removing one of its tools."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gateways.services import gateway_create
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from skills.models import Skill
from skills.services import DEMO_SKILL, demo_skill_ensure

ROOT = Path(__file__).resolve().parents[2]
API = RefreshRun.Trigger.API


@pytest.mark.django_db
def test_removing_a_demo_tool_fails_the_demo_skill(mcp_server_factory, tenant):
    # The same generated catalog `make run` serves (25 tools, seed 0).
    server = mcp_server_factory(tools=25)
    gateway = gateway_create(tenant=tenant, name="Demo", prefix="demo", url=server.url)
    refresh_gateway(gateway=gateway, trigger=API, options=RefreshOptions(apply=True))
    skill = demo_skill_ensure(gateway=gateway)
    assert skill is not None and skill.status == "ok"
    assert demo_skill_ensure(gateway=gateway).pk == skill.pk  # idempotent
    used = skill.current_revision.tools[0].removeprefix("demo__")
    server.remove_tools([used])

    preview = refresh_gateway(gateway=gateway, trigger=API)
    item = next(i for i in preview.report["items"] if i["name"] == used)
    assert (item["change"], item["referenced_by"]) == (
        "disappeared",
        [f"{DEMO_SKILL}@1"],
    )

    run = refresh_gateway(
        gateway=gateway,
        trigger=API,
        options=RefreshOptions(apply=True, deactivate_missing=True),
    )
    assert run.report["skills"]["failed"] == {
        DEMO_SKILL: f"missing tools: demo__{used}"
    }
    assert Skill.objects.get(pk=skill.pk).status == "failed"


@pytest.mark.django_db
def test_demo_skill_needs_two_tools(gateway):
    assert demo_skill_ensure(gateway=gateway) is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_run_demo_creates_the_demo_skill_once(tmp_path):
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DEBUG": "1",
        "TOOLSYNC_VAR_DIR": str(tmp_path),
        "CELERY_BROKER_URL": "filesystem://",
    }
    argv = [sys.executable, "manage.py", "run_demo", "--no-serve"]
    for _ in range(2):
        result = subprocess.run(
            [*argv, "--mcp-port", str(_free_port())],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"Demo skill {DEMO_SKILL} names demo__" in result.stdout
        assert "(status: ok)" in result.stdout
    with sqlite3.connect(tmp_path / "toolsync.sqlite3") as db:
        rows = db.execute(
            "SELECT name, status FROM skills_skill WHERE name = ?", [DEMO_SKILL]
        ).fetchall()
    assert rows == [(DEMO_SKILL, "ok")]
