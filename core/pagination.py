"""API pagination: ``{"count", "next", "previous", "results"}``, ``?page_size=`` up to 200.

``page_size`` is a whole number from 1; a larger one than ``max_page_size`` is served as
``max_page_size`` (a bounded page, not an error). Anything else — ``null``, ``0``, ``-1``,
``ten`` — is a 400 with the field named, where DRF would silently serve the default page; the
OpenAPI parameters below say the same, so generated clients and the fuzzing test agree with it.
``page`` likewise: past the last page or not a whole number from 1 (``?page=`` included), a 404.
"""

from __future__ import annotations

from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import PageNumberPagination

from core.text import whole_number


class StandardPagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
    last_page_strings = ()  # ``?page=last`` is no integer: the schema does not have it

    def get_page_number(self, request, paginator) -> int:
        """``?page=`` as DRF reads it, except that an empty one is no page 1 but a 404 like any non-number."""
        raw = request.query_params.get(self.page_query_param)
        if raw is not None and not whole_number(raw):  # None or 0
            raise NotFound(self.invalid_page_message.format(page_number=raw, message="not a whole number from 1"))
        return super().get_page_number(request, paginator)

    def get_page_size(self, request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        size = whole_number(raw, longer=self.max_page_size)  # a number too long to read is served as the largest
        if not size:  # None or 0
            raise ValidationError({self.page_size_query_param: [
                f"Must be a whole number from 1 (at most {self.max_page_size} are served)."]})
        return min(size, self.max_page_size)

    def get_schema_operation_parameters(self, view) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"]["minimum"] = 1
            if parameter["name"] == self.page_size_query_param:
                parameter["description"] = (f"Results per page, from 1; more than {self.max_page_size} "
                                            f"are served as {self.max_page_size}.")
        return parameters
