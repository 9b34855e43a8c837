"""The operators' console (the Django admin) in a real browser: what an operator does there,
then what the API and the database say. Each test seeds its own organization through the
services and the API, as an application would have."""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests
from django.test import override_settings
from playwright.sync_api import Browser, Page, expect

from accounts.models import EndUser
from accounts.services import removal_summary
from memory.models import EpisodicMemory
from sessions.models import Session
from skills.content import SkillContent
from skills.models import LearningRun, Skill, SkillProposal, SkillVersion
from skills.tasks import learning_run_task
from tests.accounts.test_authentication import UNAUTHENTICATED
from tests.accounts.test_forget import _user_rows
from tests.accounts.test_tenancy import rows_of
from tests.browser.pages import (
    TIMEOUT_MS,
    Operator,
    context_options,
    log_in,
    messages_shown,
    screenshot,
)
from tests.factories import TenantFixture, skill_create, tenant_fixture, tenant_rows_create
from tests.skills.sessions import CSV_TASKS, csv_session, session_send

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def api_get(live_server: Any, owner: TenantFixture, path: str, key: str | None = None) -> Any:
    """A GET of the API on the server the browser uses, with the owner's key (or ``key``)."""
    return requests.get(
        f"{live_server.url}{path}",
        headers={"X-API-Key": key or owner.key},
        timeout=TIMEOUT_MS / 1000,
    )


def flat(text: str) -> str:
    """A diff cell's text as read: difflib writes its spaces as no-break spaces."""
    return text.replace("\xa0", " ").strip()


def test_an_operator_logs_in_through_the_form_and_the_console_opens(
    browser: Browser, live_server: Any, operator: Operator
) -> None:
    username, password = operator.username, operator.password
    context = browser.new_context(**context_options(live_server))
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    try:
        page.goto("/admin/")
        expect(page).to_have_url(f"{live_server.url}/admin/login/?next=/admin/")

        log_in(page, username=username, password="not-the-password")
        expect(page.locator(".errornote")).to_contain_text("enter the correct username")
        expect(page).to_have_url(re.compile(r"/admin/login/"))

        log_in(page, username=username, password=password)
        expect(page).to_have_url(f"{live_server.url}/admin/")
        expect(page.locator("#user-tools")).to_contain_text(f"Welcome, {username}")
        for model in ("End users", "API keys", "Skills", "Skill proposals"):
            expect(page.locator("#content-main").get_by_role("link", name=model, exact=True))
    finally:
        context.close()


def _parts_shown(page: Page) -> dict[str, int]:
    """The user's page: each part's title and the count it gives ("Skills (1)")."""
    parts = {}
    for heading in page.locator(".user-page-part h2").all_inner_texts():
        title, total = re.fullmatch(r"(.+) \((\d+)\)", heading.strip()).groups()
        parts[title] = int(total)
    return parts


def _summary_shown(page: Page) -> dict[str, int]:
    """The confirmation page's summary: "Episodic memories: 2" per kind."""
    items = page.locator("h2", has_text="Summary").locator("xpath=following-sibling::ul[1]/li")
    return {
        name: int(count)
        for name, count in (item.rsplit(": ", 1) for item in items.all_inner_texts())
    }


def test_an_operator_reads_a_users_page_then_forgets_them_after_seeing_the_counts(
    page: Page, live_server: Any
) -> None:
    owner = tenant_fixture("forgotten")
    tenant_rows_create(owner)
    user = EndUser.objects.get(organization=owner.organization, user_id="rows-user")
    memory = EpisodicMemory.objects.filter(end_user=user, client=owner.client).first()
    memory_path = f"/memory/episodic/{memory.pk}?user_id=rows-user"
    assert api_get(live_server, owner, memory_path).status_code == 200
    stored = _user_rows(user.pk)
    before = rows_of(owner.organization.pk)

    page.goto("/admin/")
    page.get_by_role("link", name="End users", exact=True).click()
    page.get_by_role("link", name="rows-user", exact=True).click()
    expect(page.locator("#content h2").first).to_contain_text("rows-user")
    parts = _parts_shown(page)
    assert parts["Episodic memories"] == stored["memory.EpisodicMemory"] >= 1
    assert parts["Sessions"] == stored[Session._meta.label] >= 1
    assert (parts["Skills"], parts["Experiences"], parts["Learning runs"]) == (1, 2, 1)
    expect(
        page.locator(".user-page-part").get_by_role("link", name="read-csv-files")
    ).to_be_visible()
    screenshot(page, "user-page")

    page.locator("a.deletelink").click()
    expect(page.locator("#content")).to_contain_text("Are you sure you want to delete")
    shown = _summary_shown(page)
    assert shown["End users"] == 1 and shown["Episodic memories"] == parts["Episodic memories"]
    assert rows_of(owner.organization.pk) == before  # the counting deleted nothing
    page.get_by_role("button", name=re.compile(r"Yes, I.m sure")).click()

    expect(page.locator("ul.messagelist")).to_contain_text("Deleted rows-user:")
    assert shown == removal_summary(
        {
            label: count - after
            for (label, count), after in zip(
                before.items(), rows_of(owner.organization.pk).values(), strict=True
            )
            if count > after
        }
    )
    assert api_get(live_server, owner, memory_path).status_code == 404
    assert api_get(live_server, owner, "/users/rows-user").status_code == 404
    assert {label: 0 for label in stored} == _user_rows(user.pk)
    assert not EndUser.objects.filter(pk=user.pk).exists()


def test_an_operators_edit_is_a_new_version_compared_side_by_side_and_rolled_back(
    page: Page, live_server: Any
) -> None:
    owner = tenant_fixture("curated")
    skill = skill_create(owner, user_id="curated-user")
    old = skill.description
    new = "Read CSV files, trying utf-8 first."

    page.goto(f"/admin/skills/skill/{skill.pk}/change/")
    expect(page.locator("#id_description")).to_have_value(old)
    page.fill("#id_description", new)
    page.fill("#id_note", "clearer wording")
    page.locator("input[name=_continue]").click()

    expect(page.locator("ul.messagelist")).to_contain_text("Saved as version 2.")
    written = SkillVersion.objects.get(skill=skill, number=2)
    assert (written.author, written.operation, written.note) == (
        "operator",
        "edit",
        "clearer wording",
    )
    assert written.snapshot["description"] == new
    skill.refresh_from_db()
    assert (skill.version, skill.description) == (2, new)

    page.get_by_role("link", name="Compare versions").click()
    page.select_option("select[name=a]", "1")
    page.select_option("select[name=b]", "2")
    page.get_by_role("button", name="Compare").click()
    expect(page).to_have_url(re.compile(rf"/admin/skills/skill/{skill.pk}/diff/\?a=1&b=2$"))
    expect(page.locator("table.diff thead")).to_contain_text("version 1")
    expect(page.locator("table.diff thead")).to_contain_text("version 2")
    changed = page.locator("table.diff tbody tr", has=page.locator(".diff_chg, .diff_sub"))
    expect(changed).to_have_count(1)
    cells = [flat(text) for text in changed.locator("td").all_inner_texts()]
    # difflib's row: marker, line number and text of the old version, then of the new one.
    assert (cells[2], cells[5]) == (f"description: {old}", f"description: {new}")
    screenshot(page, "skill-diff")

    page.get_by_role("button", name="Restore version 1").click()
    expect(page.locator("ul.messagelist")).to_contain_text("Version 1 restored as version 3.")
    restored = SkillVersion.objects.get(skill=skill, number=3)
    first = SkillVersion.objects.get(skill=skill, number=1)
    assert restored.author == "rollback"
    assert SkillContent.from_snapshot(restored.snapshot) == SkillContent.from_snapshot(
        first.snapshot
    )
    skill.refresh_from_db()
    assert (skill.version, skill.description) == (3, old)


def _learning_run(owner: TenantFixture, tasks: tuple[str, ...], *, first: int) -> LearningRun:
    """A user's agent sends its task sessions; the learning run they queue runs (as the worker
    would run it)."""
    for index, task in enumerate(tasks, start=first):
        session_send(owner.api, f"csv-{index}", csv_session(task))
    run = LearningRun.objects.get(client=owner.client, state="queued")
    assert learning_run_task.apply(args=[run.pk]).get() == "succeeded"
    return run


@override_settings(
    LLM_PROVIDER="none", SKILL_REQUIRE_APPROVAL=True, SKILL_TRIGGER_SESSION_THRESHOLD=2
)
def test_in_approval_mode_an_operator_approves_the_draft_then_the_curators_proposal(
    page: Page, live_server: Any
) -> None:
    owner = tenant_fixture("approving")
    _learning_run(owner, CSV_TASKS[:2], first=0)
    skill = Skill.objects.get(client=owner.client)
    assert (skill.status, skill.version) == ("draft", 1)

    page.goto(f"/admin/skills/skill/?organization__id__exact={owner.organization.pk}")
    page.locator(f"input.action-select[value='{skill.pk}']").check()
    page.select_option("select[name=action]", "approve_drafts")
    page.get_by_role("button", name="Go").click()
    expect(page.locator("ul.messagelist")).to_contain_text("1 draft(s) approved.")
    skill.refresh_from_db()
    assert (skill.status, skill.version) == ("candidate", 1)
    listed = api_get(live_server, owner, "/skills?user_id=agent-user").json()["results"]
    assert [(item["name"], item["status"]) for item in listed] == [(skill.name, "candidate")]

    second = _learning_run(owner, CSV_TASKS[2:4], first=10)
    proposal = SkillProposal.objects.get(skill=skill)
    assert (proposal.state, proposal.run) == ("pending", second)
    skill.refresh_from_db()
    assert skill.version == 1  # the curator's change waits

    page.goto(f"/admin/skills/skill/{skill.pk}/change/")
    page.get_by_role("link", name="1 proposal waiting").click()
    page.get_by_role("link", name=str(proposal), exact=True).click()
    expect(page.locator(".proposal-state")).to_have_text("pending")
    # The trigger it adds, on the proposal's side of the diff.
    expect(page.locator("table.diff .diff_add", has_text="orders.csv").first).to_be_visible()
    page.get_by_role("button", name="Approve: write it as version 2").click()

    expect(page.locator("ul.messagelist")).to_contain_text(f"Approved: version 2 of {skill.name}.")
    expect(page.locator(".proposal-state")).to_have_text("approved")
    skill.refresh_from_db()
    version = SkillVersion.objects.get(skill=skill, number=2)
    assert (skill.version, skill.status) == (2, "candidate")
    assert (version.author, version.run) == ("curator", second)
    assert SkillContent.of(skill) == SkillContent.from_snapshot(proposal.snapshot)
    assert set(CSV_TASKS[:4]) <= set(skill.triggers)
    proposal.refresh_from_db()
    assert (proposal.state, proposal.version) == ("approved", version)


def test_a_key_the_operator_revokes_is_refused_on_the_next_call(
    page: Page, live_server: Any
) -> None:
    owner = tenant_fixture("revoking")
    _, other_key = owner.new_key()
    assert api_get(live_server, owner, "/users").status_code == 200

    page.goto("/admin/accounts/apikey/")
    page.fill("#searchbar", owner.api_key.key_id)
    page.locator("#searchbar").press("Enter")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    page.locator(f"input.action-select[value='{owner.api_key.pk}']").check()
    page.select_option("select[name=action]", "revoke_selected")
    page.get_by_role("button", name="Go").click()

    assert messages_shown(page) == ["Revoked 1 API key(s)."]
    refused = api_get(live_server, owner, "/users")
    assert (refused.status_code, refused.json()) == (401, UNAUTHENTICATED)
    owner.api_key.refresh_from_db()
    assert owner.api_key.revoked_at is not None
    # Only the key the operator chose: the client's other key still answers.
    assert api_get(live_server, owner, "/users", key=other_key).status_code == 200


def test_the_dashboard_draws_every_chart_with_the_servers_numbers(
    page: Page, live_server: Any
) -> None:
    from mirix_site.console.services import daily_figures_roll_up
    from mirix_site.search.models import RetrievalLog
    from tests.console.test_dashboard import _seed

    _seed(tenant_fixture("dash"))
    daily_figures_roll_up()
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto("/admin/")
    panels = page.locator("#dashboard section.panel")
    titles = panels.locator("h2").all_inner_texts()
    for title in (
        "Memories by type",
        "Sessions",
        "Turns waiting for extraction",
        "Retrieval latency per day",
        "Learning runs by state",
        "Skills created, edited, promoted and demoted",
        "Health",
        "Worker queues",
    ):
        assert title in titles
    assert any(title.startswith("Retrievals per day") for title in titles)
    assert any(title.startswith("Recommendations followed") for title in titles)
    # Every chart is drawn: an SVG with marks, and the numbers are the server's.
    charts = page.locator("#dashboard svg.chart")
    assert charts.count() >= 8
    for index in range(charts.count()):
        box = charts.nth(index).bounding_box()
        assert box and box["width"] > 300 and box["height"] > 50
    today = page.locator("#dashboard rect.mark[data-series='retrievals']").last
    assert float(today.get_attribute("data-value")) == RetrievalLog.objects.count()
    episodic = page.locator("#dashboard g.bar[data-label='Episodic memories']")
    assert float(episodic.get_attribute("data-value")) == EpisodicMemory.objects.count() > 0
    expect(page.locator("#dashboard")).to_contain_text("PostgreSQL")
    # The panels use the width: at 1280 pixels, side by side (the admin's index is 600 wide).
    tops = [panels.nth(index).bounding_box()["y"] for index in range(panels.count())]
    assert len(set(tops)) < len(tops)
    assert page.locator("#dashboard").bounding_box()["width"] > 800
    screenshot(page, "dashboard")

    # A bar is the list it counts: the closed sessions.
    page.locator("#dashboard g.bar[data-label='closed']").click()
    expect(page).to_have_url(re.compile(r"/admin/conversations/session/\?status__exact=closed"))
    expect(page.locator("#result_list tbody tr")).to_have_count(
        Session.objects.filter(status="closed").count()
    )
