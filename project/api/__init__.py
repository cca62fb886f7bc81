"""Shared pieces of the HTTP API (SPEC 6).

Every app's views use these, so their names are stable:

- `errors`: the one error envelope `{"error": {"code", "message", "details"}}`
  (drf-standardized-errors with our formatter), `ApiError`, and the Django
  `handler404` / `handler500` JSON views for `/api/` paths.
- `serializers`: `StrictInputSerializer` / `StrictInputMixin` (unknown request
  fields are a 422) and the envelope's schema serializers.
- `authentication`: `BearerTokenAuthentication` (knox, hashed tokens).
- `permissions`: `RoleFloor("member")` and `require_role(...)`.
- `tenancy`: `TenantScopedQuerysetMixin`, `member_roles(request)`.
- `pagination`: `PageNumberPagination` (`page_size` up to 1000).
- `schema`: the drf-spectacular `AutoSchema` that documents error statuses.
"""
