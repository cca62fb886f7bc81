"""The admin pages work on SQLite too, the embedded database `make run` uses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gateway_list_page_and_run_render_on_sqlite(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.admin.sqlite_pages", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(ROOT),
            "TOOLSYNC_ENCRYPTION_KEY": "uE7o9lqjR0h1a1Y1bVb1Yq7wqgYx8m6b2Y0z8s3Yw1E=",
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    pages = json.loads(result.stdout.strip().splitlines()[-1])
    assert pages == {
        "list": 200,
        "change": 200,
        "run": 200,
        "list_has_counts": True,
        "list_has_tools": True,
    }
