"""Benchmark databases: each benchmark gets its own, dropped and re-created."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent


def fresh_database(name: str) -> str:
    """Drop and create database `name` next to DATABASE_URL's, migrate it, return its URL."""
    base = (
        os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/toolsync"
    )
    parts = urlsplit(base)
    url = urlunsplit(parts._replace(path=f"/{name}"))
    import psycopg

    admin = urlunsplit(parts._replace(path="/postgres", scheme="postgresql"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url, "SECRET_KEY": "bench", "DEBUG": "1"},
        check=True,
    )
    return url


def run_worker(
    module: str, *args: object, env: dict[str, str], what: str
) -> dict[str, Any]:
    """Run `python -m <module> <args>` (one scenario, its own process, so its
    peak RSS is its own) and return the JSON object it prints last."""
    out = subprocess.run(
        [sys.executable, "-m", module, *(str(a) for a in args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
