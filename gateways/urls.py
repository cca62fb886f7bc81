"""Routes of the gateways API, mounted at `/api/gateways/` (SPEC 6)."""

from django.urls import path

from gateways.views import GatewayViewSet

app_name = "gateways"

urlpatterns = [
    path("", GatewayViewSet.as_view({"get": "list", "post": "create"}), name="list"),
    path(
        "<int:pk>/",
        GatewayViewSet.as_view(
            {"get": "retrieve", "patch": "partial_update", "delete": "destroy"}
        ),
        name="detail",
    ),
    # SPEC 6 spells this one without a trailing slash.
    path(
        "<int:pk>/tools/refresh",
        GatewayViewSet.as_view({"post": "refresh"}),
        name="refresh",
    ),
]
