"""`GET /metrics`: Prometheus text exposition (SPEC 6, 7)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from refresh.metrics import render_latest


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Every metric, summed over this machine's processes, plus the database gauges."""
    body, content_type = render_latest()
    return HttpResponse(body, content_type=content_type)
