"""`make run`'s setup path works from nothing on the embedded SQLite default."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_run_demo_sets_up_refreshes_and_prints_the_report(tmp_path):
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DEBUG": "1",
        "TOOLSYNC_VAR_DIR": str(tmp_path),
        "CELERY_BROKER_URL": "filesystem://",
    }
    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "run_demo",
            "--no-serve",
            "--mcp-port",
            str(free_port()),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Summary: added 25" in result.stdout
    assert "Applied: 25 new tools created" in result.stdout
    assert (tmp_path / "toolsync.sqlite3").exists()
