"""A claimed learning run, from its sessions to its skills: distill, curate, finish."""

from __future__ import annotations

from collections.abc import Sequence

from mirix_site.providers.embeddings import EmbeddingProvider
from mirix_site.providers.llm import LLMPermanentError, LLMProvider
from skills.learning.apply import lessons_curate
from skills.learning.distill import sessions_distill
from skills.learning.runs import (
    Budget,
    BudgetExhaustedError,
    Claim,
    ContextLimitError,
    run_finish,
)
from skills.models import LearningRun


def learning_run_execute(
    *,
    claim: Claim,
    llm: LLMProvider | None,
    embedders: Sequence[EmbeddingProvider],
    threshold: float | None,
    deadline: float | None = None,
) -> LearningRun:
    """Run a claimed run to its end (see the module). Raises RunLostError when another worker
    took it over, SliceDoneError when ``deadline`` (a ``time.monotonic()``) passed between two
    steps; transient provider errors propagate for the task to retry."""
    budget = Budget(claim)
    try:
        sessions_distill(claim, llm, budget, deadline)
        lessons_curate(
            deadline=deadline,
            claim=claim,
            llm=llm,
            embedder=embedders[0] if embedders else None,
            embedders=embedders,
            budget=budget,
            threshold=threshold,
        )
    except BudgetExhaustedError as error:
        return run_finish(claim, LearningRun.State.BUDGET_EXHAUSTED, str(error))
    except ContextLimitError as error:
        return run_finish(claim, LearningRun.State.CONTEXT_LIMIT, str(error))
    except LLMPermanentError as error:
        return run_finish(claim, LearningRun.State.FAILED, f"The model failed: {error}")
    return run_finish(claim, LearningRun.State.SUCCEEDED)
