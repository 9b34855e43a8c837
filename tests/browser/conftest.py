"""Fixtures of the browser tests: Debian's Chromium driven by Playwright, and an operator logged
in once through the admin's login form, on pytest-django's live server.

The live server answers from its own threads, so the tests are transactional: what they seed
is committed, and the database is emptied after each. The live server runs in this process:
the flush's rebuilt content types (new ids) reach its cache too, which a server process of its
own (gunicorn, tests/processes.py) would keep stale, failing the admin's change log."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.browser.pages import TIMEOUT_MS, Operator, context_options, log_in

# Debian's package (`make test` installs it): Playwright's own browser builds are downloaded
# from the internet, which the test machines do not reach.
CHROMIUM = Path("/usr/bin/chromium")
# As root (no sandbox), headless, and nothing that reaches out to the network on its own.
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OPERATOR = "operator"
OPERATOR_PASSWORD = "operator-password"


def chromium_executable() -> str | None:
    if CHROMIUM.exists():
        return str(CHROMIUM)
    return shutil.which("chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One Chromium for the module's tests; each test opens its own context (cookies, pages)."""
    executable = chromium_executable()
    if executable is None:
        pytest.skip(
            f"Chromium not found ({CHROMIUM} or chromium on PATH): `make test` installs "
            "Debian's chromium package"
        )
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        # Playwright's sync API keeps its event loop running in this thread between its
        # calls, so Django would take the tests' own queries for async code's and refuse
        # them; no coroutine here shares a connection.
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        launched = playwright.chromium.launch(
            executable_path=executable, args=LAUNCH_ARGS, headless=True
        )
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def operator_account(django_db_setup: None, django_db_blocker: Any) -> Operator:
    with django_db_blocker.unblock():
        user = get_user_model().objects.create_superuser(
            OPERATOR, "operator@example.com", OPERATOR_PASSWORD
        )
    return Operator(OPERATOR, OPERATOR_PASSWORD, user)


@pytest.fixture(scope="module")
def operator_session(
    browser: Browser, live_server: Any, operator_account: Operator, django_db_blocker: Any
) -> dict[str, Any]:
    """The operator's cookies after logging in once through the form, for every test's page.
    Set up before the first test that needs it opens the database: the live server's threads
    are refused it as the test is, until then."""
    context = browser.new_context(**context_options(live_server))
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    with django_db_blocker.unblock():
        operator_account.write_back()
        log_in(page, username=operator_account.username, password=operator_account.password)
        expect(page).to_have_url(f"{live_server.url}/admin/")
        state = context.storage_state()
        context.close()
        [session_key] = [
            cookie["value"] for cookie in state["cookies"] if cookie["name"] == "sessionid"
        ]
        # As the login left them (its last_login, a password hash rehashed on login).
        operator_account.user.refresh_from_db()
        operator_account.session = Session.objects.get(session_key=session_key)
    return state


@pytest.fixture
def operator(transactional_db: None, operator_account: Operator) -> Operator:
    """The operator, logged in or not yet, in this test's database."""
    operator_account.write_back()
    return operator_account


@pytest.fixture
def page(
    browser: Browser, live_server: Any, operator_session: dict[str, Any], operator: Operator
) -> Iterator[Page]:
    """A page of the logged-in operator, in a context of its own test."""
    context = browser.new_context(**context_options(live_server, storage_state=operator_session))
    context.set_default_timeout(TIMEOUT_MS)
    yield context.new_page()
    context.close()
