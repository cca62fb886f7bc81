"""Secrets never leave: gateway tokens and headers, and probe credentials, appear in no
response body, no log record, no stored report or run, across refreshes that
succeed and refreshes that fail."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from refresh.models import RefreshRun
from tests.api.conftest import World

pytestmark = pytest.mark.django_db

BEARER = "bearer-SECRET-7f3a9c"
HEADER = "header-SECRET-51be02"
CALLER = "caller-SECRET-d41d8c"
WRONG = "wrong-SECRET-0c4e77"
SECRETS = (BEARER, HEADER, CALLER, WRONG)
# Loggers that stay quiet at INFO in settings; opened up here to prove that
# even their debug output carries no secret.
CHATTY = ("httpx2", "httpcore2", "mcp", "django", "django.request", "django.db")


@pytest.fixture
def every_log_record(caplog: pytest.LogCaptureFixture) -> Any:
    caplog.set_level(logging.DEBUG)  # the root logger
    previous = {name: logging.getLogger(name).level for name in CHATTY}
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.DEBUG)
    yield caplog
    for name, level in previous.items():
        logging.getLogger(name).setLevel(level)


def rendered(record: logging.LogRecord) -> str:
    """Everything a handler could write for a record: message, args, traceback."""
    parts = [record.getMessage(), repr(record.args), record.exc_text or ""]
    if record.exc_info and record.exc_info[1] is not None:
        parts.append(repr(record.exc_info[1]))
        parts.append(logging.Formatter().formatException(record.exc_info))
    parts += [repr(v) for k, v in vars(record).items() if k not in ("msg", "args")]
    return "\n".join(parts)


def test_no_secret_in_any_response_log_or_run(
    world: World, mcp_server_factory, every_log_record
):
    bearer_server = mcp_server_factory(tools=3, require_bearer=BEARER)
    header_server = mcp_server_factory(tools=3, require_header=("X-Api-Key", HEADER))
    caller_server = mcp_server_factory(tools=3, require_bearer=CALLER)
    admin, member = world.client("admin"), world.client("member")
    member.raise_request_exception = False
    bodies: list[bytes] = []

    def call(client: Any, method: str, path: str, body: Any = None) -> Any:
        response = getattr(client, method)(path, body, format="json")
        bodies.append(response.content)
        return response

    gateways = {}
    for prefix, server, auth in (
        ("bearer", bearer_server, {"auth_type": "bearer", "auth_token": BEARER}),
        (
            "header",
            header_server,
            {"auth_type": "headers", "auth_headers": {"X-Api-Key": HEADER}},
        ),
        ("caller", caller_server, {"auth_type": "as_caller"}),
    ):
        response = call(
            admin,
            "post",
            "/api/gateways/",
            {"name": prefix, "prefix": prefix, "url": server.url, **auth},
        )
        assert response.status_code == 201, response.content
        gateways[prefix] = response.json()["id"]

    def refresh(prefix: str, body: dict[str, Any]) -> Any:
        return call(
            member, "post", f"/api/gateways/{gateways[prefix]}/tools/refresh", body
        )

    # Succeeding refreshes: dry run, apply, and by prefix.
    assert refresh("bearer", {}).status_code == 200
    assert refresh("bearer", {"apply": True}).status_code == 200
    assert refresh("header", {"apply": True}).status_code == 200
    assert (
        refresh("caller", {"apply": True, "probe_credential": CALLER}).status_code
        == 200
    )
    by_prefix = call(
        member,
        "post",
        "/api/tools/refresh",
        {"prefix": "caller", "probe_credential": CALLER},
    )
    assert by_prefix.status_code == 200

    # The secrets really went over the wire (so there was something to leak).
    assert {"authorization": f"Bearer {BEARER}"}.items() <= bearer_server.seen_auth()[
        -1
    ].items()
    assert any(
        seen["headers"].get("x-api-key") == HEADER for seen in header_server.seen_auth()
    )

    # Failing refreshes: wrong caller credential, a server that errors, a dead one.
    assert refresh("caller", {"probe_credential": WRONG}).status_code == 502
    header_server.fault("http_500", times=5)  # listing fails: read only in part
    partial = refresh("header", {})
    assert partial.status_code == 200 and partial.json()["complete"] is False
    header_server.clear_faults()
    patched = call(
        admin,
        "patch",
        f"/api/gateways/{gateways['header']}/",
        {"auth_headers": {"X-Api-Key": WRONG}},
    )
    assert patched.status_code == 200, patched.content
    assert refresh("header", {}).status_code == 502
    bearer_server.kill()
    assert refresh("bearer", {"apply": True}).status_code == 502
    # A secret in a rejected request is not echoed in the validation error.
    response = call(
        admin,
        "post",
        "/api/gateways/",
        {
            "name": "x",
            "prefix": "bad prefix",
            "url": "http://127.0.0.1:9/mcp",
            "auth_type": "bearer",
            "auth_token": BEARER + "\n",
        },
    )
    assert response.status_code == 422
    response = call(
        member,
        "post",
        f"/api/gateways/{gateways['caller']}/tools/refresh",
        {"probe_credential": CALLER * 10},
    )
    assert response.status_code == 422

    # Everything there is to read back.
    for path in (
        "/api/gateways/",
        *[f"/api/gateways/{pk}/" for pk in gateways.values()],
        "/api/refresh-runs/",
        *[
            f"/api/refresh-runs/{pk}/"
            for pk in RefreshRun.objects.values_list("pk", flat=True)
        ],
        "/api/tools/",
    ):
        assert call(admin, "get", path).status_code == 200

    assert len(bodies) > 20
    for body in bodies:
        for secret in SECRETS:
            assert secret.encode() not in body, (secret, body[:300])
    records = every_log_record.records
    assert any("refresh_run" in r.getMessage() for r in records), "nothing was logged"
    for record in records:
        text = rendered(record)
        for secret in SECRETS:
            assert secret not in text, (secret, record.name, record.getMessage()[:300])
    for run in RefreshRun.objects.all():
        stored = f"{run.options} {run.report} {run.reason} {run.summary}"
        for secret in SECRETS:
            assert secret not in stored, (secret, run.pk)
    assert RefreshRun.objects.filter(status="failed").count() == 3
