"""What the browser tests do on the console's pages, for any test of them to reuse: the
operator's login through the admin's form, Django's messages, a screenshot for the docs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playwright.sync_api import Page

from mirix_site.launcher import PROJECT_DIR

if TYPE_CHECKING:
    from django.contrib.sessions.models import Session

SCREENSHOTS = PROJECT_DIR / "docs" / "screenshots"
# One size for every page and every run, so the screenshots compare run to run.
VIEWPORT = {"width": 1280, "height": 900}
# A page that does not show what a test waits for fails in seconds, not Playwright's 30.
TIMEOUT_MS = 10_000


@dataclass
class Operator:
    """A staff superuser's login, their row and, once logged in, their session's row."""

    username: str
    password: str
    user: Any
    session: Session | None = None

    def write_back(self) -> None:
        """Their rows as the login left them, in a database a transactional test's flush has
        emptied: the same ids, so the browser's session cookie stays valid."""
        self.user.save()
        if self.session is not None:
            self.session.save()


def context_options(live_server: Any, **extra: Any) -> dict[str, Any]:
    """A browser context's: the live server's pages at the fixed viewport."""
    return {"base_url": live_server.url, "viewport": VIEWPORT, **extra}


def log_in(page: Page, *, username: str, password: str) -> None:
    """Through the admin's login form, as an operator does; lands on the admin index when the
    password is right, on the form with its error when not."""
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.get_by_role("button", name="Log in").click()


def messages_shown(page: Page) -> list[str]:
    """The messages the admin shows after an action (``message_user``), once the page the
    action answers with has them (reading at once races the action's POST and redirect)."""
    messages = page.locator("ul.messagelist li")
    messages.first.wait_for()
    return [text.strip() for text in messages.all_inner_texts()]


def screenshot(page: Page, name: str) -> Path:
    """The whole page as ``docs/screenshots/<name>.png`` (at the context's ``VIEWPORT``)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=path, full_page=True, animations="disabled", caret="hide")
    return path
