"""The command line: add_gateway and refresh_gateway."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from gateways.models import Gateway
from tools.models import Tool

pytestmark = pytest.mark.django_db


def cmd(*args):
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_add_then_refresh_dry_run_then_apply(mcp_server_factory):
    server = mcp_server_factory(tools=6)
    out = cmd(
        "add_gateway",
        "--tenant",
        "acme",
        "--name",
        "CRM",
        "--prefix",
        "crm",
        "--url",
        server.url,
    )
    gateway_id = int(out.strip().splitlines()[-1])
    assert Gateway.objects.get(pk=gateway_id).tenant.slug == "acme"
    text = cmd("refresh_gateway", "crm")
    assert "Summary: added 6" in text and "Dry run" in text
    assert Tool.objects.count() == 0
    report = json.loads(cmd("refresh_gateway", str(gateway_id), "--apply", "--json"))
    assert report["applied"] is True and report["summary"]["added"] == 6
    server.mutate(change=0.5, add=0, remove=0)
    text = cmd("refresh_gateway", "crm", "--apply")
    assert "updated" in text and "Summary: added 0, updated 3" in text


def test_unknown_gateway_and_unreachable_server_are_clear_errors(mcp_server_factory):
    with pytest.raises(CommandError, match="no gateway with id or prefix 'nope'"):
        cmd("refresh_gateway", "nope")
    server = mcp_server_factory(tools=1)
    cmd(
        "add_gateway",
        "--tenant",
        "t",
        "--name",
        "X",
        "--prefix",
        "x",
        "--url",
        server.url,
    )
    server.kill()
    with pytest.raises(CommandError, match="gateway_unreachable"):
        cmd("refresh_gateway", "x")


def test_add_gateway_validates(mcp_server_factory):
    with pytest.raises(CommandError, match="credentials in the URL"):
        cmd(
            "add_gateway",
            "--tenant",
            "t",
            "--name",
            "X",
            "--prefix",
            "x",
            "--url",
            "http://user:s3cret@127.0.0.1:1/mcp",
        )
    with pytest.raises(CommandError):
        cmd(
            "add_gateway",
            "--tenant",
            "t",
            "--name",
            "X",
            "--prefix",
            "bad prefix!",
            "--url",
            "http://127.0.0.1:1/mcp",
        )
    with pytest.raises(CommandError, match="needs auth_token"):
        cmd(
            "add_gateway",
            "--tenant",
            "t",
            "--name",
            "X",
            "--prefix",
            "y",
            "--url",
            "http://127.0.0.1:1/mcp",
            "--auth-type",
            "bearer",
        )
    with pytest.raises(CommandError, match="NAME=VALUE"):
        cmd(
            "add_gateway",
            "--tenant",
            "t",
            "--name",
            "X",
            "--prefix",
            "z",
            "--url",
            "http://127.0.0.1:1/mcp",
            "--header",
            "nonsense",
        )
