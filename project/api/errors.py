"""The one error envelope of the API: `{"error": {"code", "message", "details"}}`.

drf-standardized-errors catches every exception raised in a DRF view (4xx and
5xx alike, unhandled ones included) and flattens nested validation errors into
dotted field paths; our formatter shapes its result into the envelope and our
handler maps the domain exceptions (refresh, tool and gateway services, model
validation) onto statuses. Django-level 404/500 outside DRF views get the same
envelope through `not_found` / `server_error` for `/api/` paths.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from drf_standardized_errors.formatter import ExceptionFormatter
from drf_standardized_errors.handler import ExceptionHandler
from drf_standardized_errors.types import ErrorResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error

from gateways.services import GatewayConfigError, GatewayInUse
from refresh.exceptions import RefreshError
from tools.services import ToolRevisionMismatch, ToolServiceError

VALIDATION_STATUS = status.HTTP_422_UNPROCESSABLE_ENTITY
logger = logging.getLogger("toolsync.api")


class ApiError(exceptions.APIException):
    """An API failure with an explicit status, stable code, message and details."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status_code: int,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail=message, code=code)
        self.upstream = False
        self.status_code = status_code
        self.error_code = code
        self.details = details or {}


def validation_error(field: str, message: str, code: str = "invalid") -> Any:
    """A DRF ValidationError on one field (answers 422 with the field path)."""
    return exceptions.ValidationError({field: [exceptions.ErrorDetail(message, code)]})


class EnvelopeExceptionHandler(ExceptionHandler):
    """Map domain exceptions to API errors; validation answers 422."""

    def convert_known_exceptions(self, exc: Exception) -> Exception:
        if isinstance(exc, RefreshError):
            error = ApiError(
                exc.message,
                code=exc.code,
                status_code=exc.status,
                details=dict(exc.details),
            )
            # A server we cannot reach is the gateway's failure, not ours: the
            # run records it and the refresh log line says it; it is not a crash
            # for error monitoring. A bare RefreshError (500) still is.
            error.upstream = exc.status == status.HTTP_502_BAD_GATEWAY
            return error
        if isinstance(exc, ToolRevisionMismatch):
            return ApiError(
                str(exc),
                code=exc.code,
                status_code=status.HTTP_409_CONFLICT,
                details={"revision": exc.current, "requested": exc.requested},
            )
        if isinstance(exc, GatewayInUse):
            return ApiError(
                str(exc), code=exc.code, status_code=status.HTTP_409_CONFLICT
            )
        if isinstance(exc, ToolServiceError):
            return ApiError(str(exc), code=exc.code, status_code=VALIDATION_STATUS)
        if isinstance(exc, GatewayConfigError):
            return ApiError(str(exc), code=exc.code, status_code=VALIDATION_STATUS)
        if isinstance(exc, RequestDataTooBig):
            return ApiError(
                "The request body is larger than this server accepts "
                f"({settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes).",
                code="request_too_large",
                status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            )
        if isinstance(exc, SuspiciousOperation):
            # Django's refusals of hostile requests (too many fields, bad
            # multipart...) are the client's fault, never a 500.
            return ApiError(
                "The request was refused as malformed.",
                code="bad_request",
                status_code=status.HTTP_400_BAD_REQUEST,
            )
        if isinstance(exc, DjangoValidationError):
            return exceptions.ValidationError(as_serializer_error(exc))
        return super().convert_known_exceptions(exc)

    def report_exception(
        self, exc: exceptions.APIException, response: Response
    ) -> None:
        if getattr(exc, "upstream", False):
            logger.warning(
                "%s answered %s %s",
                self.context["request"].path,
                exc.status_code,
                getattr(exc, "error_code", ""),
            )
            return
        super().report_exception(exc, response)

    def get_response(self, exc: exceptions.APIException, data: dict) -> Response:
        response = super().get_response(exc, data)
        if isinstance(exc, exceptions.ValidationError):
            response.status_code = VALIDATION_STATUS
        return response


class EnvelopeFormatter(ExceptionFormatter):
    """Shape drf-standardized-errors' result into our envelope."""

    def format_error_response(self, error_response: ErrorResponse) -> Any:
        exc = self.exc
        if isinstance(exc, exceptions.ValidationError):
            errors = [
                {"field": e.attr, "code": e.code, "message": e.detail}
                for e in error_response.errors
            ]
            first = errors[0] if errors else None
            if first is None:
                message = "The request is invalid."
            elif first["field"] in (None, "non_field_errors"):
                message = f"The request is invalid: {first['message']}"
            else:
                message = (
                    f"The request is invalid: {first['field']}: {first['message']}"
                )
            if len(errors) > 1:
                message += f" (and {len(errors) - 1} more)"
            return envelope("validation_error", message, {"errors": errors})
        if isinstance(exc, ApiError):
            return envelope(exc.error_code, str(exc.detail), exc.details)
        error = error_response.errors[0] if error_response.errors else None
        code = error.code if error else "error"
        message = error.detail if error else "The request failed."
        if status.is_server_error(exc.status_code):
            # Never echo an unhandled exception's text: it may carry secrets.
            code = "server_error" if code == "error" else code
            if not isinstance(exc, ApiError):
                message = "The server failed to handle the request; it has been logged."
        return envelope(code, message, {})


def envelope(code: str, message: str, details: dict[str, Any] | None) -> dict:
    """The error body every failure answers."""
    return {"error": {"code": code, "message": message, "details": details or {}}}


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/") or request.path == "/healthz"


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's 404 handler: the envelope under `/api/`, Django's page elsewhere."""
    if _is_api(request):
        return JsonResponse(
            envelope("not_found", "No such endpoint or object.", {}), status=404
        )
    return defaults.page_not_found(request, exception)  # type: ignore[arg-type]


@csrf_exempt  # a token client's POST to a wrong path gets the 404, not a CSRF page
def unknown_api_path(request: HttpRequest, rest: str = "") -> HttpResponse:
    """The last `/api/` route: the envelope for unknown paths, in DEBUG too.

    (Django's `handler404` is skipped when DEBUG is on, and `make run` runs
    with DEBUG.) A path that exists with a trailing slash says so, instead
    of a redirect that would turn a POST into a GET.
    """
    details: dict[str, Any] = {}
    if not request.path.endswith("/"):
        from django.urls import Resolver404, resolve

        try:
            resolve(request.path + "/")
        except Resolver404:
            pass
        else:
            details["did_you_mean"] = request.path + "/"
    return JsonResponse(
        envelope("not_found", "No such endpoint or object.", details), status=404
    )


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's 500 handler: the envelope under `/api/`, Django's page elsewhere."""
    if _is_api(request):
        return JsonResponse(
            envelope(
                "server_error",
                "The server failed to handle the request; it has been logged.",
                {},
            ),
            status=500,
        )
    return defaults.server_error(request)
