"""A learning run's life: claimed, fenced, kept alive, held to its caps, finished. Its steps
(``distill``, ``apply``) write through this module's fence; ``execute`` runs them in order.
Durable and repeatable:

- **Claim**: a conditional update takes a run that is queued, or running with a heartbeat
  older than ``LEARNING_RUN_STALE_AFTER`` (its worker died), and counts the attempt. A user's
  runs never overlap: the partial unique index "one running run per user" refuses a second
  claim, which leaves the run queued for the beat to publish again.
- **Fencing**: every write of the run happens in a transaction that first locks the run row
  and checks that it is still running under this attempt; a worker whose claim was taken over
  stops at its next write (``RunLostError``) instead of writing beside the new one.
- **Once only**: a session's lessons are recorded in the transaction that marks it distilled;
  an operation's version in the one that marks its lessons consumed, under a key derived from
  the run, the operation and its lessons. A run claimed again after a kill redoes nothing
  that committed.
- **Caps**: ``CURATOR_MAX_STEPS`` batches and ``CURATOR_MAX_TOKENS_PER_RUN`` tokens (in and out,
  distiller and curator); a run reaching one ends ``budget_exhausted``, its unread lessons
  pooled for the next run. A model that refuses the prompt's size ends it ``context_limit``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from mirix_site.providers.llm import LLMPermanentError, LLMProvider, estimate_tokens
from skills.models import LearningRun
from skills.services.learning import learning_run_publish, learning_run_queued

logger = logging.getLogger(__name__)

MAX_WARNINGS = 200


class RunLostError(Exception):
    """Another worker claimed the run again: this one stops without writing."""


class BudgetExhaustedError(Exception):
    """The run reached its step or token cap."""


class ContextLimitError(Exception):
    """The model refused a prompt for its size."""


class SliceDoneError(Exception):
    """The run used its time slice; what it did is committed, the rest waits for the next."""


def slice_check(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise SliceDoneError


@dataclass
class Claim:
    run: LearningRun
    attempt: int


def learning_run_claim(*, run_id: int) -> Claim | None:
    """Take the run if it is queued or its worker stopped beating; None when it is not to be
    taken (finished, held by a live worker, or another run of the user is running)."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.LEARNING_RUN_STALE_AFTER)
    claimable = Q(state=LearningRun.State.QUEUED) | Q(
        state=LearningRun.State.RUNNING, heartbeat_at__lt=stale
    )
    try:
        with transaction.atomic():
            taken = LearningRun.objects.filter(claimable, pk=run_id).update(
                state=LearningRun.State.RUNNING,
                attempts=F("attempts") + 1,
                heartbeat_at=now,
                started_at=Coalesce(F("started_at"), now),
            )
    except IntegrityError:  # another run of the user holds the "running" slot
        return None
    if not taken:
        return None
    run = LearningRun.objects.get(pk=run_id)
    return Claim(run=run, attempt=run.attempts)


def run_fenced(claim: Claim) -> LearningRun:
    """The run, locked, if this claim still holds it (inside a transaction)."""
    run = LearningRun.objects.select_for_update().get(pk=claim.run.pk)
    if run.state != LearningRun.State.RUNNING or run.attempts != claim.attempt:
        raise RunLostError(run.pk)
    return run


def run_beat(claim: Claim, **counters: int) -> None:
    """Keep the claim fresh, adding to the run's counters."""
    with transaction.atomic():
        run_fenced(claim)
        LearningRun.objects.filter(pk=claim.run.pk).update(
            heartbeat_at=timezone.now(), **{name: F(name) + n for name, n in counters.items()}
        )


def run_warn(claim: Claim, warnings: Sequence[str]) -> None:
    if not warnings:
        return
    with transaction.atomic():
        run = run_fenced(claim)
        run.warnings = (run.warnings + list(warnings))[-MAX_WARNINGS:]
        run.save(update_fields=["warnings"])


class Budget:
    """The run's caps, read from its counters as it goes."""

    def __init__(self, claim: Claim) -> None:
        self.claim = claim

    def spent(self) -> tuple[int, int]:
        run = LearningRun.objects.only("steps", "input_tokens", "output_tokens").get(
            pk=self.claim.run.pk
        )
        return run.steps, run.input_tokens + run.output_tokens

    def check(self, *, step: bool) -> None:
        steps, tokens = self.spent()
        if tokens >= settings.CURATOR_MAX_TOKENS_PER_RUN:
            raise BudgetExhaustedError(
                f"{tokens} tokens spent, the cap is {settings.CURATOR_MAX_TOKENS_PER_RUN}."
            )
        if step and steps >= settings.CURATOR_MAX_STEPS:
            raise BudgetExhaustedError(
                f"{steps} curator steps, the cap is {settings.CURATOR_MAX_STEPS}."
            )


def llm_call(
    claim: Claim, llm: LLMProvider, *, system: str, prompt: str, schema: dict[str, Any], name: str
) -> dict[str, Any]:
    try:
        result = llm.structured(system=system, prompt=prompt, schema=schema, schema_name=name)
    except LLMPermanentError as error:
        if "context" in str(error).lower() or "too long" in str(error).lower():
            raise ContextLimitError(str(error)) from error
        raise
    run_beat(
        claim,
        llm_calls=1,
        input_tokens=result.input_tokens or estimate_tokens(system + prompt),
        output_tokens=result.output_tokens or estimate_tokens(json.dumps(result.data)),
    )
    return result.data


def window_budget() -> int:
    return int(settings.LLM_CONTEXT_WINDOW * 0.8) - settings.CURATOR_RESERVE_TOKENS


def run_finish(claim: Claim, state: str, error: str = "") -> LearningRun:
    """End the run. A run of the user queued meanwhile was sent to a worker that found this
    one running and left it: it is sent again once this end commits (it waited for the beat,
    up to a minute and more, before)."""
    with transaction.atomic():
        run = run_fenced(claim)
        run.state, run.error = state, error[:2000]
        run.finished_at = run.heartbeat_at = timezone.now()
        run.save(update_fields=["state", "error", "finished_at", "heartbeat_at"])
        waiting = learning_run_queued(client_id=run.client_id, end_user_id=run.end_user_id)
        if waiting is not None:
            learning_run_publish(waiting)
    return run


def learning_run_fail(claim: Claim, error: str) -> LearningRun:
    """End the run as failed, saying why (an error the run cannot get past)."""
    return run_finish(claim, LearningRun.State.FAILED, error)


def learning_run_release(claim: Claim) -> bool:
    """Put the run back in the queue (a transient failure: the task retries). False when a
    newer run of the user is queued already: the run stays running and the beat claims it
    again once its heartbeat is stale."""
    try:
        with transaction.atomic():
            run_fenced(claim)
            LearningRun.objects.filter(pk=claim.run.pk).update(state=LearningRun.State.QUEUED)
    except IntegrityError:
        return False
    return True


def learning_runs_due(*, queued_older_than: timedelta) -> list[LearningRun]:
    """Runs the beat publishes: queued ones waiting longer than ``queued_older_than`` (their
    message may be lost) and running ones whose heartbeat is stale; with their users, whom
    their task's labels name."""
    now = timezone.now()
    return list(
        LearningRun.objects.filter(
            Q(state=LearningRun.State.QUEUED, created_at__lt=now - queued_older_than)
            | Q(
                state=LearningRun.State.RUNNING,
                heartbeat_at__lt=now - timedelta(seconds=settings.LEARNING_RUN_STALE_AFTER),
            )
        )
        .select_related("end_user")
        .order_by("pk")[:500]
    )
