"""Top-level URL configuration."""

from django.contrib import admin
from django.urls import include, path

from refresh.metrics_view import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics", metrics_view, name="metrics"),
    path("api/skills/", include("skills.urls")),
]
