"""Page-number pagination: `count`, `next`, `previous`, `results` (SPEC 6)."""

from __future__ import annotations

from rest_framework import pagination

MAX_PAGE_SIZE = 1000


class PageNumberPagination(pagination.PageNumberPagination):
    """`?page=N&page_size=K`, K up to 1000 (larger asks are capped, not refused)."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE
