"""Task sessions that called no tool, clustered by what was asked: the curator writes one skill
per cluster, or extends the tool-less skill a cluster is near."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mirix_site.providers.embeddings import cosines
from skills.learning.curate import SkillView
from skills.services.grouping import action_key


def task_clusters(
    *,
    tasks: dict[int, str],
    skills: Sequence[SkillView],
    embed: Callable[[list[str]], list[list[float]]] | None,
    threshold: float | None,
) -> tuple[dict[int, int], dict[int, int]]:
    """Cluster the sessions that called no tool by their tasks (session id → label), each
    joining an existing tool-less skill whose text it is as near as ``threshold`` to, else the
    first earlier task that near, else a cluster of its own; without a model or a threshold,
    tasks cluster by their normalized text. Returns the labels and label → skill id."""
    toolless = [skill for skill in skills if not skill.tools]
    ids = list(tasks)
    if not ids:
        return {}, {}
    if embed is None or threshold is None:
        keys: dict[str, int] = {}
        skill_keys = {
            action_key(trigger): skill.id
            for skill in toolless
            for trigger in skill.content.triggers
        }
        labels, skill_labels = {}, {}
        for session_id in ids:
            key = action_key(tasks[session_id])
            label = keys.setdefault(key, len(keys))
            labels[session_id] = label
            if key in skill_keys:
                skill_labels[label] = skill_keys[key]
        return labels, skill_labels
    vectors = embed([tasks[session_id] for session_id in ids])
    skill_vectors = (
        embed([f"{s.content.description}\n" + "\n".join(s.content.triggers) for s in toolless])
        if toolless
        else []
    )
    to_skills = cosines(vectors, skill_vectors) if toolless else None
    among = cosines(vectors, vectors)
    labels: dict[int, int] = {}
    skill_labels: dict[int, int] = {}
    leaders: list[int] = []  # the index of each label's first task
    for index, session_id in enumerate(ids):
        if to_skills is not None and to_skills[index].max() >= threshold:
            skill = toolless[int(to_skills[index].argmax())]
            label = next((lab for lab, sid in skill_labels.items() if sid == skill.id), None)
            if label is None:
                label = len(leaders)
                leaders.append(index)
                skill_labels[label] = skill.id
            labels[session_id] = label
            continue
        near = [lab for lab, leader in enumerate(leaders) if among[index, leader] >= threshold]
        if near:
            labels[session_id] = max(near, key=lambda lab: among[index, leaders[lab]])
        else:
            labels[session_id] = len(leaders)
            leaders.append(index)
    return labels, skill_labels
