"""`manage.py refresh_gateway <id|prefix>`: refresh one gateway and print the report."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from gateways.selectors import gateway_by_id_or_prefix
from refresh.exceptions import RefreshError
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.report import render_report_text
from refresh.services import refresh_gateway


class Command(BaseCommand):
    help = (
        "Re-discover a gateway's tools and print what moved (a dry run unless --apply)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("gateway", help="gateway id or prefix")
        parser.add_argument(
            "--tenant", help="tenant slug, when a prefix exists in several tenants"
        )
        parser.add_argument("--apply", action="store_true", help="write the changes")
        parser.add_argument(
            "--apply-effect", action="store_true", help="take effects from server hints"
        )
        parser.add_argument("--deactivate-missing", action="store_true")
        parser.add_argument("--reactivate-returning", action="store_true")
        parser.add_argument("--include-prompts", action="store_true")
        parser.add_argument("--include-resources", action="store_true")
        parser.add_argument(
            "--probe-credential",
            help="credential for gateways that authenticate as the caller (used once, never stored)",
        )
        parser.add_argument("--json", action="store_true", help="print the JSON report")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            gateway = gateway_by_id_or_prefix(
                opts["gateway"], tenant_slug=opts.get("tenant")
            )
        except LookupError as exc:
            raise CommandError(str(exc)) from None
        options = RefreshOptions(
            apply=opts["apply"],
            apply_effect=opts["apply_effect"],
            deactivate_missing=opts["deactivate_missing"],
            reactivate_returning=opts["reactivate_returning"],
            include_prompts=opts["include_prompts"],
            include_resources=opts["include_resources"],
        )
        try:
            run = refresh_gateway(
                gateway=gateway,
                trigger=RefreshRun.Trigger.CLI,
                options=options,
                probe_credential=opts.get("probe_credential"),
            )
        except RefreshError as exc:
            if opts["json"]:
                self.stdout.write(
                    json.dumps(
                        {
                            "error": {
                                "code": exc.code,
                                "message": exc.message,
                                "details": exc.details,
                            }
                        }
                    )
                )
            raise CommandError(f"{exc.code}: {exc.message}") from None
        if opts["json"]:
            self.stdout.write(json.dumps(run.report, indent=2, sort_keys=True))
        else:
            self.stdout.write(render_report_text(run.report))
        if run.status != RefreshRun.Status.SUCCEEDED:
            raise CommandError(f"refresh {run.status}: {run.reason}")
