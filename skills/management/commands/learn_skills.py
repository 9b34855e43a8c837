"""``manage.py learn_skills ORG USER [--client CLIENT] [--dry-run] [--wait]``: queue a learning
run of one end user now, as ``POST /learning-runs`` does, or with ``--wait`` run it in this
process and report what it learned. ``learn_skills --all-due [--dry-run]``: queue the runs the
trigger should have queued (``learning_due``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from accounts.management.scopes import end_user_named, tenant_named
from accounts.models import EndUser
from accounts.tenancy import Tenant
from skills.learning.execute import learning_fault_passing, learning_run_work
from skills.learning.runs import (
    RunLostError,
    learning_run_claim,
    learning_run_fail,
    learning_run_release,
)
from skills.models import LearningRun
from skills.services.learning import (
    LearningRunPlan,
    learning_due,
    learning_run_plan,
    learning_run_request,
    learning_run_trigger,
)


def _who(tenant: Tenant, end_user: EndUser) -> str:
    return f"{end_user.user_id} of {tenant.organization.pk} (client {tenant.client.name})"


class Command(BaseCommand):
    help = (
        "Queue a learning run of an end user now, from their closed task sessions no run has "
        "taken and the lessons waiting for a curator (--wait: run it here and report); "
        "--all-due: queue every run the trigger should have queued."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("organization", nargs="?", help="the organization's id")
        parser.add_argument("user", nargs="?", help="the end user's id, as the API names them")
        parser.add_argument(
            "--client",
            help="the client whose sessions are learned from, by id or name (default: the "
            "organization's only client)",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="say which sessions and lessons the run would learn from; change nothing",
        )
        parser.add_argument(
            "--wait", action="store_true", help="run it in this process and report what it did"
        )
        parser.add_argument(
            "--all-due",
            action="store_true",
            help="every user whose closed task sessions reached SKILL_TRIGGER_SESSION_THRESHOLD "
            "(or who has a run waiting) without the run their close should have queued",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        named = options["organization"] is not None or options["user"] is not None
        if options["all_due"]:
            if named or options["client"] or options["wait"]:
                raise CommandError("--all-due takes no ORG, USER, --client or --wait.")
            self._all_due(dry_run=options["dry_run"])
            return
        if options["organization"] is None or options["user"] is None:
            raise CommandError("Name the organization and the end user (or give --all-due).")
        if options["dry_run"] and options["wait"]:
            raise CommandError("--dry-run and --wait exclude each other.")
        tenant = tenant_named(organization_id=options["organization"], client=options["client"])
        end_user = end_user_named(tenant=tenant, user_id=options["user"])
        plan = learning_run_plan(tenant=tenant, end_user=end_user)
        if not plan.learnable:
            raise CommandError(
                f"No closed task session of {_who(tenant, end_user)} is left to learn from."
            )
        if options["dry_run"]:
            self._plan_show(plan)
            joins = f", joining queued run #{plan.waiting.pk}" if plan.waiting else ""
            self.stdout.write(
                f"Dry run: a learning run of {_who(tenant, end_user)} would learn from "
                f"{len(plan.sessions)} task sessions and {len(plan.lessons)} waiting lessons"
                f"{joins}. Nothing was changed."
            )
        elif options["wait"]:
            self._run_here(tenant, end_user, plan)
        else:
            run, created = learning_run_request(tenant=tenant, end_user=end_user)
            sessions = run.session_links.count()
            if created:
                self.stdout.write(
                    f"Queued learning run #{run.pk} of {_who(tenant, end_user)}: {sessions} "
                    f"task sessions, {len(plan.lessons)} waiting lessons; a worker runs it."
                )
            else:
                self.stdout.write(
                    f"Learning run #{run.pk} of {_who(tenant, end_user)} was queued already: "
                    f"{len(plan.sessions)} task sessions joined it, {sessions} in all."
                )

    def _plan_show(self, plan: LearningRunPlan) -> None:
        for session in plan.sessions:
            closed = session.closed_at.isoformat(timespec="seconds") if session.closed_at else ""
            self.stdout.write(f"  task session {session.session_id}  closed {closed}")
        for lesson in plan.lessons:
            waits = f" ({lesson.pool_reason})" if lesson.pool_reason else ""
            self.stdout.write(f"  lesson #{lesson.pk} {lesson.status}: {lesson.title}{waits}")

    def _run_here(self, tenant: Tenant, end_user: EndUser, plan: LearningRunPlan) -> None:
        # Claimed in the transaction that queues it: the message the queuing sends a worker on
        # commit then finds the run held, and leaves it to this process.
        with transaction.atomic():
            run, _created = learning_run_request(tenant=tenant, end_user=end_user)
            claim = learning_run_claim(run_id=run.pk)
        if claim is None:
            raise CommandError(
                f"Learning run #{run.pk} is queued, but another run of {_who(tenant, end_user)} "
                "is running (a user's runs never overlap): a worker takes it after that one."
            )
        self.stdout.write(
            f"  running learning run #{run.pk} here: {run.session_links.count()} task sessions, "
            f"{len(plan.lessons)} waiting lessons"
        )
        try:
            run = learning_run_work(claim=claim, deadline=None)
        except RunLostError:
            raise CommandError(
                f"Learning run #{run.pk} was claimed by a worker, which finishes it."
            ) from None
        except Exception as error:
            if learning_fault_passing(error):
                learning_run_release(claim)
                raise CommandError(
                    f"Learning run #{run.pk} stopped on a passing fault ({error}); it is queued "
                    "again and a worker retries it."
                ) from error
            learning_run_fail(claim, f"{type(error).__name__}: {error}")
            raise
        self.stdout.write(
            f"  distilled {run.experiences_distilled} lessons from its sessions; the curator "
            f"placed {run.experiences_consumed} and pooled {run.experiences_pooled}; "
            f"{run.llm_calls} model calls, {run.input_tokens + run.output_tokens:,} tokens"
        )
        summary = (
            f"Learning run #{run.pk} of {_who(tenant, end_user)} {run.state}: "
            f"{run.skills_created} skills created, {run.skills_edited} edited, "
            f"{run.skills_merged} merged, {run.skills_deprecated} deprecated."
        )
        if run.state == LearningRun.State.FAILED:
            raise CommandError(f"{summary} {run.error}")
        self.stdout.write(f"{summary} {run.error}".rstrip())

    def _all_due(self, *, dry_run: bool) -> None:
        due = learning_due()
        for number, user in enumerate(due, start=1):
            session = user.session
            line = (
                f"  {session.end_user.user_id} of {session.organization_id} "
                f"(client {session.client.name}): {user.unlearned} task sessions to learn from"
                + (", a run waiting" if user.waiting else "")
            )
            if not dry_run:
                run = learning_run_trigger(session=session)
                line += f": run #{run.pk} ({number} of {len(due)})" if run else ": none queued"
            self.stdout.write(line)
        threshold = settings.SKILL_TRIGGER_SESSION_THRESHOLD
        if dry_run:
            self.stdout.write(
                f"Dry run: {len(due)} users are due a learning run (threshold {threshold} "
                "closed task sessions). Nothing was changed."
            )
        else:
            self.stdout.write(
                f"Queued the learning runs of {len(due)} users due one (threshold {threshold} "
                "closed task sessions)."
            )
