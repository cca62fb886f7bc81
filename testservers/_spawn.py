"""Spawning test server processes: through a fork server, or as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

__all__ = ["PROJECT_ROOT", "ServerProcess", "child_env", "warm_up"]

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The directory holding the `testservers` package (put on the child's PYTHONPATH)."""


class _ForkServer:
    """Client of `testservers.forkserver`, one per harness process."""

    _lock = threading.Lock()
    _instance: _ForkServer | None = None

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "testservers.forkserver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=PROJECT_ROOT,
            env=child_env(),
        )
        self.owner = os.getpid()

    @staticmethod
    def enabled() -> bool:
        """Whether fork servers can be used here (POSIX, not disabled by env)."""
        return os.name == "posix" and not os.environ.get("TESTSERVERS_NO_FORKSERVER")

    @classmethod
    def _ensure(cls) -> _ForkServer:
        fs = cls._instance
        if fs is None or fs.proc.poll() is not None or fs.owner != os.getpid():
            fs = cls._instance = cls()
        return fs

    @classmethod
    def warm_up(cls) -> None:
        """Start the fork server now (it preloads in the background)."""
        if cls.enabled():
            with cls._lock:
                cls._ensure()

    @classmethod
    def spawn(cls, args: list[str], log: Path) -> int | None:
        """Fork a server with `args`; None when fork servers are unavailable."""
        if not cls.enabled():
            return None
        with cls._lock:
            fs = cls._ensure()
            assert fs.proc.stdin is not None and fs.proc.stdout is not None
            request = json.dumps({"args": args, "log": str(log)}) + "\n"
            try:
                fs.proc.stdin.write(request.encode())
                fs.proc.stdin.flush()
                reply = fs.proc.stdout.readline()
            except (BrokenPipeError, OSError):
                reply = b""
            if not reply:
                cls._instance = None
                return None
            return int(json.loads(reply)["pid"])


class ServerProcess:
    """A server process, started by the fork server or as a plain subprocess."""

    def __init__(self, args: list[str], log: Path) -> None:
        self._popen: subprocess.Popen[bytes] | None = None
        self._log: BinaryIO | None = None
        pid = _ForkServer.spawn(args, log)
        if pid is None:
            self._log = log.open("ab")
            self._popen = subprocess.Popen(
                [sys.executable, "-m", "testservers", *args],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=PROJECT_ROOT,
                env=child_env(),
            )
            pid = self._popen.pid
        self.pid = pid

    def alive(self) -> bool:
        if self._popen is not None:
            return self._popen.poll() is None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def signal(self, sig: int) -> None:
        if self.alive():
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float) -> bool:
        """Wait for the process to end; False on timeout."""
        if self._popen is not None:
            try:
                self._popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            if self._log is not None:
                self._log.close()
                self._log = None
            return True
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True


def warm_up() -> None:
    """Start the harness's fork server early so the first `start_server` is fast.

    Servers are forked from one pre-imported process (importing the SDK
    takes over a second); set TESTSERVERS_NO_FORKSERVER=1 to spawn each
    server as a fresh interpreter instead.
    """
    _ForkServer.warm_up()


def child_env() -> dict[str, str]:
    """This process's environment with the project root on PYTHONPATH."""
    env = dict(os.environ)
    paths = [str(PROJECT_ROOT), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    return env
