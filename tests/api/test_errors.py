"""One error envelope for every failure under /api/, 4xx and 5xx alike."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from tests.api.conftest import World, error_of

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path",
    ["/api/nothing-here/", "/api/tools/abc/", "/api/gateways/1/tools/", "/api/"],
)
@pytest.mark.parametrize("debug", [False, True])  # `make run` runs with DEBUG
def test_unknown_api_paths_answer_the_envelope(world: World, path, debug):
    with override_settings(DEBUG=debug):
        for client in (world.client("admin"), APIClient(enforce_csrf_checks=True)):
            for method in ("get", "post", "delete"):
                response = getattr(client, method)(path)
                assert response.status_code == 404, (method, path)
                assert response["Content-Type"] == "application/json"
                assert error_of(response)["code"] == "not_found"


def test_a_path_missing_its_slash_says_which_exists(world: World):
    response = world.client("admin").post("/api/gateways", {}, format="json")
    assert response.status_code == 404
    assert error_of(response)["details"] == {"did_you_mean": "/api/gateways/"}


def test_paths_outside_the_api_keep_django_pages(world: World):
    with override_settings(DEBUG=False):
        response = APIClient().get("/no-such-page/")
    assert response.status_code == 404
    assert "application/json" not in response["Content-Type"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("put", "/api/gateways/{gw}/"),
        ("delete", "/api/tools/{tool}/"),
        ("post", "/api/tools/"),
        ("get", "/api/tools/refresh"),
        ("patch", "/api/refresh-runs/{run}/"),
    ],
)
def test_methods_not_allowed_answer_405_in_the_envelope(world: World, method, path):
    path = path.format(gw=world.gateway.pk, tool=world.tools[0].pk, run=world.run.pk)
    response = getattr(world.client("owner"), method)(path, {}, format="json")
    assert response.status_code == 405
    assert error_of(response)["code"] == "method_not_allowed"


def test_unacceptable_accept_header_is_406(world: World):
    response = world.client("viewer").get("/api/tools/", HTTP_ACCEPT="text/csv")
    assert response.status_code == 406
    assert error_of(response)["code"] == "not_acceptable"


def test_an_unhandled_error_is_a_500_envelope_without_its_text(
    world: World, monkeypatch
):
    def explode(*args, **kwargs):
        raise RuntimeError("db password is hunter2")

    monkeypatch.setattr("tools.selectors.tool_list_api", explode)
    client = world.client("viewer")
    client.raise_request_exception = False
    response = client.get("/api/tools/")
    assert response.status_code == 500
    error = error_of(response)
    assert error["code"] == "server_error"
    assert "hunter2" not in response.content.decode()


def test_django_level_500_under_api_is_the_envelope(rf):
    from project.api.errors import server_error

    response = server_error(rf.get("/api/tools/"))
    assert response.status_code == 500
    assert json.loads(response.content)["error"]["code"] == "server_error"
    assert server_error(rf.get("/admin/"))["Content-Type"].startswith("text/html")


def test_validation_errors_name_every_field_with_dotted_paths(world: World):
    response = world.client("admin").post(
        "/api/gateways/",
        {
            "tenant": "acme",
            "name": "",
            "prefix": "-bad-",
            "url": "http://127.0.0.1:9/mcp",
            "args": "not-a-list",
            "surprise": 1,
        },
        format="json",
    )
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "validation_error"
    fields = {e["field"] for e in error["details"]["errors"]}
    assert fields == {"surprise"}  # unknown fields are refused before anything else
    response = world.client("admin").post(
        "/api/gateways/",
        {"tenant": "acme", "name": "", "prefix": "-bad-", "args": "x"},
        format="json",
    )
    fields = {e["field"] for e in error_of(response)["details"]["errors"]}
    assert fields == {"name", "prefix", "args"}
    assert error_of(response)["message"].startswith("The request is invalid:")


def test_healthz(world: World):
    response = APIClient().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok"}


def test_oversized_body_is_413_not_a_crash(world: World):
    client = world.client("member")
    body = json.dumps({"probe_credential": "x" * 3_000_000})
    response = client.generic(
        "POST",
        f"/api/gateways/{world.gateway.pk}/tools/refresh",
        body,
        content_type="application/json",
    )
    assert response.status_code == 413
    assert error_of(response)["code"] == "request_too_large"


def test_undecodable_body_is_400(world: World):
    response = world.client("member").generic(
        "POST",
        f"/api/gateways/{world.gateway.pk}/tools/refresh",
        b"\xff\xfe{",
        content_type="application/json",
    )
    assert response.status_code == 400
    assert error_of(response)["code"] == "parse_error"
