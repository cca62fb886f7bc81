"""Routes of the tools API, mounted at `/api/tools/` (SPEC 6)."""

from django.urls import path

from refresh.views import ToolsRefreshView
from tools.views import ToolViewSet

app_name = "tools"

urlpatterns = [
    path("", ToolViewSet.as_view({"get": "list"}), name="list"),
    # SPEC 6 spells the action routes without a trailing slash.
    path("refresh", ToolsRefreshView.as_view(), name="refresh"),
    path(
        "<int:pk>/",
        ToolViewSet.as_view({"get": "retrieve", "patch": "partial_update"}),
        name="detail",
    ),
    path(
        "<int:pk>/revisions/",
        ToolViewSet.as_view({"get": "revisions"}),
        name="revisions",
    ),
    path("<int:pk>/approve", ToolViewSet.as_view({"post": "approve"}), name="approve"),
]
