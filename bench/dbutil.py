"""Benchmark databases: each benchmark gets its own, dropped and re-created."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
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
