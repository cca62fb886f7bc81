"""check_liveness against real test servers, in both eras, and against hostile ones."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from refresh.probe import ProbeError, ProbeTarget, check_liveness


def http(url: str, **kw) -> ProbeTarget:
    return ProbeTarget(transport="streamable_http", url=url, **kw)


@pytest.mark.parametrize(
    ("server_era", "remembered", "answered_era"),
    [
        ("both", "", "modern"),  # negotiation prefers the 2026 era
        ("both", "legacy", "legacy"),  # a remembered handshake era is used
        ("legacy", "", "legacy"),
        ("legacy", "modern", "legacy"),
        ("modern", "", "modern"),
        ("modern", "legacy", "modern"),  # stale remembered era: negotiates afresh
    ],
)
def test_liveness_speaks_the_servers_era(
    mcp_server_factory, server_era, remembered, answered_era
):
    server = mcp_server_factory(tools=2, era=server_era)
    live = check_liveness(http(server.url, era=remembered), 5.0)
    assert live.era == answered_era
    assert live.protocol_version
    assert live.latency_ms >= 0


def test_liveness_pings_a_stdio_server(stdio_server_factory):
    server = stdio_server_factory(tools=2)
    target = ProbeTarget(
        transport="stdio",
        command=server.command,
        args=tuple(server.args),
        env=server.env,
    )
    assert check_liveness(target, 15.0).era in ("legacy", "modern")


def test_liveness_of_a_dead_server_is_connect_failed(mcp_server_factory):
    server = mcp_server_factory(tools=1)
    url = server.url
    server.kill()
    with pytest.raises(ProbeError) as err:
        check_liveness(http(url), 3.0)
    assert err.value.code == "connect_failed" and err.value.retryable


def test_liveness_reports_refused_credentials_without_echoing_them(
    mcp_server_factory,
):
    server = mcp_server_factory(tools=1, require_bearer="right-token")
    with pytest.raises(ProbeError) as err:
        check_liveness(
            http(server.url, headers={"Authorization": "Bearer wrong-token-x"}), 3.0
        )
    assert err.value.code == "auth_failed"
    assert "wrong-token-x" not in err.value.message


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts TCP connections on 127.0.0.1 and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                accepted.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    sock.close()


def test_a_server_that_accepts_and_stalls_times_out_at_the_deadline(silent_server):
    with pytest.raises(ProbeError) as err:
        check_liveness(http(silent_server), 1.0)
    assert err.value.code == "timeout" and err.value.retryable


def _hostile(body: bytes, content_type: str, status: int = 200):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server API
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(405)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    return Handler


@pytest.fixture
def hostile_server():
    servers: list[HTTPServer] = []

    def start(body: bytes, content_type: str, status: int = 200) -> str:
        server = HTTPServer(("127.0.0.1", 0), _hostile(body, content_type, status))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}/mcp"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"\x00\x01garbage{{{", "application/json", 200),
        (b"<html><body>502 Bad Gateway</body></html>", "text/html", 200),
        (
            b'{"jsonrpc": "2.0", "id": 1, "result": "not an object"}',
            "application/json",
            200,
        ),
        (b"Internal Server Error", "text/plain", 500),
        (b"", "text/plain", 404),
    ],
)
def test_hostile_answers_are_a_clear_probe_error(
    hostile_server, body, content_type, status
):
    url = hostile_server(body, content_type, status)
    with pytest.raises(ProbeError) as err:
        check_liveness(http(url), 3.0)
    assert err.value.code == "protocol_error"
    assert err.value.message.startswith(("initialize failed", "no MCP endpoint"))
