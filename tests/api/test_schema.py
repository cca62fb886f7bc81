"""The OpenAPI 3 document is complete: every routed endpoint, body and error status."""

from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient

from tests.api.test_matrix import routed_endpoints

pytestmark = pytest.mark.django_db

# Routes that are not part of the API's contract document.
NOT_DOCUMENTED = {
    "^api/",  # the catch-all 404
    "api/schema/",
    "api/docs/",
    "api/auth/login/",
    "api/auth/logout/",
    "metrics",
}


@pytest.fixture(scope="module")
def schema(django_db_blocker) -> dict:
    with django_db_blocker.unblock():
        response = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return response.json()


def openapi_path(route: str) -> str:
    return "/" + re.sub(r"<int:(\w+)>", r"{\1}", route).replace("{pk}", "{id}")


def test_every_routed_endpoint_is_documented(schema):
    assert schema["openapi"].startswith("3.")
    documented = {
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method in operations
        if method in ("get", "post", "patch", "put", "delete")
    }
    routed = {
        (method, openapi_path(route))
        for method, route in routed_endpoints()
        if route not in NOT_DOCUMENTED
    }
    assert routed == documented


def operations(schema):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in ("get", "post", "patch", "put", "delete"):
                yield method, path, operation


def test_every_failure_status_answers_the_envelope(schema):
    for method, path, operation in operations(schema):
        responses = operation["responses"]
        public = path == "/healthz"
        expected = {"405", "406", "500"}
        if not public:
            expected |= {"401", "403"}
        if "{id}" in path:
            expected.add("404")
        if method in ("post", "patch"):
            expected |= {"400", "415", "422"}
        assert expected <= set(responses), (method, path, sorted(responses))
        for status, response in responses.items():
            if int(status) >= 400:
                ref = response["content"]["application/json"]["schema"]["$ref"]
                assert ref.endswith("/ErrorEnvelope"), (method, path, status)
                assert response["description"], (method, path, status)
        assert operation.get("security") != [] or public, (method, path)


def test_request_bodies_and_responses_are_described(schema):
    for method, path, operation in operations(schema):
        success = [s for s in operation["responses"] if s.startswith("2")]
        assert success, (method, path)
        for status in success:
            if status != "204":
                assert "content" in operation["responses"][status], (method, path)
        if method in ("post", "patch") and not path.endswith("/approve"):
            assert "requestBody" in operation, (method, path)


def test_refresh_endpoints_document_their_statuses_and_examples(schema):
    for path in ("/api/gateways/{id}/tools/refresh", "/api/tools/refresh"):
        operation = schema["paths"][path]["post"]
        assert {"200", "409", "422", "502"} <= set(operation["responses"])
        ok = operation["responses"]["200"]["content"]["application/json"]
        assert ok["schema"]["$ref"].endswith("/ToolRefreshReport")
        assert ok["examples"]["Report"]["value"]["summary"]["added"] == 1
        conflict = operation["responses"]["409"]["content"]["application/json"]
        example = next(iter(conflict["examples"].values()))["value"]
        assert example["error"]["code"] == "refresh_in_progress"
        body = operation["requestBody"]["content"]["application/json"]
        examples = {e["summary"]: e["value"] for e in body["examples"].values()}
        assert set(examples) == {"Dry run", "Apply, deactivating what disappeared"}
        for example in examples.values():
            # Every request example is itself a valid body of its endpoint.
            assert ("prefix" in example) == (path == "/api/tools/refresh"), example
    prefix_body = schema["components"]["schemas"]["PrefixRefreshRequestRequest"]
    assert "prefix" in prefix_body["required"]
    assert (
        "prefix"
        not in schema["components"]["schemas"]["RefreshRequestRequest"]["properties"]
    )


def test_secrets_are_write_only_in_the_schema(schema):
    components = schema["components"]["schemas"]
    read = components["Gateway"]["properties"]
    for secret in ("auth_token", "auth_headers", "env", "credentials_encrypted"):
        assert secret not in read
    assert "auth_token" in components["GatewayCreateRequest"]["properties"]
    assert schema["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "An API token from `manage.py create_api_token`.",
    }


def test_docs_page_serves_swagger_ui_from_this_server():
    response = APIClient().get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "/api/schema/" in html
    assert "swagger-ui" in html
    # Assets come from drf-spectacular-sidecar's static files, not a CDN.
    assert "cdn.jsdelivr" not in html and "unpkg.com" not in html


def test_documented_examples_are_valid_bodies(schema):
    from refresh.serializers import (
        PrefixRefreshRequestSerializer,
        RefreshRequestSerializer,
        ToolRefreshReportSerializer,
    )

    for path, request_serializer in (
        ("/api/gateways/{id}/tools/refresh", RefreshRequestSerializer),
        ("/api/tools/refresh", PrefixRefreshRequestSerializer),
    ):
        operation = schema["paths"][path]["post"]
        for example in operation["requestBody"]["content"]["application/json"][
            "examples"
        ].values():
            checked = request_serializer(data=example["value"])
            assert checked.is_valid(), (path, checked.errors)
        report = operation["responses"]["200"]["content"]["application/json"][
            "examples"
        ]["Report"]["value"]
        checked = ToolRefreshReportSerializer(data=report)
        assert checked.is_valid(), checked.errors


def test_schema_generates_without_warnings_and_validates(tmp_path):
    from django.core.management import call_command

    # --fail-on-warn: an unresolvable serializer field or a clashing enum name
    # would quietly degrade the document; --validate checks it against OpenAPI 3.
    call_command(
        "spectacular",
        "--validate",
        "--fail-on-warn",
        "--file",
        str(tmp_path / "schema.yaml"),
    )
    assert (tmp_path / "schema.yaml").read_text().startswith("openapi: 3.")
