"""A fork server that starts HTTP test servers without re-importing the SDK.

Importing the MCP SDK takes over a second (pydantic model construction), so
the harness keeps one pre-imported process and asks it to fork a server per
`start_server()`. Protocol: one JSON object per line on stdin,
`{"args": [...], "log": "/path"}`, answered on stdout with `{"pid": N}`.
The fork server exits when its stdin closes; its children are killed when it
dies (Linux `PR_SET_PDEATHSIG`), so a crashed test run leaves no servers.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import sys
from typing import Any

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _child(request: dict[str, Any], parent: int) -> None:
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        _die_with_parent(parent)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(devnull)
        from testservers.__main__ import main

        main(request["args"])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception:
        logging.getLogger(__name__).exception("test server crashed")
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> None:
    """Answer fork requests from stdin until it closes."""
    # Preload everything a server imports, including uvicorn's lazy imports.
    import uvicorn.lifespan.on
    import uvicorn.loops.asyncio
    import uvicorn.protocols.http.h11_impl  # noqa: F401

    import testservers.__main__  # noqa: F401

    # Ignoring SIGCHLD makes the kernel reap children at once, so a killed
    # server's PID disappears and the harness can wait for it by polling.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    me = os.getpid()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            reply: dict[str, Any] = {"error": str(exc)}
        else:
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(request, me)
            reply = {"pid": pid}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
