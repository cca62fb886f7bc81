"""The admin's refresh pages: Refresh (a dry run), the preview, and Apply.

Registered by `GatewayAdmin.get_urls()` through `admin_site.admin_view` (login,
staff, CSRF). Each view re-checks the object: another tenant's gateway is a
404; one's own tenant's gateway below the admin role, or without the refresh
permission, a 403. Only POSTs run a refresh. Nothing here
writes the catalog itself: `refresh.services.refresh_gateway` does, and Apply
passes the preview's catalog fingerprint so a server that changed in between
is never applied unread.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.views import View

from gateways.admin_scope import can_refresh, gateway_in_admin_scope
from gateways.models import Gateway
from refresh.exceptions import (
    GatewayDisabled,
    GatewayUnreachable,
    ProbeCredentialRequired,
    RefreshError,
    RefreshInProgress,
)
from refresh.models import RefreshRun
from refresh.options import RefreshOptions
from refresh.presentation import report_view
from refresh.services import refresh_gateway

# The options an admin chooses on the Apply form, with what each one does.
OPTION_HELP: dict[str, str] = {
    "apply_effect": "Move each tool's effect to the server's hint (read-only hint → "
    "read). Off: effects stay as they are; new tools are always write and gated.",
    "deactivate_missing": "Only when the listing was complete. Nothing is ever "
    "deleted; off: they stay active.",
    "reactivate_returning": "Off: inactive tools that are offered again stay inactive.",
    "include_prompts": "Also read and apply the server's prompts.",
    "include_resources": "Also read and apply the server's resources.",
}
OPTION_LABELS: dict[str, str] = {
    "apply_effect": "Follow the server's effect hints",
    "deactivate_missing": "Deactivate tools the server no longer offers",
    "reactivate_returning": "Reactivate tools the server offers again",
    "include_prompts": "Include prompts",
    "include_resources": "Include resources",
}
OPTION_FIELDS = tuple(OPTION_HELP)


class ProbeCredentialForm(forms.Form):
    """For gateways that authenticate as the caller: a credential for this run only."""

    probe_credential = forms.CharField(
        label="Your credential for this server",
        max_length=100,
        min_length=1,
        strip=False,
        widget=forms.PasswordInput(
            render_value=False, attrs={"autocomplete": "off", "spellcheck": "false"}
        ),
        help_text="Sent as a bearer token for this refresh only; never stored, "
        "logged or shown.",
    )

    def __init__(self, *args: Any, gateway: Gateway, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if gateway.auth_type != Gateway.AuthType.AS_CALLER:
            del self.fields["probe_credential"]

    def credential(self) -> str | None:
        return self.cleaned_data.get("probe_credential") or None


class ApplyForm(ProbeCredentialForm):
    """The options of an Apply (or of a new preview), tied to the preview shown."""

    preview_run = forms.IntegerField(widget=forms.HiddenInput, min_value=1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in OPTION_FIELDS:
            self.fields[name] = forms.BooleanField(
                required=False, label=OPTION_LABELS[name], help_text=OPTION_HELP[name]
            )

    def option_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in OPTION_FIELDS]

    def chosen(self) -> dict[str, bool]:
        return {name: bool(self.cleaned_data.get(name)) for name in OPTION_FIELDS}


def preview_options(gateway: Gateway) -> RefreshOptions:
    """A first preview reads what the gateway's policy would apply, without applying."""
    policy = gateway.policy_options()
    return RefreshOptions(**{name: bool(policy.get(name)) for name in OPTION_FIELDS})


def run_options(run: RefreshRun) -> dict[str, bool]:
    options = RefreshOptions.from_json(run.options)
    return {name: bool(getattr(options, name)) for name in OPTION_FIELDS}


def is_previewable(run: RefreshRun) -> bool:
    """A finished dry run (or an apply refused as stale) whose catalog is known."""
    if run.status != RefreshRun.Status.SUCCEEDED or run.applied:
        return False
    if not run.catalog_fingerprint:
        return False
    return not RefreshOptions.from_json(run.options).apply or bool(
        (run.report or {}).get("stale_preview")
    )


def run_link(run_id: int | None) -> str:
    if not run_id:
        return ""
    url = reverse("admin:refresh_refreshrun_change", args=[run_id])
    return format_html('<a href="{}">run {}</a>', url, run_id)


def _preview_url(gateway: Gateway, run: RefreshRun) -> str:
    return reverse("admin:gateways_gateway_refresh_preview", args=[gateway.pk, run.pk])


def _gateway_url(gateway: Gateway) -> str:
    return reverse("admin:gateways_gateway_change", args=[gateway.pk])


def _result_url(request: HttpRequest, gateway: Gateway, run: RefreshRun) -> str:
    """The run's page, or the gateway's for someone who may not read run history."""
    if request.user.has_perm("refresh.view_refreshrun"):
        return reverse("admin:refresh_refreshrun_change", args=[run.pk])
    return _gateway_url(gateway)


def execute(
    request: HttpRequest,
    gateway: Gateway,
    options: RefreshOptions,
    probe_credential: str | None,
) -> RefreshRun | None:
    """Run a refresh now; map the engine's refusals to admin messages (None then)."""
    try:
        return refresh_gateway(
            gateway=gateway,
            trigger=RefreshRun.Trigger.ADMIN,
            requested_by=request.user,
            options=options,
            probe_credential=probe_credential,
        )
    except RefreshInProgress as exc:
        messages.error(
            request,
            format_html(
                "A refresh of this gateway is already running ({}). Nothing was "
                "started; try again when it has finished.",
                run_link(exc.running_run_id) or "another run",
            ),
        )
    except GatewayUnreachable as exc:
        messages.error(
            request,
            format_html(
                "The server could not be reached: {}. Nothing was written ({}).",
                exc.message,
                run_link(exc.run_id),
            ),
        )
    except GatewayDisabled:
        messages.error(
            request, "This gateway is disabled. Enable it before refreshing it."
        )
    except ProbeCredentialRequired:
        messages.error(
            request,
            "This gateway authenticates as the caller: enter your credential to "
            "refresh it.",
        )
    except RefreshError as exc:
        messages.error(
            request,
            format_html(
                "The refresh failed: {}. Nothing was written ({}).",
                exc.message,
                run_link(exc.run_id),
            ),
        )
    return None


class _GatewayView(View):
    """Common ground: the model admin, the gateway in scope, the permission."""

    model_admin: ModelAdmin[Gateway] | None = None

    def gateway(self, request: HttpRequest, object_id: str) -> Gateway:
        gateway = gateway_in_admin_scope(request.user, object_id)
        if not can_refresh(request.user, gateway):
            raise PermissionDenied("you may not refresh this gateway")
        return gateway

    def context(
        self, request: HttpRequest, gateway: Gateway, **extra: Any
    ) -> dict[str, Any]:
        assert self.model_admin is not None
        return {
            **self.model_admin.admin_site.each_context(request),
            "opts": self.model_admin.opts,
            "original": gateway,
            "gateway": gateway,
            "has_view_permission": True,
            **extra,
        }


class RefreshStartView(_GatewayView):
    """GET: a confirmation (and credential) form. POST: run a dry run, show its preview."""

    def get(self, request: HttpRequest, object_id: str) -> HttpResponse:
        gateway = self.gateway(request, object_id)
        return self.render(request, gateway, ProbeCredentialForm(gateway=gateway))

    def post(self, request: HttpRequest, object_id: str) -> HttpResponse:
        gateway = self.gateway(request, object_id)
        form = ProbeCredentialForm(request.POST, gateway=gateway)
        if not form.is_valid():
            return self.render(request, gateway, form)
        run = execute(request, gateway, preview_options(gateway), form.credential())
        if run is None:
            return HttpResponseRedirect(_gateway_url(gateway))
        return HttpResponseRedirect(_preview_url(gateway, run))

    def render(
        self, request: HttpRequest, gateway: Gateway, form: ProbeCredentialForm
    ) -> HttpResponse:
        return TemplateResponse(
            request,
            "admin/refresh/refresh_start.html",
            self.context(
                request, gateway, form=form, title=f"Refresh {gateway.prefix}"
            ),
        )


class RefreshPreviewView(_GatewayView):
    """GET only: the stored report of a dry run, with the Apply form under it."""

    def get(self, request: HttpRequest, object_id: str, run_id: int) -> HttpResponse:
        gateway = self.gateway(request, object_id)
        run = get_object_or_404(RefreshRun, pk=run_id, gateway=gateway)
        if not is_previewable(run):
            messages.info(
                request,
                "That run is not a preview that can be applied; here is its record.",
            )
            return HttpResponseRedirect(
                reverse("admin:refresh_refreshrun_change", args=[run.pk])
            )
        form = ApplyForm(
            gateway=gateway, initial={"preview_run": run.pk, **run_options(run)}
        )
        return render_preview(self, request, gateway, run, form)


def render_preview(
    view: _GatewayView,
    request: HttpRequest,
    gateway: Gateway,
    run: RefreshRun,
    form: ApplyForm,
    status: int = 200,
) -> HttpResponse:
    newer_applied = (
        RefreshRun.objects.filter(gateway=gateway, applied=True, pk__gt=run.pk)
        .order_by("-pk")
        .values_list("pk", flat=True)
        .first()
    )
    return TemplateResponse(
        request,
        "admin/refresh/preview.html",
        view.context(
            request,
            gateway,
            run=run,
            report=report_view(run.report),
            form=form,
            newer_applied=newer_applied,
            title=f"Preview of {gateway.prefix}",
        ),
        status=status,
    )


class RefreshApplyView(_GatewayView):
    """POST only: apply the previewed catalog, or preview again with other options."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, object_id: str) -> HttpResponse:
        gateway = self.gateway(request, object_id)
        form = ApplyForm(request.POST, gateway=gateway)
        preview = self._preview(gateway, request.POST.get("preview_run"))
        if preview is None:
            messages.error(
                request,
                "That preview cannot be applied (it is not a finished dry run of this "
                "gateway). Refresh again for a new preview.",
            )
            return HttpResponseRedirect(_gateway_url(gateway))
        if not form.is_valid():
            return render_preview(self, request, gateway, preview, form, status=422)
        chosen = form.chosen()
        wants_apply = "_apply" in request.POST
        if wants_apply and chosen != run_options(preview):
            # What is written must be what was read: other options mean other
            # actions, so the admin sees them before anything is applied.
            messages.warning(
                request,
                "The options differ from the ones this preview was made with, so "
                "nothing was written. Here is the preview with your options; apply "
                "it if it is what you want.",
            )
            wants_apply = False
        options = RefreshOptions(
            apply=wants_apply,
            expected_fingerprint=preview.catalog_fingerprint if wants_apply else None,
            **chosen,
        )
        run = execute(request, gateway, options, form.credential())
        if run is None:
            return HttpResponseRedirect(_preview_url(gateway, preview))
        if not wants_apply:
            return HttpResponseRedirect(_preview_url(gateway, run))
        if (run.report or {}).get("stale_preview"):
            messages.warning(
                request,
                format_html(
                    "The server changed since the preview ({}), so nothing was "
                    "written. Here is the new preview: read it, then apply it.",
                    run_link(preview.pk),
                ),
            )
            return HttpResponseRedirect(_preview_url(gateway, run))
        if run.applied:
            messages.success(
                request,
                format_html(
                    "{} ({})",
                    (run.report or {}).get("note", "Applied."),
                    run_link(run.pk),
                ),
            )
        else:
            messages.warning(
                request,
                format_html("The refresh did not apply: {}.", run.reason or run.status),
            )
        return HttpResponseRedirect(_result_url(request, gateway, run))

    def _preview(self, gateway: Gateway, raw_id: str | None) -> RefreshRun | None:
        if not raw_id or not raw_id.isdigit():
            return None
        run = RefreshRun.objects.filter(pk=int(raw_id), gateway=gateway).first()
        return run if run is not None and is_previewable(run) else None
