"""Routes of the refresh-run history, mounted at `/api/refresh-runs/` (SPEC 6)."""

from django.urls import path

from refresh.views import RefreshRunViewSet

app_name = "refresh"

urlpatterns = [
    path("", RefreshRunViewSet.as_view({"get": "list"}), name="list"),
    path("<int:pk>/", RefreshRunViewSet.as_view({"get": "retrieve"}), name="detail"),
]
