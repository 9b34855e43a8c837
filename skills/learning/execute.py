"""A claimed learning run, from its sessions to its skills: distill, curate, finish."""

from __future__ import annotations

from collections.abc import Sequence

from mirix_site.common.database import database_unreachable
from mirix_site.common.history import AUTO_DREAM, CURATOR, history_context
from mirix_site.providers.embeddings import EmbeddingProvider, EmbeddingTransientError
from mirix_site.providers.llm import (
    LLMPermanentError,
    LLMProvider,
    LLMTransientError,
    llm_provider_from_settings,
)
from mirix_site.search.spaces import write_embedders
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


def _task_threshold(model: str) -> float | None:
    """How near two tasks' embeddings are when they are one kind of task: the similarity gate's
    "strong" threshold for skills and the model (above every unrelated pair it measured)."""
    from mirix_site.search.gate import gate_thresholds
    from skills.search import SKILL_KIND

    thresholds = gate_thresholds(model=model, kinds=[SKILL_KIND])[SKILL_KIND.name]
    return thresholds.strong_similarity if thresholds is not None else None


def learning_run_work(*, claim: Claim, deadline: float | None) -> LearningRun:
    """Run a claimed run with the server's model and embedders, its changes recorded as the
    curator's (or auto-dream's): what the worker's task does, and ``learn_skills --wait`` in
    the operator's terminal. Raises as ``learning_run_execute`` does."""
    llm = llm_provider_from_settings()
    embedders = write_embedders()
    # What the run changes (experiences it consumes, ...) is the curator's, or auto-dream's.
    actor = AUTO_DREAM if claim.run.trigger == LearningRun.Trigger.AUTO_DREAM else CURATOR
    try:
        with history_context(actor, run_id=claim.run.pk):
            return learning_run_execute(
                claim=claim,
                llm=llm,
                embedders=embedders,
                threshold=_task_threshold(embedders[0].model_name),
                deadline=deadline,
            )
    finally:
        if llm is not None:
            llm.close()


def learning_fault_passing(error: Exception) -> bool:
    """Whether a run stopped by ``error`` is to be put back in the queue and tried again (a
    provider's overload, a database restart) rather than failed."""
    return isinstance(error, LLMTransientError | EmbeddingTransientError) or database_unreachable(
        error
    )
