"""Reads of the conversation store; every read takes the tenant first."""

from __future__ import annotations

from django.db.models import Case, IntegerField, QuerySet, Value, When

from accounts.models import EndUser
from accounts.tenancy import Tenant
from sessions.models import Message, Session


def session_list(*, tenant: Tenant, end_user: EndUser) -> QuerySet[Session]:
    """The user's sessions written by this client or by clients it may read."""
    return Session.objects.filter(
        organization_id=tenant.organization.pk,
        end_user=end_user,
        client_id__in=tenant.readable_client_ids,
    )


def session_get(*, tenant: Tenant, end_user: EndUser, session_id: str) -> Session:
    """The session with this caller id, the caller's own first when a client in its read
    scopes used the same id. Raises ``Session.DoesNotExist``."""
    own_first = Case(
        When(client_id=tenant.client.pk, then=Value(0)),
        default=Value(1),
        output_field=IntegerField(),
    )
    session = (
        session_list(tenant=tenant, end_user=end_user)
        .filter(session_id=session_id)
        .order_by(own_first, "-created_at")
        .first()
    )
    if session is None:
        raise Session.DoesNotExist(session_id)
    return session


def session_get_own(*, tenant: Tenant, end_user: EndUser, session_id: str) -> Session:
    """The caller's own session (for writes such as close). Raises ``Session.DoesNotExist``."""
    return Session.objects.get(
        organization_id=tenant.organization.pk,
        client_id=tenant.client.pk,
        end_user=end_user,
        session_id=session_id,
    )


def message_list(*, tenant: Tenant, session: Session) -> QuerySet[Message]:
    """The session's turns in the order they were sent."""
    return Message.objects.filter(organization_id=tenant.organization.pk, session=session).order_by(
        "position"
    )
