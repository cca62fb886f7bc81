"""Routes of the skills API, mounted at `/api/skills/` (SPEC 6)."""

from django.urls import path

from skills.views import SkillViewSet

app_name = "skills"

urlpatterns = [
    path("", SkillViewSet.as_view({"get": "list", "post": "create"}), name="list"),
    # SPEC 6 spells this one without a trailing slash.
    path("refresh", SkillViewSet.as_view({"post": "refresh"}), name="refresh"),
    path("<int:pk>/", SkillViewSet.as_view({"get": "retrieve"}), name="detail"),
    path(
        "<int:pk>/revisions/",
        SkillViewSet.as_view({"get": "revisions", "post": "add_revision"}),
        name="revisions",
    ),
]
