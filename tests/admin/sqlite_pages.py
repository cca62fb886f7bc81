"""Render the admin pages on SQLite, the embedded database of `make run`.

`python -m tests.admin.sqlite_pages VAR_DIR` migrates a fresh SQLite
database under VAR_DIR, writes a gateway with tools and finished runs (one
applied with counts, one failed), and prints one JSON object with each
page's status code and a few facts read from the pages. Run by
tests/admin/test_sqlite.py in a subprocess: the test suite itself runs on
PostgreSQL.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    os.environ.update(
        {
            "TOOLSYNC_VAR_DIR": sys.argv[1],
            "DEBUG": "1",
            "SECRET_KEY": "sqlite-pages",
            "DJANGO_SETTINGS_MODULE": "project.settings",
            "ALLOWED_HOSTS": "testserver",
        }
    )
    os.environ.pop("DATABASE_URL", None)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.urls import reverse
    from django.utils import timezone

    from gateways.services import gateway_create, tenant_get_or_create
    from tests import factories

    assert connection.vendor == "sqlite", connection.vendor
    call_command("migrate", verbosity=0)
    tenant = tenant_get_or_create(slug="demo")
    gateway = gateway_create(
        tenant=tenant, name="Demo", prefix="demo", url="http://127.0.0.1:9/mcp"
    )
    for name in ("a", "b", "c"):
        factories.ToolFactory(gateway=gateway, name=name)
    now = timezone.now()
    run = factories.RefreshRunFactory(
        gateway=gateway,
        trigger="admin",
        status="succeeded",
        applied=True,
        complete=True,
        options={"apply": True},
        summary={"added": 3, "updated": 1},
        finished_at=now,
        report={"applied": True, "summary": {"added": 3}, "items": [], "note": "ok"},
    )
    gateway.last_refresh_at = now
    gateway.save(update_fields=["last_refresh_at"])
    user = get_user_model().objects.create_superuser("root", "r@example.com", "pw")
    client = Client()
    client.force_login(user)
    listing = client.get(reverse("admin:gateways_gateway_changelist"))
    page = client.get(reverse("admin:gateways_gateway_change", args=[gateway.pk]))
    record = client.get(reverse("admin:refresh_refreshrun_change", args=[run.pk]))
    print(
        json.dumps(
            {
                "list": listing.status_code,
                "change": page.status_code,
                "run": record.status_code,
                "list_has_counts": "+3 ~1" in listing.content.decode(),
                "list_has_tools": f'gateway__id__exact={gateway.pk}">3<'
                in listing.content.decode(),
            }
        )
    )


if __name__ == "__main__":
    main()
