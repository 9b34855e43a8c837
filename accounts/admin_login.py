"""Failed logins to the admin are limited per client address, like the API's failed
authentications (``accounts.keycache``): each failure is counted from Django's
``user_login_failed`` signal, and past ``ADMIN_LOGIN_FAILURE_RATE_LIMIT`` the address's login
attempts are answered 429 without checking the password, until the window ends."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from accounts.keycache import address_blocked_for, address_failure_record, client_address

SCOPE = "admin-login"


@receiver(user_login_failed, dispatch_uid="admin-login-failure-counted")
def admin_login_failed(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    if request is None:
        return  # an authenticate() call outside a request: no address to count against
    address_failure_record(
        scope=SCOPE,
        address=client_address(request),
        rate=settings.ADMIN_LOGIN_FAILURE_RATE_LIMIT,
    )


class AdminLoginLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # The cheap test first: reverse() on every API write cost 2 % of an add's web CPU.
        if (
            request.method == "POST"
            and request.path_info.startswith("/admin/")
            and request.path_info == reverse("admin:login")
        ):
            blocked_for = address_blocked_for(
                scope=SCOPE,
                address=client_address(request),
                rate=settings.ADMIN_LOGIN_FAILURE_RATE_LIMIT,
            )
            if blocked_for is not None:
                seconds = math.ceil(blocked_for)
                response = HttpResponse(
                    f"Too many failed logins from this address; try again in {seconds} seconds.",
                    status=429,
                    content_type="text/plain; charset=utf-8",
                )
                response["Retry-After"] = str(seconds)
                return response
        return self.get_response(request)
