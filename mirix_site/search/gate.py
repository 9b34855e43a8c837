"""The similarity gate's thresholds: measured per embedding model (and, where a kind's texts
call for it, per kind) on related and unrelated text pairs, read by every hybrid search.

- ``min_similarity``: the unrelated pairs' 95th percentile (a result scoring lower looks like
  an unrelated pair, and is dropped), but never above the related pairs' 5th percentile (where
  the model separates the two poorly, keep what is related rather than drop it);
- ``strong_similarity``: above every unrelated pair measured and at least the related pairs'
  90th percentile: a result there is ranked first, so it must be rare and sure.

Each passage is embedded as the index embeds it (the chunks that fit the model) and compared
through its nearest chunk, as the vector lane compares it.
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from mirix_site.common.rowsmemo import rows_memo
from mirix_site.providers.embeddings import EmbeddingProvider
from mirix_site.search.fusion import Thresholds
from mirix_site.search.kinds import SearchableKind
from mirix_site.search.models import GateCalibration

logger = logging.getLogger(__name__)

MIN_RELATED_PAIRS = 10
# Questions and the memories that answer them, written for this project (see its "about").
BUNDLED_PAIRS = Path(__file__).resolve().parent / "calibration" / "pairs.json"


@cache
def _warn_uncalibrated(model: str) -> None:
    logger.warning(
        "no similarity-gate calibration for embedding model %s: the gate is off "
        "(run `manage.py calibrate_gate`)",
        model,
    )


@rows_memo(GateCalibration)
def _model_thresholds(model: str) -> dict[str, Thresholds]:
    """The model's calibrations by kind ("": the model's own). One query."""
    return {
        calibration.kind: Thresholds(calibration.min_similarity, calibration.strong_similarity)
        for calibration in GateCalibration.objects.filter(model=model)
    }


def gate_thresholds(*, model: str, kinds: Sequence[SearchableKind]) -> dict[str, Thresholds | None]:
    """Each kind's thresholds for the model: its own calibration, else the model's, else None
    (the gate is off, with a warning)."""
    names = [kind.name for kind in kinds]
    calibrations = _model_thresholds(model)
    if "" not in calibrations and any(name not in calibrations for name in names):
        _warn_uncalibrated(model)
    return {name: calibrations.get(name, calibrations.get("")) for name in names}


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    lower, upper = int(position), min(int(position) + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def _cosine(left: list[float], right: list[float]) -> float:
    dot = sum(a * b for a, b in zip(left, right, strict=True))
    norm = (sum(a * a for a in left) * sum(b * b for b in right)) ** 0.5
    return dot / norm if norm else 0.0


def gate_measure(
    *, embedder: EmbeddingProvider, related_pairs: Sequence[tuple[str, str]]
) -> dict[str, float | int]:
    """The thresholds and their evidence for the model, from (question, passage) pairs that
    belong together, every other pairing counting as unrelated: GateCalibration's fields."""
    if len(related_pairs) < MIN_RELATED_PAIRS:
        raise ValueError(f"At least {MIN_RELATED_PAIRS} related pairs are needed.")
    questions = embedder.embed([question for question, _ in related_pairs])
    passages = [embedder.chunk(passage) for _, passage in related_pairs]
    vectors = embedder.embed([chunk for chunks in passages for chunk in chunks])
    embedded, start = [], 0
    for chunks in passages:
        embedded.append(vectors[start : start + len(chunks)])
        start += len(chunks)
    related = [
        max(_cosine(question, chunk) for chunk in passage)
        for question, passage in zip(questions, embedded, strict=True)
    ]
    unrelated = [
        max(_cosine(question, chunk) for chunk in passage)
        for i, question in enumerate(questions)
        for j, passage in enumerate(embedded)
        if i != j
    ]
    minimum = min(_percentile(unrelated, 0.95), _percentile(related, 0.05))
    strong = max(*unrelated, _percentile(related, 0.9))
    return {
        "min_similarity": round(minimum, 4),
        "strong_similarity": round(strong, 4),
        "related_pairs": len(related),
        "unrelated_pairs": len(unrelated),
        "related_mean": round(statistics.fmean(related), 4),
        "unrelated_mean": round(statistics.fmean(unrelated), 4),
    }


def bundled_pairs(path: Path = BUNDLED_PAIRS) -> list[tuple[str, str]]:
    """The related pairs the project ships (``calibration/pairs.json`` beside this module, or a
    kind's)."""
    return [tuple(pair) for pair in json.loads(path.read_text())["related"]]


def gate_calibrate(
    *,
    embedder: EmbeddingProvider,
    related_pairs: Sequence[tuple[str, str]],
    kind: SearchableKind | None = None,
) -> GateCalibration:
    """Measure the model (see gate_measure) and store the thresholds for it, or for one kind
    of it."""
    calibration, _ = GateCalibration.objects.update_or_create(
        model=embedder.model_name,
        kind=kind.name if kind is not None else "",
        defaults=gate_measure(embedder=embedder, related_pairs=related_pairs),
    )
    return calibration


# The bundled pairs' measurement by model and pairs file: the pairs ship with the code and a
# model embeds them alike every time, so a process measures them once (the test suite inserts
# them again after every transactional test's flush: 2 s of embedding each time).
_bundled_measured: dict[tuple[str, Path], dict[str, float | int]] = {}


def _bundled_calibrate(
    *, embedder: EmbeddingProvider, kind: SearchableKind | None = None
) -> GateCalibration:
    path = BUNDLED_PAIRS if kind is None else kind.calibration_pairs
    measured = _bundled_measured.get((embedder.model_name, path))
    if measured is None:
        measured = gate_measure(embedder=embedder, related_pairs=bundled_pairs(path))
        _bundled_measured[embedder.model_name, path] = measured
    calibration, _ = GateCalibration.objects.update_or_create(
        model=embedder.model_name,
        kind=kind.name if kind is not None else "",
        defaults=measured,
    )
    return calibration


def gate_calibration_ensure(embedder: EmbeddingProvider) -> list[GateCalibration]:
    """The model's calibration on the bundled pairs, and each kind's that ships pairs of its
    own, unless it has one (of any origin): what setup runs, so that a fresh install searches
    with the gate it was benchmarked with. Returns the calibrations made (none: all there)."""
    from mirix_site.search.kinds import kinds

    have = set(
        GateCalibration.objects.filter(model=embedder.model_name).values_list("kind", flat=True)
    )
    made = []
    if "" not in have:
        made.append(_bundled_calibrate(embedder=embedder))
    for kind in kinds():
        if kind.calibration_pairs is not None and kind.name not in have:
            made.append(_bundled_calibrate(embedder=embedder, kind=kind))
    return made
