"""The one request-body parser of the API: JSON, at most ``API_MAX_BODY_BYTES`` (Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE``, answered 413) and nested at most ``MAX_JSON_DEPTH`` deep
(answered 400). Forms are refused (415): multipart is for uploads, and a view that takes a
file (the image upload of DESIGN.md) names its parsers itself.

Text PostgreSQL cannot store (NUL, and lone UTF-16 surrogates, which JSON's ``\\u`` escapes
can spell) is replaced by U+FFFD in every string of a body, keys included: a chat turn with a
pasted binary snippet is still a chat turn. Fields with a pattern (``user_id``) then refuse
it as they refuse any other character they do not allow. ``json_text_load`` applies the same
rules to JSON sent inside a query parameter.
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils import json  # refuses NaN and Infinity, as the parser does

from mirix_site.common.jsonvalues import strings_mapped

# Deeper than any memory, message or tag object has reason to be; the validation behind the
# parser (and the error report of a failed one) walks bodies recursively.
MAX_JSON_DEPTH = 64
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


MALFORMED_DETAIL = "Malformed JSON body."


class JsonTooDeepError(ParseError):
    default_detail = f"The JSON body is nested more than {MAX_JSON_DEPTH} levels deep."
    default_code = "too_deep"


def text_storable(text: str) -> str:
    """``text`` with what PostgreSQL refuses in text (NUL, lone surrogates) as U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", text)


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


def json_checked(data: Any) -> Any:
    """Decoded JSON held to the parser's rules: at most ``MAX_JSON_DEPTH`` deep
    (``JsonTooDeepError``), every string storable."""
    if _deeper_than(data, MAX_JSON_DEPTH):
        raise JsonTooDeepError()
    return strings_mapped(data, text_storable)


def json_text_load(text: str) -> Any:
    """JSON text from a query parameter, by the body's rules. Raises ``ValueError`` when it
    is not JSON and ``JsonTooDeepError`` when nested too deep."""
    try:
        return json_checked(json.loads(text))
    except RecursionError:
        raise JsonTooDeepError() from None


class JsonBodyParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:  # the decoder's own limit, far deeper than ours
            raise JsonTooDeepError() from None
        except ParseError:
            # DRF's message quotes the decoder; a client needs only to know the body is not JSON.
            raise ParseError(MALFORMED_DETAIL) from None
        return json_checked(data)
