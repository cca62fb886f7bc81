"""Top-level URL configuration."""

from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from project.api.errors import unknown_api_path
from project.api.views import HealthzView
from refresh.metrics_view import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics", metrics_view, name="metrics"),
    path("healthz", HealthzView.as_view(), name="healthz"),
    # HTTP API (SPEC 6).
    path("api/gateways/", include("gateways.urls")),
    path("api/tools/", include("tools.urls")),
    path("api/refresh-runs/", include("refresh.urls")),
    path("api/skills/", include("skills.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path(
        "api/docs/",
        SpectacularSwaggerView.as_view(url_name="api-schema"),
        name="api-docs",
    ),
    # Session login for the browsable API (tokens need none of this).
    path("api/auth/", include("rest_framework.urls")),
    # Last: any other /api/ path answers the envelope's 404, in DEBUG too.
    re_path(r"^api/", unknown_api_path),
]

# JSON envelopes for unknown `/api/` paths and unhandled errors there; the
# admin keeps Django's pages.
handler404 = "project.api.errors.not_found"
handler500 = "project.api.errors.server_error"
