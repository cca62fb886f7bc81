"""The lease is correct on SQLite too (the embedded default), across processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_processes_never_hold_the_lease_at_once_on_sqlite(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.refresh.sqlite_lease_race",
            str(tmp_path),
            "4",
            "25",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    intervals = sorted(json.loads(result.stdout.strip().splitlines()[-1]))
    assert len(intervals) >= 10, "the race should let many acquisitions through"
    for (_, end), (start, _) in zip(intervals, intervals[1:], strict=False):
        assert start >= end, "two processes held the lease at the same time"
