"""The command line and process lifecycle, without the fork server."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from testservers.catalog import Catalog
from testservers.harness import PROJECT_ROOT, start_server


def test_cli_ready_file_state_file_and_prompt_sigterm(tmp_path: Path) -> None:
    ready, state = tmp_path / "ready.json", tmp_path / "state.json"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    args = ["--port", "0", "--ready-file", str(ready), "--state-file", str(state)]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testservers",
            "--transport",
            "http",
            "--tools",
            "7",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        info = json.loads(ready.read_text())
        assert info["pid"] == proc.pid
        assert line.strip() == f"READY http://127.0.0.1:{info['port']}/mcp"
        assert len(Catalog.from_file(state).tools) == 7
        # An open SSE stream must not hold up shutdown.
        with socket.create_connection(("127.0.0.1", info["port"])) as sse:
            host = f"127.0.0.1:{info['port']}".encode()
            sse.sendall(b"GET /sse HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
            assert sse.recv(4096).startswith(b"HTTP/1.1 200")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_start_server_without_fork_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TESTSERVERS_NO_FORKSERVER", "1")
    with start_server(tools=3, workdir=tmp_path) as server:
        assert len(server.state()["names"]) == 3
        server.restart()
        assert len(server.state()["names"]) == 3
    assert not server.running


def test_startup_failure_names_the_log(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"server\.log(.|\n)*invalid choice"):
        start_server(era="bogus", workdir=tmp_path)
