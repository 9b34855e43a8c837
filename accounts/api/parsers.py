"""The one request-body parser of the API: JSON, at most ``API_MAX_BODY_BYTES`` (Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE``, answered 413) and nested at most ``MAX_JSON_DEPTH`` deep
(answered 400). Forms are refused (415): multipart is for uploads, and a view that takes a
file (the image upload of DESIGN.md) names its parsers itself."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

# Deeper than any memory, message or tag object has reason to be; the validation behind the
# parser (and the error report of a failed one) walks bodies recursively.
MAX_JSON_DEPTH = 64


class JsonTooDeepError(ParseError):
    default_detail = f"The JSON body is nested more than {MAX_JSON_DEPTH} levels deep."
    default_code = "too_deep"


def _deeper_than(data: Any, limit: int) -> bool:
    pending = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                return True
            children = value.values() if isinstance(value, dict) else value
            pending.extend((child, depth + 1) for child in children)
    return False


class JsonBodyParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:  # the decoder's own limit, far deeper than ours
            raise JsonTooDeepError() from None
        if _deeper_than(data, MAX_JSON_DEPTH):
            raise JsonTooDeepError()
        return data
