"""`manage.py add_gateway`: register an MCP server without the API."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from gateways.models import Gateway
from gateways.services import GatewayConfigError, gateway_create, tenant_get_or_create


class Command(BaseCommand):
    help = "Register a gateway (an MCP server) in a tenant; prints its id."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--tenant", required=True, help="tenant slug (created when missing)"
        )
        parser.add_argument("--name", required=True)
        parser.add_argument(
            "--prefix",
            required=True,
            help="unique per tenant; tools show as <prefix>__<tool>",
        )
        parser.add_argument(
            "--transport",
            default="streamable_http",
            choices=[t.value for t in Gateway.Transport],
        )
        parser.add_argument("--url", default="")
        parser.add_argument(
            "--command", dest="server_command", default="", help="stdio command"
        )
        parser.add_argument(
            "--arg",
            dest="server_args",
            action="append",
            default=[],
            help="stdio argument (repeat)",
        )
        parser.add_argument(
            "--env", action="append", default=[], help="stdio env NAME=VALUE (repeat)"
        )
        parser.add_argument(
            "--auth-type", default="none", choices=[a.value for a in Gateway.AuthType]
        )
        parser.add_argument("--token", help="bearer token (stored encrypted)")
        parser.add_argument(
            "--header",
            action="append",
            default=[],
            help="auth header NAME=VALUE (repeat)",
        )
        parser.add_argument(
            "--refresh-interval",
            type=int,
            help="seconds; default is the global setting",
        )
        parser.add_argument("--no-auto-apply", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        tenant = tenant_get_or_create(slug=opts["tenant"])
        try:
            gateway = gateway_create(
                tenant=tenant,
                name=opts["name"],
                prefix=opts["prefix"],
                transport=opts["transport"],
                url=opts["url"],
                command=opts["server_command"],
                args=opts["server_args"],
                env=_pairs(opts["env"]),
                auth_type=opts["auth_type"],
                auth_token=opts.get("token"),
                auth_headers=_pairs(opts["header"]),
                refresh_interval=opts.get("refresh_interval"),
                auto_apply=not opts["no_auto_apply"],
            )
        except (ValidationError, GatewayConfigError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"registered gateway {gateway.pk} ({gateway.prefix}) in tenant {tenant.slug}"
        )
        self.stdout.write(str(gateway.pk))


def _pairs(values: list[str]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name:
            raise CommandError(f"expected NAME=VALUE, got {value!r}")
        pairs[name] = rest
    return pairs
