"""The retrieval-quality bench's report: every figure of one dataset's run (``_figures``, what
``--json-out`` writes), printed as tables: overall, per category, against the goal and against
the reference."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from bench.common import verdict
from bench.retrieval_quality.datasets import ADVERSARIAL, Dataset
from bench.retrieval_quality.ingest import IngestReport
from bench.retrieval_quality.scoring import (
    CUTOFFS,
    NDCG_CUTOFF,
    REFERENCE,
    REFERENCE_RULE,
    Gold,
    MethodRun,
    gold_of,
    mean_scores,
)

# --- Reporting -----------------------------------------------------------------------------------


TABLE_COLUMNS = [
    ("any@1", "recall_any@1"),
    ("any@5", "recall_any@5"),
    ("any@10", "recall_any@10"),
    ("any@20", "recall_any@20"),
    ("all@5", "recall_all@5"),
    ("all@10", "recall_all@10"),
    ("ndcg@10", f"ndcg@{NDCG_CUTOFF}"),
]


def _table(title: str, rows: list[tuple[str, dict[str, float]]]) -> None:
    print(f"  {title}")
    heading = "".join(f"{name:>8}" for name, _metric in TABLE_COLUMNS)
    print(f"    {'method':<14}{'n':>6}{heading}")
    for label, means in rows:
        cells = "".join(f"{means[metric]:8.3f}" for _name, metric in TABLE_COLUMNS)
        print(f"    {label:<14}{int(means['questions']):>6}{cells}")


@dataclass
class DatasetRun:
    """One dataset's ingest, its runs (one per search_method), and the reference's answers to
    the same questions."""

    dataset: Dataset
    ingest: IngestReport
    runs: list[MethodRun]
    reference: MethodRun

    def categories(self) -> list[str]:
        return sorted({question.category for question in self.dataset.questions})

    def gold(self, category: str | None = None, *, without: str | None = None) -> Gold:
        return gold_of(
            question
            for question in self.dataset.questions
            if (category is None or question.category == category) and question.category != without
        )


def _scores(result: DatasetRun, run: MethodRun) -> dict[str, Any]:
    """One run's means: overall, per category, and under each other gold."""
    dataset = result.dataset
    scores: dict[str, Any] = {
        "overall": mean_scores(run.answers, result.gold()),
        "per_category": {
            category: mean_scores(run.answers, result.gold(category))
            for category in result.categories()
        },
    }
    if dataset.name == "locomo":
        scores["overall_without_category_5"] = mean_scores(
            run.answers, result.gold(without=ADVERSARIAL)
        )
    for label, questions in dataset.variants.items():
        scores[label] = mean_scores(
            run.answers, gold_of(question for question in questions if question.gold)
        )
    return scores


def _question_rows(run: MethodRun) -> list[dict[str, Any]]:
    return [
        {
            "id": answer.question.question_id,
            "category": answer.question.category,
            "gold": sorted(answer.question.gold),
            "ranked": answer.ranked[: max(CUTOFFS)],
            "turns": answer.turns[: 2 * max(CUTOFFS)],
            "error": answer.error,
            "latency_ms": round(answer.latency_ms, 2),
        }
        for answer in run.answers
    ]


def _against_reference(figures: dict[str, Any], metric: str) -> dict[str, dict[str, Any]]:
    """Per lane, its goal metric beside the reference's."""
    reference = figures[REFERENCE]["overall"][metric]
    verdicts = {}
    for name, method in figures["methods"].items():
        value = method["overall"][metric]
        verdicts[name] = {"value": value, "reference": reference, "at_or_above": value >= reference}
    return verdicts


def _figures(result: DatasetRun) -> dict[str, Any]:
    """Every figure of one dataset, as printed and as written by --json-out."""
    dataset = result.dataset
    figures: dict[str, Any] = {
        "split": dataset.split,
        "client_pattern": dataset.client_pattern,
        "users": len(dataset.haystacks),
        "questions_scored": len(dataset.questions),
        "unit": dataset.unit,
        "search_limit": dataset.search_limit,
        "goal": {"metric": dataset.goal[0], "value": dataset.goal[1]},
        "notes": dataset.notes,
        "ingest": asdict(result.ingest),
        "methods": {},
    }
    for run in result.runs:
        figures["methods"][run.method] = _scores(result, run) | {
            "latency_ms": {"p50": run.latency(0.5), "p95": run.latency(0.95)},
            "searches": len(run.answers),
            "errors": run.errors,
            "results": run.shape(),
            "uncited_source_message_ids": run.unknown_source_ids,
            "questions": _question_rows(run),
        }
    figures[REFERENCE] = (
        {"rule": REFERENCE_RULE}
        | _scores(result, result.reference)
        | {"questions": _question_rows(result.reference)}
    )
    figures["against_reference"] = _against_reference(figures, dataset.goal[0])
    return figures


def _search_summary(method: dict[str, Any]) -> str:
    summary = (
        f"p50 {method['latency_ms']['p50']:6.1f} ms  p95 {method['latency_ms']['p95']:6.1f} ms  "
        f"errors {sum(method['errors'].values())} of {method['searches']}"
    )
    if method["errors"]:
        summary += f" {method['errors']}"
    shape = method["results"]
    summary += (
        f"; per search {shape['mean_results']:.1f} memories -> "
        f"{shape['mean_ranked_units']:.1f} units, fewer than {max(CUTOFFS)} units "
        f"{shape['short_lists']}; gate {shape['gates']}"
    )
    if method["uncited_source_message_ids"]:
        summary += f"  source ids not bench turns: {method['uncited_source_message_ids']}"
    return summary


def _report_dataset(result: DatasetRun, figures: dict[str, Any], *, search: str) -> None:
    dataset, methods = result.dataset, figures["methods"]
    # Every table shows the reference beside the server's lanes.
    scored = {**methods, REFERENCE: figures[REFERENCE]}
    print(
        f"\n== {dataset.title}, {dataset.split} split, {dataset.client_pattern} pattern: "
        f"{len(dataset.haystacks)} users, "
        f"{len(dataset.questions)} questions scored, {dataset.unit} level, {search}"
    )
    _report_ingest(result.ingest)
    if dataset.undated_sessions:
        print(f"  sessions added without occurred_at (date unreadable): {dataset.undated_sessions}")
    for note in dataset.notes:
        print(f"  {note}")
    _table("all questions", [(name, method["overall"]) for name, method in scored.items()])
    if dataset.name == "locomo":
        _table(
            "without category 5 (adversarial)",
            [(name, method["overall_without_category_5"]) for name, method in scored.items()],
        )
    for label in dataset.variants:
        counted = figures[REFERENCE][label]["questions"]
        scores = "; ".join(
            f"{name} recall_any@5 {method[label]['recall_any@5']:.3f}"
            for name, method in scored.items()
        )
        print(f"  with {label} ({counted} questions): {scores}")
    metric = dataset.per_category_metric
    all_metric = metric.replace("any", "all")
    print(f"  per category, {metric} / {all_metric}:")
    print(f"    {'category':<27}{'n':>5}" + "".join(f"{name:>17}" for name in scored))
    for category in result.categories():
        cells = [
            f"{method['per_category'][category][metric]:.3f} / "
            f"{method['per_category'][category][all_metric]:.3f}"
            for method in scored.values()
        ]
        count = int(figures[REFERENCE]["per_category"][category]["questions"])
        print(f"    {category:<27}{count:>5}" + "".join(f"{cell:>17}" for cell in cells))
    print(f"  {REFERENCE}: {REFERENCE_RULE}")
    print("  searches (latency with --threads searches in flight):")
    for name, method in methods.items():
        print(f"    {name:<14}{_search_summary(method)}")
    if "hybrid" in methods and set(methods["hybrid"]["results"]["gates"]) == {"off"}:
        print(
            "    note: hybrid ran with the similarity gate off (no calibration for the server's "
            "embedding model: manage.py calibrate_gate)"
        )
    metric, goal = dataset.goal
    print(f"  goal: {dataset.unit}-level {metric} >= {goal} (all questions)")
    for name, method in methods.items():
        value = method["overall"][metric]
        print(f"    {name:<14}{value:.3f}  {verdict(value >= goal)}")
    print(f"  against the {REFERENCE} on {metric} (goal: hybrid never below it)")
    for name, against in figures["against_reference"].items():
        sign, word = (">=", "ok") if against["at_or_above"] else ("<", "BELOW")
        print(
            f"    {name} {against['value']:.3f} {sign} reference {against['reference']:.3f}: {word}"
        )
    if "hybrid" in methods:
        below = [
            f"{category} {methods['hybrid']['per_category'][category][metric]:.3f} < "
            f"{figures[REFERENCE]['per_category'][category][metric]:.3f}"
            for category in result.categories()
            if methods["hybrid"]["per_category"][category][metric]
            < figures[REFERENCE]["per_category"][category][metric]
        ]
        print(f"    hybrid below the reference per category: {'; '.join(below) or 'none'}")


def _report_ingest(report: IngestReport) -> None:
    line = f"  ingest: {report.sessions} sessions, {report.messages} messages in {report.adds} adds"
    if report.add_seconds is None:
        line += " (reused with --skip-ingest)"
    else:
        line += f"; adds {report.add_seconds:.1f} s ({report.adds / report.add_seconds:.1f}/s)"
    if report.searchable_seconds is not None:
        line += (
            f"; add to searchable {report.searchable_seconds:.1f} s "
            f"({report.messages / report.searchable_seconds:.1f} messages/s)"
        )
    print(line)
    if report.failed_messages:
        print(f"  WARNING: {report.failed_messages} messages failed extraction")
    counts = ", ".join(f"{kind} {count}" for kind, count in sorted(report.memory_counts.items()))
    print(
        f"  memories: {counts}; turns cited: by an episodic memory "
        f"{report.turns_cited_by_episodic} of {report.messages}, by any memory "
        f"{report.turns_cited_by_any}"
    )


def _json_safe(value: Any) -> Any:
    """NaN (a mean over no questions, a percentile of no searches) as null: strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    return value
