"""Errors a refresh request can end in; each carries a stable code and HTTP status."""

from __future__ import annotations

from typing import Any


class RefreshError(Exception):
    """Base: `code` is the API error code, `status` the HTTP status."""

    code = "refresh_failed"
    status = 500

    def __init__(
        self, message: str, *, run_id: int | None = None, **details: Any
    ) -> None:
        super().__init__(message)
        self.message = message
        self.run_id = run_id
        self.details = (
            {"run_id": run_id, **details} if run_id is not None else dict(details)
        )


class RefreshInProgress(RefreshError):
    """Another refresh of the gateway holds the lease."""

    code = "refresh_in_progress"
    status = 409

    def __init__(
        self, message: str, *, running_run_id: int | None, run_id: int | None = None
    ) -> None:
        super().__init__(message, run_id=run_id, running_run_id=running_run_id)
        self.running_run_id = running_run_id


class GatewayUnreachable(RefreshError):
    """The server could not be reached or initialized at all."""

    code = "gateway_unreachable"
    status = 502


class GatewayDisabled(RefreshError):
    code = "gateway_disabled"
    status = 422


class ProbeCredentialRequired(RefreshError):
    code = "probe_credential_required"
    status = 422


class LeaseLost(Exception):
    """The run's lease was taken over before it could apply."""
