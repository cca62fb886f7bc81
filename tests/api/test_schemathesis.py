"""schemathesis over the project's own OpenAPI schema, against a live server.

Every operation of `/api/schema/`, with valid (positive) and invalid (negative)
generated requests, authenticated with a real token as the tenant's owner,
against objects that exist (a gateway on a real MCP test server, its tools,
runs and skills) and ids that do not. Checks: no 5xx, and every response's
status, content type, headers and body match the schema. The number of
examples is bounded (TOOLSYNC_SCHEMATHESIS_EXAMPLES, default 12 per operation
and mode) so the whole run stays well under a minute or two.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateways.models import Gateway
from gateways.services import gateway_create
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.services import refresh_gateway
from skills.services import skill_create
from tests.api.conftest import World
from tools.models import Tool

EXAMPLES = int(os.environ.get("TOOLSYNC_SCHEMATHESIS_EXAMPLES", "12"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
@pytest.mark.slow
def test_every_operation_answers_as_the_schema_says(
    live_server: Any, world: World, mcp_server_factory: Any
) -> None:
    server = mcp_server_factory(tools=4, page_size=2)
    gateway = gateway_create(
        tenant=world.tenant, name="Live", prefix="live", url=server.url
    )
    refresh_gateway(
        gateway=gateway,
        trigger=RefreshRun.Trigger.API,
        options=RefreshOptions(apply=True),
    )
    tool = Tool.objects.filter(gateway=gateway).first()
    skill = skill_create(tenant=world.tenant, name="live/all", tools=["live__x"])
    real_ids = {
        "gateways": gateway.pk,
        "tools": tool.pk,
        "refresh-runs": RefreshRun.objects.filter(gateway=gateway).first().pk,
        "skills": skill.pk,
    }
    # Every gateway the caller can reach points at the live test server, so a
    # refresh never leaves this machine; generated bodies are pinned likewise
    # (below). The caller is no superuser: stdio (a command run here) stays 403.
    Gateway.objects.filter(tenant=world.tenant).update(url=server.url)
    from knox.models import AuthToken

    _, token = AuthToken.objects.create(user=world.users["owner"])
    headers = {"Authorization": f"Bearer {token}"}

    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/")
    session = requests.Session()
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        fixed: list[dict[str, int] | None] = [None]  # generated ids (mostly 404)
        if "{id}" in operation.path:  # /api/<collection>/{id}/...
            fixed.insert(0, {"id": real_ids[operation.path.split("/")[2]]})
        for path_parameters in fixed:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                strategy = operation.as_strategy(
                    generation_mode=mode, path_parameters=path_parameters
                )

                @settings(
                    max_examples=EXAMPLES,
                    deadline=None,
                    database=None,
                    derandomize=True,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=list(HealthCheck),
                )
                @given(case=strategy)
                def check(case: Any) -> None:
                    if isinstance(case.body, dict):
                        # Keep generated gateways on this machine's test server.
                        if "url" in case.body:
                            case.body["url"] = server.url
                        if "transport" in case.body:
                            case.body["transport"] = "streamable_http"
                    case.call_and_validate(
                        base_url=live_server.url,
                        session=session,
                        headers=headers,
                        checks=CHECKS,
                    )

                try:
                    check()
                except Unsatisfiable:
                    continue  # nothing to make invalid (an operation without inputs)
                except Exception as exc:  # noqa: BLE001 - collect every operation's failure
                    failures.append(
                        f"{operation.method.upper()} {operation.path} "
                        f"({mode}, ids={path_parameters}): {exc}"
                    )
    assert operations >= 15, "the schema lost operations"
    assert not failures, "\n\n".join(failures)
