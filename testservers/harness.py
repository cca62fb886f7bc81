"""Start and drive test servers from tests and benchmarks.

`start_server()` runs an HTTP test server subprocess and returns a
`TestServer` whose methods call the server's control API (standard library
only, so any thread or process can use it). `stdio_server()` returns a
`StdioTestServer`: a state file plus the command line an MCP client spawns;
its methods edit the state file, which the running stdio server follows.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Self

from testservers._spawn import PROJECT_ROOT, ServerProcess, warm_up
from testservers.catalog import Catalog, atomic_write_text, normalize_fault
from testservers.generators import generate_prompts, generate_resources, generate_tools

__all__ = [
    "PROJECT_ROOT",
    "StdioTestServer",
    "TestServer",
    "TestServerError",
    "start_server",
    "stdio_server",
    "warm_up",
]


_CONTROL_TIMEOUT = 30.0
_LOG_TAIL = 4000
_KILL_WAIT = 10.0


class TestServerError(RuntimeError):
    """A test server failed to start or its control API answered an error."""


def _fault_spec(
    kind: str,
    page: int | None,
    seconds: float | None,
    times: int | None,
    method: str,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"kind": kind, "page": page, "method": method}
    if seconds is not None:
        spec["seconds"] = seconds
    if times is not None:
        spec["times"] = times
    return spec


class TestServer:
    """A running HTTP test server subprocess and its control client."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        args: list[str],
        *,
        state_file: Path,
        workdir: Path,
        owns_workdir: bool,
        timeout: float,
    ) -> None:
        self._args = args
        self.state_file = state_file
        self.workdir = workdir
        self._owns_workdir = owns_workdir
        self._timeout = timeout
        self._proc: ServerProcess | None = None
        self.port = 0
        self.pid = 0
        self.log_file = workdir / "server.log"

    # -- lifecycle ------------------------------------------------------------

    @property
    def url(self) -> str:
        """The Streamable HTTP endpoint."""
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def sse_url(self) -> str:
        """The SSE transport endpoint."""
        return f"http://127.0.0.1:{self.port}/sse"

    @property
    def base_url(self) -> str:
        """Scheme, host and port, without a path."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the subprocess is alive."""
        return self._proc is not None and self._proc.alive()

    def _spawn(self, port: int) -> None:
        ready = self.workdir / "ready.json"
        ready.unlink(missing_ok=True)
        args = [*self._args, "--port", str(port), "--ready-file", str(ready)]
        self._proc = ServerProcess(args, self.log_file)
        deadline = time.monotonic() + self._timeout
        while not ready.exists():
            if not self._proc.alive():
                raise TestServerError(self._failure("exited during startup"))
            if time.monotonic() > deadline:
                self.kill()
                raise TestServerError(self._failure("did not become ready"))
            time.sleep(0.01)
        info = json.loads(ready.read_text())
        self.port, self.pid = int(info["port"]), int(info["pid"])

    def _failure(self, what: str) -> str:
        tail = ""
        if self.log_file.exists():
            tail = self.log_file.read_text(errors="replace")[-_LOG_TAIL:]
        return f"test server {what}; log {self.log_file}:\n{tail}"

    def kill(self) -> None:
        """SIGKILL the server by PID and wait for it to die."""
        if self._proc is not None:
            self._proc.signal(signal.SIGKILL)
            if not self._proc.wait(_KILL_WAIT):
                raise TestServerError(f"test server pid {self._proc.pid} did not die")

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL if it lingers)."""
        if self._proc is not None:
            self._proc.signal(signal.SIGTERM)
            if not self._proc.wait(3.0):
                self.kill()

    def restart(self) -> None:
        """Kill the server and start it again on the same port and state file."""
        self.kill()
        self._spawn(self.port)

    def close(self) -> None:
        """Stop the server and delete its working directory if the harness made it."""
        self.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- control API ----------------------------------------------------------

    def control(self, path: str, body: dict[str, Any] | None = None) -> Any:
        """Call `/control/<path>`: GET without a body, POST with one."""
        url = f"{self.base_url}/control/{path}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            url,
            data=data,
            method="POST" if data is not None else "GET",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=_CONTROL_TIMEOUT) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise TestServerError(f"{url} answered {exc.code}: {detail}") from None

    def state(self) -> dict[str, Any]:
        """Names, generation, counts and faults of the live catalog."""
        return self.control("state")

    def snapshot(self) -> dict[str, Any]:
        """The full raw catalog (tools, prompts, resources, faults)."""
        return self.control("snapshot")

    def set_tools(self, tools: list[dict[str, Any]]) -> None:
        """Replace the tools with `tools`, stored raw (invalid entries allowed)."""
        self.control("set_tools", {"tools": tools})

    def add_tools(self, tools: list[dict[str, Any]]) -> None:
        """Append raw `tools`."""
        self.control("add_tools", {"tools": tools})

    def remove_tools(self, names: list[str]) -> list[str]:
        """Remove tools by name; returns the names removed."""
        return self.control("remove_tools", {"names": list(names)})["removed"]

    def set_prompts(self, prompts: list[dict[str, Any]]) -> None:
        """Replace the prompts, stored raw."""
        self.control("set_prompts", {"prompts": prompts})

    def set_resources(self, resources: list[dict[str, Any]]) -> None:
        """Replace the resources, stored raw."""
        self.control("set_resources", {"resources": resources})

    def mutate(self, **kw: Any) -> dict[str, Any]:
        """Mutate the catalog (`change`, `add`, `remove`, `seed`, `kind`)."""
        return self.control("mutate", kw)

    def fault(
        self,
        kind: str,
        page: int | None = None,
        seconds: float | None = None,
        times: int | None = None,
        *,
        method: str = "tools/list",
    ) -> None:
        """Arm a fault (see `testservers.catalog.FAULT_KINDS`)."""
        self.control("fault", _fault_spec(kind, page, seconds, times, method))

    def clear_faults(self, kind: str | None = None) -> None:
        """Disarm one fault kind, or all faults."""
        self.control("clear_faults", {"kind": kind} if kind else {})

    def notify(
        self, kinds: tuple[str, ...] | list[str] = ("tools",), count: int = 1
    ) -> int:
        """Send list_changed notifications; returns how many sessions got them."""
        body = {"kinds": list(kinds), "count": count}
        return int(self.control("notify", body)["sessions"])

    def seen_auth(self) -> list[dict[str, Any]]:
        """Authorization (and `x-*` / required) headers seen on MCP requests."""
        return self.control("seen_auth")

    def clear_seen_auth(self) -> None:
        """Forget the recorded MCP request headers."""
        self.control("clear_seen_auth", {})


def start_server(
    *,
    tools: int = 10,
    page_size: int = 100,
    seed: int = 0,
    era: str = "both",
    require_bearer: str | None = None,
    require_header: tuple[str, str] | None = None,
    state_file: Path | None = None,
    prompts: int = 0,
    resources: int = 0,
    mutate_every: float | None = None,
    notify_on_mutate: bool = False,
    notify_capable: bool = True,
    port: int = 0,
    workdir: Path | None = None,
    timeout: float = 15.0,
) -> TestServer:
    """Start an HTTP test server subprocess and wait until it listens.

    Without `state_file`, a fresh one is created in a temporary working
    directory, so `restart()` always keeps the catalog. An existing
    `state_file` is loaded instead of generating a catalog.
    """
    owns = workdir is None
    workdir = (
        Path(tempfile.mkdtemp(prefix="testserver-")) if workdir is None else workdir
    )
    workdir.mkdir(parents=True, exist_ok=True)
    state_file = state_file if state_file is not None else workdir / "state.json"
    args = [
        "--transport", "http",
        "--tools", str(tools),
        "--prompts", str(prompts),
        "--resources", str(resources),
        "--page-size", str(page_size),
        "--seed", str(seed),
        "--era", era,
        "--state-file", str(state_file),
    ]  # fmt: skip
    if require_bearer is not None:
        args += ["--require-bearer", require_bearer]
    if require_header is not None:
        args += ["--require-header", f"{require_header[0]}={require_header[1]}"]
    if mutate_every is not None:
        args += ["--mutate-every", str(mutate_every)]
    if notify_on_mutate:
        args.append("--notify-on-mutate")
    if not notify_capable:
        args.append("--no-list-changed")
    server = TestServer(
        args, state_file=state_file, workdir=workdir, owns_workdir=owns, timeout=timeout
    )
    try:
        server._spawn(port)
    except BaseException:
        server.kill()
        raise
    return server


class StdioTestServer:
    """A stdio test server's state file plus the command line that serves it.

    Not a process: pass `command`/`args`/`env` to `StdioServerParameters`
    (see `params()`). Editing methods rewrite the state file atomically; a
    running server notices within ~0.1 s and sends list_changed for the
    kinds that changed.
    """

    def __init__(
        self,
        state_file: Path,
        *,
        page_size: int = 100,
        era: str = "both",
        notify_capable: bool = True,
    ) -> None:
        self.state_file = state_file
        self.command = sys.executable
        self.args = [
            "-m", "testservers",
            "--transport", "stdio",
            "--state-file", str(state_file),
            "--page-size", str(page_size),
            "--era", era,
        ]  # fmt: skip
        if not notify_capable:
            self.args.append("--no-list-changed")
        # stdio children get only a minimal environment from the SDK.
        self.env = {"PYTHONPATH": str(PROJECT_ROOT), "PYTHONUNBUFFERED": "1"}
        self.cwd = str(PROJECT_ROOT)

    def params(self) -> Any:
        """`mcp.StdioServerParameters` for this server."""
        from mcp import StdioServerParameters

        return StdioServerParameters(
            command=self.command, args=list(self.args), env=dict(self.env), cwd=self.cwd
        )

    def _read(self) -> dict[str, Any]:
        return json.loads(self.state_file.read_text(encoding="utf-8"))

    def _edit(self, change: Any) -> Any:
        data = self._read()
        catalog = Catalog()
        catalog.load(data)
        result = change(catalog)
        out = catalog.snapshot()
        if "notify" in data:
            out["notify"] = data["notify"]
        atomic_write_text(self.state_file, json.dumps(out, ensure_ascii=False))
        return result

    def state(self) -> dict[str, Any]:
        """Names, generation, counts and faults from the state file."""
        data = self._read()
        catalog = Catalog()
        catalog.load(data)
        return {
            "generation": catalog.generation,
            "counts": catalog.counts(),
            "names": catalog.names("tools"),
            "prompt_names": catalog.names("prompts"),
            "resource_uris": catalog.names("resources"),
            "faults": catalog.faults,
        }

    def snapshot(self) -> dict[str, Any]:
        """The raw state file contents."""
        return self._read()

    def set_tools(self, tools: list[dict[str, Any]]) -> None:
        """Replace the tools with raw `tools`."""
        self._edit(lambda c: c.set_tools(tools))

    def add_tools(self, tools: list[dict[str, Any]]) -> None:
        """Append raw `tools`."""
        self._edit(lambda c: c.add_tools(tools))

    def remove_tools(self, names: list[str]) -> list[str]:
        """Remove tools by name; returns the names removed."""
        return self._edit(lambda c: c.remove_tools(names))

    def set_prompts(self, prompts: list[dict[str, Any]]) -> None:
        """Replace the prompts."""
        self._edit(lambda c: c.set_prompts(prompts))

    def set_resources(self, resources: list[dict[str, Any]]) -> None:
        """Replace the resources."""
        self._edit(lambda c: c.set_resources(resources))

    def mutate(self, **kw: Any) -> dict[str, Any]:
        """Mutate the catalog (`change`, `add`, `remove`, `seed`, `kind`)."""
        return self._edit(lambda c: c.mutate(**kw))

    def fault(
        self,
        kind: str,
        page: int | None = None,
        seconds: float | None = None,
        times: int | None = None,
        *,
        method: str = "tools/list",
    ) -> None:
        """Arm a fault in the state file."""
        spec = normalize_fault(_fault_spec(kind, page, seconds, times, method))
        self._edit(lambda c: c.set_fault(spec))

    def clear_faults(self, kind: str | None = None) -> None:
        """Disarm one fault kind, or all faults."""
        self._edit(lambda c: c.clear_faults(kind))

    def notify(
        self, kinds: tuple[str, ...] | list[str] = ("tools",), count: int = 1
    ) -> None:
        """Ask the running server to send list_changed without changing content."""
        data = self._read()
        previous = (data.get("notify") or {}).get("seq") or 0
        data["notify"] = {"seq": previous + 1, "kinds": list(kinds), "count": count}
        atomic_write_text(self.state_file, json.dumps(data, ensure_ascii=False))


def stdio_server(
    *,
    tools: int = 10,
    page_size: int = 100,
    seed: int = 0,
    era: str = "both",
    state_file: Path | None = None,
    prompts: int = 0,
    resources: int = 0,
    notify_capable: bool = True,
) -> StdioTestServer:
    """Create (or reuse) a state file and return how to spawn a stdio server on it.

    An existing `state_file` is kept as is; otherwise a generated catalog is
    written to it (to a new temporary file when `state_file` is None).
    """
    if state_file is None:
        state_file = Path(tempfile.mkdtemp(prefix="testserver-stdio-")) / "state.json"
    if not state_file.exists():
        catalog = Catalog(
            generate_tools(tools, seed),
            generate_prompts(prompts, seed),
            generate_resources(resources, seed),
        )
        catalog.save(state_file)
    return StdioTestServer(
        state_file, page_size=page_size, era=era, notify_capable=notify_capable
    )
