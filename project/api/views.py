"""API-wide views: liveness (`/healthz`)."""

from __future__ import annotations

import logging

from django.db import connection
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from project.api.errors import envelope
from project.api.serializers import ErrorEnvelopeSerializer

logger = logging.getLogger("toolsync.api")


class HealthzView(APIView):
    """Liveness: the process answers and its database connection works."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    public_endpoint = True

    @extend_schema(
        operation_id="healthz",
        tags=["health"],
        summary="Liveness",
        responses={
            200: inline_serializer(
                "Health",
                {
                    "status": serializers.ChoiceField(choices=["ok"]),
                    "database": serializers.ChoiceField(choices=["ok"]),
                },
            ),
            503: OpenApiResponse(
                ErrorEnvelopeSerializer,
                description="`unhealthy`: the database is not reachable.",
            ),
        },
    )
    def get(self, request: Request) -> Response:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        except Exception:  # noqa: BLE001 - any database failure means not healthy
            logger.exception("healthz: database check failed")
            return Response(
                envelope("unhealthy", "The database is not reachable.", {}),
                status=503,
            )
        return Response({"status": "ok", "database": "ok"})
