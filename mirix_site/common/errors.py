"""The domain's refusals, in four kinds. Services and selectors raise subclasses of these; the
API's exception handler (``mirix_site.api.errors``) answers each kind one way, so no view catches
a domain error:

- ``NotFoundError``: nothing the caller may see by that id (missing, another tenant's, another
  user's, all alike): 404 "Not found.", the message kept for logs, unless the subclass says its
  message names only the caller's own things (``shown``).
- ``ReadOnlyError``: the caller reads it through a read scope but may not change it. Answered as
  a missing object (404): what a client reads through a read scope is read-only in every sense,
  and a write naming it changes nothing and says nothing more (README, "Tenancy").
- ``ConflictError``: the request is valid but the state refuses it: 409 with the message.
- ``InvalidInputError``: what was sent cannot be stored as sent: 422 with the fields to fix.
"""

from __future__ import annotations


class DomainError(Exception):
    """A refusal. ``code`` is the error body's machine-readable code."""

    code = "error"

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class NotFoundError(DomainError):
    code = "not_found"
    # Whether the message may be shown to the caller: only when it names nothing but the
    # caller's own things (an agent name among its own agents).
    shown = False


class ReadOnlyError(DomainError):
    code = "not_found"


class ConflictError(DomainError):
    code = "conflict"


class InvalidInputError(DomainError):
    """``fields``: the messages by field name, as a 422 reports them."""

    code = "invalid"

    def __init__(self, fields: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{name}: {' '.join(texts)}" for name, texts in fields.items()))
        self.fields = fields
