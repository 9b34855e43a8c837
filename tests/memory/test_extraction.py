"""Extraction: from stored turns to memories, deterministic and through an LLM's wire format."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone

from accounts.models import EndUser
from accounts.services import end_user_delete_own
from memory.crypto import secret_decrypt
from memory.extractors import CONTEXT_CHARS
from memory.extractors.prompt import EXTRACTION_SYSTEM
from memory.models import (
    EpisodicEmbedding,
    EpisodicMemory,
    ExtractionJob,
    KnowledgeVaultItem,
    ResourceMemory,
    SemanticMemory,
)
from memory.services import (
    extraction,
    extraction_job_requeue,
    extraction_job_run,
    extraction_jobs_recover,
)
from memory.services.extraction import RUN_LOCK_BASE
from mirix_site.providers.embeddings import EmbeddingTransientError
from mirix_site.providers.llm import LLMTransientError
from mirix_site.search.spaces import write_embedders
from sessions.models import Message
from tests.factories import TenantFixture, chat_turns
from tests.loopback import LoopbackServer, Reply, openai_reply


def add(org: TenantFixture, messages: list[dict[str, Any]], **body: Any) -> dict[str, Any]:
    response = org.api.post(
        "/memory/add", {"user_id": "sam", "messages": messages, **body}, format="json"
    )
    assert response.status_code == 202, response.json()
    return response.json()


def run_queued_jobs() -> list[ExtractionJob]:
    ran = []
    for job in ExtractionJob.objects.filter(status=ExtractionJob.Status.QUEUED).order_by("id"):
        ran.extend(extraction_job_run(organization_id=job.organization_id, job_id=job.pk))
    return ran


def test_deterministic_extraction_stores_events_resources_and_vault_items(
    org: TenantFixture,
) -> None:
    sent = add(
        org,
        chat_turns(
            "I moved the design doc to https://docs.example.com/design and the budget "
            "to budget.xlsx. Reach me at sam@example.com. "
            "Our staging key is sk-proj-abcdefghijklmnopqrstuvwxyz123456",
            "Thanks, I have noted where the design doc lives.",
        ),
        filter_tags={"project": "apollo"},
    )
    [job] = run_queued_jobs()
    assert job.status == ExtractionJob.Status.SUCCEEDED
    assert job.message_count == 2
    message_ids = [int(value) for value in sent["message_ids"]]

    [episode] = EpisodicMemory.objects.all()
    assert episode.source_message_ids == message_ids
    assert episode.filter_tags == {"project": "apollo"}
    assert episode.actor == "user"
    assert "design doc" in episode.summary
    assert "sk-proj-" not in episode.details  # the key went to the vault, not into the episode
    assert "assistant: Thanks" in episode.details

    resources = {row.resource_type: row for row in ResourceMemory.objects.all()}
    assert resources["link"].uri == "https://docs.example.com/design"
    assert resources["file"].title == "budget.xlsx"

    vault = {row.entry_type: row for row in KnowledgeVaultItem.objects.all()}
    assert set(vault) == {"email", "openai-key"}
    assert vault["openai-key"].sensitivity == "high"
    assert "sk-proj-" not in vault["openai-key"].secret_value_encrypted  # encrypted at rest
    assert secret_decrypt(vault["openai-key"].secret_value_encrypted).startswith("sk-proj-")
    assert "sk-proj-" not in vault["openai-key"].caption

    assert set(Message.objects.values_list("extraction", flat=True)) == {"processed"}
    embedding = EpisodicEmbedding.objects.get(memory=episode)
    assert embedding.model == "all-MiniLM-L6-v2"
    assert len(embedding.embedding) == 384
    # Stemmed keywords find it: "designs docs" is "design doc" to BM25.
    found = org.api.get(
        "/memory/search",
        {
            "user_id": "sam",
            "query": "designs docs",
            "memory_type": "episodic",
            "search_method": "bm25",
        },
    ).json()
    assert [result["id"] for result in found["results"]] == [str(episode.pk)]


def test_rerunning_extraction_stores_nothing_twice(org: TenantFixture) -> None:
    add(org, chat_turns("Dinner with Ana at https://maps.example.com/bistro on Friday", "Enjoy!"))
    run_queued_jobs()
    counts = (
        EpisodicMemory.objects.count(),
        ResourceMemory.objects.count(),
        EpisodicEmbedding.objects.count(),
    )
    # As if the worker died after storing but before the messages were marked: run again.
    job = ExtractionJob.objects.get()
    Message.objects.update(extraction=Message.Extraction.PENDING)
    ExtractionJob.objects.filter(pk=job.pk).update(status=ExtractionJob.Status.QUEUED)
    run_queued_jobs()
    again = (
        EpisodicMemory.objects.count(),
        ResourceMemory.objects.count(),
        EpisodicEmbedding.objects.count(),
    )
    assert again == counts == (1, 1, 1)
    # A job already run has nothing to claim.
    assert extraction_job_run(organization_id=job.organization_id, job_id=job.pk) == []


def test_exchanges_of_one_batch_become_one_event_each(org: TenantFixture) -> None:
    add(org, chat_turns("First question about tea", "An answer about tea"), session_id="s1")
    add(org, chat_turns("Second question about rain", "An answer about rain"), session_id="s1")
    add(org, chat_turns("Other session question", "Other answer"), session_id="s2")
    [job] = run_queued_jobs()
    assert job.message_count == 6
    summaries = sorted(EpisodicMemory.objects.values_list("summary", flat=True))
    assert summaries == [
        "user: First question about tea",
        "user: Other session question",
        "user: Second question about rain",
    ]


def test_an_episode_carries_the_end_of_the_turn_it_replies_to(org: TenantFixture) -> None:
    question = "Sure. " + "Here is a sentence about nothing much. " * 8 + "Which tea do you like?"
    add(org, chat_turns("Tell me about tea", question), session_id="s1")
    run_queued_jobs()
    # A later batch: its first exchange replies to the last turn of the batch before.
    add(org, chat_turns("Green tea, always", "Noted"), session_id="s1")
    add(org, chat_turns("Unrelated", "Fine. Anything else?"), session_id="s2")
    add(org, chat_turns("No thanks", "Bye"), session_id="s2")
    ramble = " ".join(f"word{number}" for number in range(80)) + " and so on"
    add(org, chat_turns("Go on", ramble) + chat_turns("Stop there", "Ok"), session_id="s3")
    run_queued_jobs()
    details = {row.summary: row.details for row in EpisodicMemory.objects.all()}
    # A session's first exchange replies to nothing (not to another session's last turn).
    assert details["user: Tell me about tea"].startswith("user: Tell me about tea")
    assert details["user: Unrelated"].startswith("user: Unrelated")
    context, *lines = details["user: Green tea, always"].splitlines()
    assert lines == ["user: Green tea, always", "assistant: Noted"]
    # The end of a long turn, on sentence boundaries, at most CONTEXT_CHARS of it.
    assert context.startswith("(replying to assistant: Here is a sentence")
    assert context.endswith("about nothing much. Which tea do you like?)")
    assert len(context) <= len("(replying to assistant: )") + CONTEXT_CHARS
    assert details["user: No thanks"].splitlines() == [
        "(replying to assistant: Fine. Anything else?)",
        "user: No thanks",
        "assistant: Bye",
    ]
    # One sentence longer than that: its end.
    context = details["user: Stop there"].splitlines()[0]
    quoted = context.removeprefix("(replying to assistant: ").removesuffix(")")
    assert quoted.startswith("…word") and quoted.endswith("word79 and so on")
    assert len(quoted) <= CONTEXT_CHARS and ramble.endswith(quoted[1:])


def test_one_run_takes_several_users_queued_jobs_whatever_their_organization(
    org: TenantFixture, other_org: TenantFixture
) -> None:
    for user_id in ("ana", "ben", "cy"):
        org.api.post(
            "/memory/add",
            {"user_id": user_id, "messages": chat_turns(f"I am {user_id}", "hi")},
            format="json",
        )
    other_org.api.post(
        "/memory/add", {"user_id": "dee", "messages": chat_turns("I am dee", "hi")}, format="json"
    )
    first = ExtractionJob.objects.filter(organization=org.organization).order_by("id").first()
    ran = extraction_job_run(organization_id=first.organization_id, job_id=first.pk)
    # Another organization's queued job shares the run (and its embedding call)...
    assert [job.end_user.user_id for job in ran] == ["ana", "ben", "cy", "dee"]
    assert all(job.status == "succeeded" and job.memory_counts == {"episodic": 1} for job in ran)
    # ...and each memory belongs to its own user's organization.
    assert sorted(
        EpisodicMemory.objects.values_list("organization__name", "end_user__user_id")
    ) == [("alice", "ana"), ("alice", "ben"), ("alice", "cy"), ("bob", "dee")]


def test_a_large_job_runs_alone_and_leaves_the_rest_to_other_workers(
    org: TenantFixture, settings
) -> None:
    settings.EXTRACTION_BATCH_MESSAGES = 4
    for user_id in ("ana", "ben"):
        org.api.post(
            "/memory/add",
            {"user_id": user_id, "messages": chat_turns("a", "b", "c", "d")},
            format="json",
        )
    first = ExtractionJob.objects.order_by("id").first()
    ran = extraction_job_run(organization_id=first.organization_id, job_id=first.pk)
    assert [job.pk for job in ran] == [first.pk]
    assert ExtractionJob.objects.get(end_user__user_id="ben").status == "queued"


# --- Fair claiming: a task is a token, the claim chooses the work -----------------------------


class Broker:
    """The ingest queue as Redis delivers it, first published first out: extraction tasks
    are recorded when published (after the commit) and delivered one at a time."""

    def __init__(self, capture_on_commit: Any) -> None:
        self.capture_on_commit = capture_on_commit
        self.published: list[tuple[int, str]] = []

    def publish(self, job_id: int, organization_id: str, user_id: str) -> bool:
        self.published.append((job_id, organization_id))
        return True

    def add(self, tenant: TenantFixture, user_id: str, *texts: str) -> None:
        with self.capture_on_commit(execute=True):
            response = tenant.api.post(
                "/memory/add", {"user_id": user_id, "messages": chat_turns(*texts)}, format="json"
            )
        assert response.status_code == 202, response.json()

    def deliver(self, *, newest: bool = False) -> list[str]:
        """Run the first task published (``newest``: the last one, as a duplicate or a retry
        may come); whom its run served, as ``organization/user``."""
        job_id, organization_id = self.published.pop(-1 if newest else 0)
        with self.capture_on_commit(execute=True):
            ran = extraction_job_run(organization_id=organization_id, job_id=job_id)
        return [f"{job.organization.name}/{job.end_user.user_id}" for job in ran]


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any) -> Broker:
    broker = Broker(django_capture_on_commit_callbacks)
    monkeypatch.setattr("memory.services.extraction.extraction_job_publish", broker.publish)
    return broker


def test_a_light_tenants_turns_do_not_wait_behind_a_heavy_tenants_backlog(
    org: TenantFixture, other_org: TenantFixture, broker: Broker, settings
) -> None:
    settings.EXTRACTION_JOBS_PER_RUN = 1
    heavy, light = org, other_org
    for number in range(10):
        broker.add(heavy, f"importer-{number}", "An old session", "Its reply")
    assert broker.deliver() == ["alice/importer-0"]
    broker.add(light, "chatter", "Hello there", "Hi")  # published behind nine heavy tasks
    # The next task names a heavy job: it takes the light tenant's, the least recently served.
    assert broker.deliver() == ["bob/chatter"]
    assert broker.deliver() == ["alice/importer-1"]
    broker.add(light, "chatter", "Still there?", "Yes")
    assert broker.deliver() == ["bob/chatter"]
    # The heavy backlog goes on, oldest first; as many runs as tasks, none wasted.
    assert [broker.deliver() for _ in range(8)] == [
        [f"alice/importer-{number}"] for number in range(2, 10)
    ]
    assert not broker.published
    assert not ExtractionJob.objects.filter(status=ExtractionJob.Status.QUEUED).exists()


def test_users_of_one_organization_take_turns_whichever_task_comes_first(
    org: TenantFixture, broker: Broker, settings
) -> None:
    settings.EXTRACTION_JOBS_PER_RUN = 1
    settings.EXTRACTION_BATCH_MESSAGES = 2
    broker.add(org, "ana", "a1", "r", "a2", "r", "a3", "r")  # three batches
    broker.add(org, "ben", "b1", "r", "b2", "r")  # two
    while broker.published:
        # Newest first, as duplicates or retries may arrive: a user whose batch filled queued
        # a new job, and the others' older jobs go before it all the same.
        broker.deliver(newest=True)
    served = ExtractionJob.objects.filter(message_count__gt=0).order_by("started_at")
    assert [job.end_user.user_id for job in served] == ["ana", "ben", "ana", "ben", "ana"]
    assert not Message.objects.filter(extraction=Message.Extraction.PENDING).exists()


def test_waiting_organizations_share_a_run_and_one_alone_fills_it(
    org: TenantFixture, other_org: TenantFixture, broker: Broker, settings
) -> None:
    settings.EXTRACTION_JOBS_PER_RUN = 4
    for number in range(6):
        broker.add(org, f"a{number}", "Hi", "Hello")
    for number in range(3):
        broker.add(other_org, f"b{number}", "Hi", "Hello")
    # Round robin: each organization's oldest job, then each one's second: two each.
    assert broker.deliver() == ["alice/a0", "alice/a1", "bob/b0", "bob/b1"]
    # Bob's last job is taken as soon as it is one of the organizations' turns.
    assert broker.deliver() == ["alice/a2", "alice/a3", "alice/a4", "bob/b2"]
    broker.add(org, "a6", "Hi", "Hello")
    # With nobody else waiting, alice may fill the run.
    assert broker.deliver() == ["alice/a5", "alice/a6"]


def test_a_job_too_large_for_the_run_is_passed_over_for_smaller_ones(
    org: TenantFixture, broker: Broker, settings
) -> None:
    settings.EXTRACTION_BATCH_MESSAGES = 5
    broker.add(org, "ana", "a", "b")
    broker.add(org, "ben", "a", "b", "c", "d")
    broker.add(org, "cy", "a", "b")
    assert broker.deliver() == ["alice/ana", "alice/cy"]
    assert broker.deliver() == ["alice/ben"]


def test_a_run_takes_a_bounded_amount_of_text_cut_between_exchanges(
    org: TenantFixture, other_org: TenantFixture, broker: Broker, settings
) -> None:
    # A run's time grows with its text: a long history is taken a bounded part at a time, so
    # another tenant's new turns wait for at most one such part.
    settings.EXTRACTION_BATCH_CHARS = 1000
    reply = "Sure. " + "All right. " * 30  # ~340 characters
    history = []
    for number in range(3):
        history += [f"Question {number}: " + "tell me more " * 10, reply]
    broker.add(org, "ana", *history)  # three ~470-character exchanges
    broker.add(other_org, "dee", "Hi", "Hello")
    assert broker.deliver() == ["alice/ana"]
    # Two whole exchanges, under 1,000 characters; the third waits, queued again.
    assert EpisodicMemory.objects.filter(end_user__user_id="ana").count() == 2
    assert Message.objects.filter(extraction=Message.Extraction.PENDING).count() == 4
    # Bob's short turns and the rest of ana's fit in the next run together.
    assert broker.deliver() == ["bob/dee", "alice/ana"]
    assert EpisodicMemory.objects.filter(end_user__user_id="ana").count() == 3
    assert not Message.objects.filter(extraction=Message.Extraction.PENDING).exists()


def test_an_exchange_longer_than_the_text_budget_is_cut_at_a_turn(
    org: TenantFixture, broker: Broker, settings
) -> None:
    settings.EXTRACTION_BATCH_CHARS = 1000
    broker.add(org, "ana", "x" * 1500, "y" * 200)
    assert broker.deliver() == ["alice/ana"]
    assert Message.objects.filter(extraction=Message.Extraction.PROCESSED).count() == 1
    assert broker.deliver() == ["alice/ana"]
    assert not Message.objects.filter(extraction=Message.Extraction.PENDING).exists()


@pytest.mark.django_db(transaction=True)
def test_a_job_another_worker_holds_is_replaced_by_the_next(
    org: TenantFixture, broker: Broker, settings
) -> None:
    settings.EXTRACTION_JOBS_PER_RUN = 1
    for user_id in ("ana", "ben"):
        add(org, chat_turns(f"I am {user_id}", "Hi"), user_id=user_id)
    ana_job = ExtractionJob.objects.get(end_user__user_id="ana")
    held, release = threading.Event(), threading.Event()

    def other_worker() -> None:
        # Its own connection, in the middle of a claim that took ana's job.
        try:
            with transaction.atomic():
                ExtractionJob.objects.select_for_update().get(pk=ana_job.pk)
                held.set()
                release.wait(timeout=30)
        finally:
            connection.close()

    thread = threading.Thread(target=other_worker)
    thread.start()
    try:
        assert held.wait(timeout=30)
        ran = extraction_job_run(organization_id=ana_job.organization_id, job_id=ana_job.pk)
    finally:
        release.set()
        thread.join()
    assert [job.end_user.user_id for job in ran] == ["ben"]


def test_a_failed_job_waits_for_its_own_retry(
    org: TenantFixture, other_org: TenantFixture, broker: Broker
) -> None:
    broker.add(org, "ana", "Hi", "Hello")
    failed_job = ExtractionJob.objects.get()
    # As extraction_job_requeue leaves a job whose attempt failed: queued, one attempt.
    ExtractionJob.objects.filter(pk=failed_job.pk).update(attempts=1)
    retry = broker.published.pop()
    broker.add(other_org, "dee", "Hi", "Hello")
    # Any other task would take it at once and spend its attempts without a pause.
    assert broker.deliver() == ["bob/dee"]
    broker.published.append(retry)
    assert broker.deliver() == ["alice/ana"]


class _EmbeddingsDown:
    """An embedding service that answers 503: every run that stores a memory fails."""

    model_name = "down"

    def chunk(self, text: str) -> list[str]:
        return [text]

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise EmbeddingTransientError("503 from the embedding service")


def test_the_other_jobs_of_a_failed_run_lose_no_attempt_and_next_run_alone(
    org: TenantFixture, other_org: TenantFixture, broker: Broker, monkeypatch
) -> None:
    broker.add(org, "ana", "Hi", "Hello")
    broker.add(other_org, "dee", "Hi", "Hello")
    embedders = "memory.services.extraction.write_embedders"
    working = write_embedders
    monkeypatch.setattr(embedders, lambda: [_EmbeddingsDown()])
    ana_job, _ = broker.published[0]
    with pytest.raises(EmbeddingTransientError):
        broker.deliver()  # ana's task: its run took dee's job too
    # What the task does with the job it names: queued for its retry, one attempt spent.
    extraction_job_requeue(
        organization_id=org.organization.pk, job_id=ana_job, error="503", final=False
    )
    attempts = dict(Message.objects.values_list("end_user__user_id", "extraction_attempts"))
    assert attempts == {"ana": 1, "dee": 0}
    assert set(ExtractionJob.objects.values_list("status", flat=True)) == {"queued"}
    monkeypatch.setattr(embedders, working)
    broker.add(other_org, "eve", "Hi", "Hello")
    # Dee's own task, published again by the recovery job, runs dee's job alone...
    assert broker.deliver() == ["bob/dee"]
    # ...and a fresh task leaves ana's job to its retry.
    assert broker.deliver() == ["bob/eve"]
    broker.published.append((ana_job, org.organization.pk))
    assert broker.deliver() == ["alice/ana"]


def test_only_enabled_memory_components_are_stored(org: TenantFixture) -> None:
    config = {"meta_agent_config": {"agents": ["episodic_memory_agent"]}}
    org.api.post("/agents/meta/initialize", {"config": config}, format="json")
    add(org, chat_turns("See https://example.com and mail me at sam@example.com", "Sure"))
    run_queued_jobs()
    assert EpisodicMemory.objects.count() == 1
    assert not ResourceMemory.objects.exists()
    assert not KnowledgeVaultItem.objects.exists()


# --- With an LLM, over the OpenAI chat-completions wire format --------------------------------


@pytest.fixture
def llm(loopback: LoopbackServer, settings) -> LoopbackServer:
    settings.LLM_PROVIDER = "openai"
    settings.LLM_MODEL = "test-model"
    settings.LLM_API_BASE = f"{loopback.url}/v1"
    settings.LLM_API_KEY = "sk-loopback"
    return loopback


def _proposals_citing(request_json: dict[str, Any]) -> dict[str, Any]:
    """What a model would answer: one memory of each kind, citing the first turn it saw."""
    prompt = request_json["messages"][-1]["content"]
    first_id = int(prompt.split("[", 2)[1].split("]")[0])
    return {
        "core": [{"label": "human", "value": "Sam prefers tea.", "mode": "append"}],
        "episodic": [
            {
                "summary": "Sam said he switched to tea",
                "details": "",
                "actor": "Sam",
                "source_message_ids": [first_id],
            }
        ],
        "semantic": [
            {"name": "Sam's drink", "summary": "Sam prefers tea", "source_message_ids": [first_id]}
        ],
        "procedural": [],
        "resource": [],
        "knowledge_vault": [
            {
                "caption": "Sam's door code",
                "secret_value": "4711",
                "sensitivity": "high",
                "source_message_ids": [first_id],
            }
        ],
    }


def test_llm_extraction_makes_one_call_per_batch_and_stores_once(
    org: TenantFixture, llm: LoopbackServer
) -> None:
    llm.respond(lambda request: Reply(200, openai_reply(_proposals_citing(request.json))))
    first = add(org, chat_turns("I switched from coffee to tea", "Good choice"))
    add(org, chat_turns("My door code is 4711", "Stored safely"))

    [job] = run_queued_jobs()
    assert len(llm.requests) == 1  # two adds, one batch, one call
    request = llm.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-loopback"
    assert request.json["response_format"]["json_schema"]["name"] == "memory_proposals"
    prompt = request.json["messages"][-1]["content"]
    assert "I switched from coffee to tea" in prompt and "My door code is 4711" in prompt
    assert job.llm_calls == 1 and job.input_tokens == 321 and job.output_tokens == 45
    assert job.memory_counts == {"core": 1, "episodic": 1, "semantic": 1, "knowledge_vault": 1}

    episode = EpisodicMemory.objects.get()
    assert episode.source_message_ids == [int(first["message_ids"][0])]
    assert SemanticMemory.objects.get().name == "Sam's drink"
    assert secret_decrypt(KnowledgeVaultItem.objects.get().secret_value_encrypted) == "4711"

    # The same batch extracted again (a crash before the messages were marked): same answer,
    # nothing stored twice.
    Message.objects.update(extraction=Message.Extraction.PENDING)
    ExtractionJob.objects.filter(pk=job.pk).update(status=ExtractionJob.Status.QUEUED)
    run_queued_jobs()
    assert len(llm.requests) == 2
    assert EpisodicMemory.objects.count() == SemanticMemory.objects.count() == 1
    assert KnowledgeVaultItem.objects.count() == 1
    assert (
        org.api.get("/memory/components", {"user_id": "sam", "memory_type": "core"}).json()[
            "memories"
        ]["core"]["items"][0]["value"]
        == "Sam prefers tea."
    )


def test_an_llm_batch_never_mixes_filter_tags(org: TenantFixture, llm: LoopbackServer) -> None:
    # A memory the model writes may cite any turn it read: each call reads one set of tags.
    llm.respond(lambda request: Reply(200, openai_reply(_proposals_citing(request.json))))
    add(org, chat_turns("Project a's code name is bluebird", "Noted"), filter_tags={"p": "a"})
    add(org, chat_turns("Project b ships in June", "Noted"), filter_tags={"p": "b"})

    while ExtractionJob.objects.filter(status=ExtractionJob.Status.QUEUED).exists():
        run_queued_jobs()

    prompts = [request.json["messages"][-1]["content"] for request in llm.requests]
    assert len(prompts) == 2
    assert "bluebird" in prompts[0] and "June" not in prompts[0]
    assert "June" in prompts[1] and "bluebird" not in prompts[1]
    tags = {tuple(episode.filter_tags.items()) for episode in EpisodicMemory.objects.all()}
    assert tags == {(("p", "a"),), (("p", "b"),)}
    assert set(Message.objects.values_list("extraction", flat=True)) == {"processed"}


def test_an_llm_reads_turns_differing_only_in_their_own_ids_in_one_call(
    org: TenantFixture, llm: LoopbackServer
) -> None:
    # A client keeping its message ids as tags (TURN_TAG_KEYS): one scope, one call; the
    # memory keeps each turn's tags, and a filter naming one turn finds it.
    def citing_every_turn(request_json: dict[str, Any]) -> dict[str, Any]:
        prompt = request_json["messages"][-1]["content"]
        cited = sorted({int(found) for found in re.findall(r"\[(\d+)\]", prompt)})
        proposals = _proposals_citing(request_json)
        return proposals | {"episodic": [{**proposals["episodic"][0], "source_message_ids": cited}]}

    llm.respond(lambda request: Reply(200, openai_reply(citing_every_turn(request.json))))
    first = add(
        org,
        [{"role": "user", "content": "I switched to tea"}],
        filter_tags={"p": "a", "message_id": "1"},
    )
    second = add(
        org, [{"role": "assistant", "content": "Noted"}], filter_tags={"p": "a", "message_id": "2"}
    )
    add(org, chat_turns("Project b ships in June", "Noted"), filter_tags={"p": "b"})

    while ExtractionJob.objects.filter(status=ExtractionJob.Status.QUEUED).exists():
        run_queued_jobs()

    assert len(llm.requests) == 2
    ids = [int(first["message_ids"][0]), int(second["message_ids"][0])]
    episode = EpisodicMemory.objects.get(source_message_ids=ids)
    assert episode.filter_tags == {"p": "a"}
    assert episode.turn_tags == [{"p": "a", "message_id": "1"}, {"p": "a", "message_id": "2"}]
    found = org.api.get(
        "/memory/search",
        {
            "user_id": "sam",
            "query": "tea",
            "memory_type": "episodic",
            "filter_tags": '{"message_id": "2"}',
        },
    ).json()["results"]
    assert [result["id"] for result in found] == [str(episode.pk)]


def test_the_llm_extractor_follows_the_system_prompts_the_client_gave_its_agents(
    org: TenantFixture, other_org: TenantFixture, llm: LoopbackServer
) -> None:
    llm.respond(lambda request: Reply(200, openai_reply(_proposals_citing(request.json))))
    for tenant in (org, other_org):
        tenant.api.post("/agents/meta/initialize", {"provider": "openai"}, format="json")
    org.api.patch(
        "/agents/by-name/episodic/system",
        {"system_prompt": "Record only trips, with their dates."},
        format="json",
    )
    org.api.patch("/agents/by-name/meta_memory_agent/system", {"system_prompt": "Write in French."})
    add(org, chat_turns("We fly to Lisbon on 3 May", "Have fun"))
    add(other_org, chat_turns("We fly to Oslo on 9 May", "Nice"))

    while ExtractionJob.objects.filter(status=ExtractionJob.Status.QUEUED).exists():
        run_queued_jobs()

    systems = {
        request.json["messages"][-1]["content"]: request.json["messages"][0]["content"]
        for request in llm.requests
    }
    (ours,) = [system for prompt, system in systems.items() if "Lisbon" in prompt]
    (theirs,) = [system for prompt, system in systems.items() if "Oslo" in prompt]
    assert ours.startswith(EXTRACTION_SYSTEM)
    assert "[episodic_memory_agent]\nRecord only trips, with their dates." in ours
    assert "[meta_memory_agent]\nWrite in French." in ours
    # Another client's agents are its own; one that gave none gets the instructions alone.
    assert theirs == EXTRACTION_SYSTEM


def test_a_failed_llm_call_leaves_the_messages_pending_for_the_retry(
    org: TenantFixture, llm: LoopbackServer
) -> None:
    llm.respond_json({"error": {"message": "overloaded"}}, status=503)
    add(org, chat_turns("I switched from coffee to tea", "Good choice"))
    job = ExtractionJob.objects.get()
    with pytest.raises(LLMTransientError):
        extraction_job_run(organization_id=job.organization_id, job_id=job.pk)
    extraction_job_requeue(
        organization_id=job.organization_id, job_id=job.pk, error="503", final=False
    )
    job.refresh_from_db()
    assert job.status == ExtractionJob.Status.QUEUED
    assert set(Message.objects.values_list("extraction", flat=True)) == {"pending"}
    assert set(Message.objects.values_list("extraction_attempts", flat=True)) == {1}
    assert not EpisodicMemory.objects.exists()

    llm.respond(lambda request: Reply(200, openai_reply(_proposals_citing(request.json))))
    [retried] = run_queued_jobs()
    assert retried.status == ExtractionJob.Status.SUCCEEDED
    assert retried.attempts == 2
    assert set(Message.objects.values_list("extraction", flat=True)) == {"processed"}
    assert EpisodicMemory.objects.count() == 1


def test_messages_are_given_up_after_the_attempt_limit(
    org: TenantFixture, llm: LoopbackServer, settings
) -> None:
    settings.EXTRACTION_MAX_ATTEMPTS = 2
    llm.respond_json({"error": "down"}, status=503)
    add(org, chat_turns("hello", "hi"))
    for _ in range(2):
        job = ExtractionJob.objects.get(status=ExtractionJob.Status.QUEUED)
        with pytest.raises(LLMTransientError):
            extraction_job_run(organization_id=job.organization_id, job_id=job.pk)
        extraction_job_requeue(
            organization_id=job.organization_id, job_id=job.pk, error="503", final=False
        )
    assert set(Message.objects.values_list("extraction", flat=True)) == {"failed"}


def test_the_task_retries_with_backoff_then_gives_up(
    org: TenantFixture, llm: LoopbackServer, settings
) -> None:
    from memory.tasks import extract_memories

    llm.respond_json({"error": "overloaded"}, status=503)
    add(org, chat_turns("hello", "hi"))
    job = ExtractionJob.objects.get()
    # Eager execution runs each retry at once instead of after its countdown.
    extract_memories.apply(args=[job.organization_id, job.pk])
    # Never marked processed: after EXTRACTION_MAX_ATTEMPTS failed calls the turns are given
    # up (and the retries left find nothing to extract).
    assert len(llm.requests) == settings.EXTRACTION_MAX_ATTEMPTS
    assert set(Message.objects.values_list("extraction", flat=True)) == {"failed"}
    assert not EpisodicMemory.objects.exists()
    job.refresh_from_db()
    assert job.attempts == settings.EXTRACTION_MAX_ATTEMPTS + 1


def test_an_error_raised_while_the_database_is_lost_is_retried_not_failed(
    org: TenantFixture, monkeypatch
) -> None:
    # A clean-up on the dead connection fails with an error of its own type; the job must
    # stay for the retry (the recovery beat job would take it only minutes later), not fail.
    from celery.exceptions import Retry
    from django.db import OperationalError

    from memory import tasks

    add(org, chat_turns("hello", "hi"))
    job = ExtractionJob.objects.get()

    def run_then_lose_the_database(**_: Any) -> None:
        try:
            raise OperationalError("server closed the connection unexpectedly")
        except OperationalError:
            raise RuntimeError("rollback on a closed connection") from None

    monkeypatch.setattr(tasks, "extraction_job_run", run_then_lose_the_database)
    with pytest.raises(Retry):
        tasks.extract_memories.apply(args=[job.organization_id, job.pk], throw=True)
    job.refresh_from_db()
    assert job.status == ExtractionJob.Status.QUEUED
    assert set(Message.objects.values_list("extraction", flat=True)) == {"pending"}


def test_backoff_grows_with_jitter_and_honours_retry_after() -> None:
    from memory.tasks import _backoff

    for retries in range(6):
        ceiling = min(900.0, 30.0 * 2**retries)
        assert all(ceiling / 2 <= _backoff(retries) <= ceiling for _ in range(20))
    assert _backoff(0, hint=7.0) == 7.0
    assert _backoff(0, hint=99999.0) == 900.0


def test_the_recovery_job_queues_forgotten_turns(org: TenantFixture, settings) -> None:
    add(org, chat_turns("hello", "hi"))
    ExtractionJob.objects.all().delete()  # as if the job row had never been written
    assert extraction_jobs_recover() == 0  # too recent: the add may still be queuing it
    Message.objects.update(created_at=timezone.now() - timedelta(minutes=3))
    assert extraction_jobs_recover() == 1
    assert ExtractionJob.objects.get().status == ExtractionJob.Status.QUEUED


@contextlib.contextmanager
def runner_session(*jobs: ExtractionJob) -> Iterator[psycopg.Connection]:
    """Another database session holding the jobs' run locks, as the worker running them does;
    on leaving, it is gone (PostgreSQL ends a closed session's backend, and with it its locks,
    a moment after the client goes: under load, long enough for the next statement to see
    the locks still held)."""
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as session:
        for job in jobs:
            session.execute("SELECT pg_advisory_lock(%s)", [RUN_LOCK_BASE + job.pk])
        backend = session.info.backend_pid
        yield session
    deadline = time.monotonic() + 10
    with connection.cursor() as cursor:
        while True:
            # A transaction sees pg_stat_activity as it was at its first read: take it anew.
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [backend])
            if cursor.fetchone() is None:
                break
            assert time.monotonic() < deadline, "the runner's session did not end"
            time.sleep(0.01)


def test_a_running_job_goes_back_to_the_queue_once_its_runners_session_is_gone(
    org: TenantFixture,
) -> None:
    add(org, chat_turns("hello", "hi"))
    job = ExtractionJob.objects.get()
    ExtractionJob.objects.update(status=ExtractionJob.Status.RUNNING, started_at=timezone.now())
    with runner_session(job):
        # Its runner is alive: neither the beat job nor a second delivery touches it.
        assert extraction_jobs_recover() == 0
        assert extraction_job_run(organization_id=job.organization_id, job_id=job.pk) == []
        assert ExtractionJob.objects.get().status == ExtractionJob.Status.RUNNING
    # Its worker died, and its session with it: queued again and published at once.
    assert extraction_jobs_recover() == 1
    assert ExtractionJob.objects.get().status == ExtractionJob.Status.QUEUED
    [ran] = run_queued_jobs()
    assert ran.status == ExtractionJob.Status.SUCCEEDED and ran.message_count == 2
    # The lost run counted as a failed attempt: turns that kill every worker are given up.
    assert set(Message.objects.values_list("extraction_attempts", flat=True)) == {1}


def test_a_run_lock_held_past_the_hard_time_limit_is_not_believed(org: TenantFixture) -> None:
    add(org, chat_turns("hello", "hi"))
    job = ExtractionJob.objects.get()
    # No run outlives the hard time limit (Celery kills it): a lock still held then is a
    # session a connection pooler kept, not a runner.
    ExtractionJob.objects.update(
        status=ExtractionJob.Status.RUNNING, started_at=timezone.now() - timedelta(hours=1)
    )
    with runner_session(job):
        assert extraction_jobs_recover() == 1
    assert ExtractionJob.objects.get().status == ExtractionJob.Status.QUEUED


def test_a_delivery_sent_again_after_its_worker_died_runs_the_jobs_it_held(
    org: TenantFixture,
) -> None:
    for user_id in ("ana", "ben"):
        org.api.post(
            "/memory/add",
            {"user_id": user_id, "messages": chat_turns(f"I am {user_id}", "hi")},
            format="json",
        )
    jobs = list(ExtractionJob.objects.order_by("id"))
    # One run held both (it takes the organization's small jobs together), then died.
    ExtractionJob.objects.update(status=ExtractionJob.Status.RUNNING, started_at=timezone.now())
    with runner_session(*jobs) as dying:
        # Celery sends the task again as soon as it sees the worker gone; the database may
        # take a moment longer to end the dead worker's session.
        threading.Timer(0.5, dying.close).start()
        began = time.monotonic()
        ran = extraction_job_run(
            organization_id=jobs[0].organization_id, job_id=jobs[0].pk, redelivered=True
        )
    # It waited for the lock rather than give up (then it would have run nothing).
    assert time.monotonic() - began >= 0.5
    assert [job.pk for job in ran] == [job.pk for job in jobs]
    assert all(job.status == ExtractionJob.Status.SUCCEEDED for job in ran)
    assert EpisodicMemory.objects.count() == 2


def test_no_detected_value_is_left_in_plain_text_outside_the_vault(org: TenantFixture) -> None:
    values = {
        "email": "sam.jones@example.com",
        "phone": "+1 415 555 0134",
        "openai-key": "sk-proj-abcdefghijklmnopqrstuvwxyz123456",
        "password": "hunter2hunter",
    }
    text = (
        f"The report is at https://docs.example.com/q3 and in q3.xlsx. Mail {values['email']} "
        f"or call {values['phone']}. The key is {values['openai-key']}, password: "
        f"{values['password']}"
    )
    add(
        org,
        [
            {"role": "user", "content": text},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": f"Photo for {values['email']}"},
                    {"type": "image_url", "image_url": {"url": "https://img.example.com/a.png"}},
                ],
            },
            {"role": "assistant", "content": "Noted."},
        ],
    )
    run_queued_jobs()
    vault = {row.entry_type: row for row in KnowledgeVaultItem.objects.all()}
    assert set(vault) == set(values)
    texts = {
        "episodic": [f"{row.summary}\n{row.details}" for row in EpisodicMemory.objects.all()],
        "resource": [
            f"{row.title}\n{row.summary}\n{row.content}" for row in ResourceMemory.objects.all()
        ],
        "vault caption": [row.caption for row in vault.values()],
    }
    assert {row.resource_type for row in ResourceMemory.objects.all()} >= {"link", "file", "image"}
    for kind, stored in texts.items():
        assert stored, kind
        for value in values.values():
            assert all(value not in memory for memory in stored), (kind, value)
    # Each caption names its own kind of value in its place.
    assert "<email>" in vault["email"].caption and "<phone>" in vault["phone"].caption


def test_an_llms_memories_hold_no_sensitive_value_outside_the_vault(
    org: TenantFixture, llm: LoopbackServer
) -> None:
    email, key = "sam.jones@example.com", "sk-proj-abcdefghijklmnopqrstuvwxyz123456"

    def answer(request) -> Reply:
        proposals = _proposals_citing(request.json)
        proposals["core"][0]["value"] = f"Sam's e-mail is {email}."
        proposals["episodic"][0]["details"] = f"Sam shared the key {key} and {email}"
        proposals["semantic"][0]["summary"] = f"Reach Sam at {email}"
        proposals["knowledge_vault"] = [
            {
                "caption": f"Sam's API key {key}",
                "secret_value": key,
                "sensitivity": "high",
                "source_message_ids": proposals["episodic"][0]["source_message_ids"],
            }
        ]
        return Reply(200, openai_reply(proposals))

    llm.respond(answer)
    add(org, chat_turns(f"My key is {key}, mail me at {email}", "Stored"))
    run_queued_jobs()

    stored = [
        org.api.get("/memory/components", {"user_id": "sam"}).json()["memories"],
        [item.caption for item in KnowledgeVaultItem.objects.all()],
    ]
    assert email not in json.dumps(stored) and key not in json.dumps(stored)
    assert SemanticMemory.objects.get().summary == "Reach Sam at <email>"
    assert secret_decrypt(KnowledgeVaultItem.objects.get().secret_value_encrypted) == key


class Background(threading.Thread):
    """A function run on its own thread and database connection, as a worker or a second
    request would; ``result()`` joins it and re-raises what it raised."""

    def __init__(self, target: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self._target_fn = target
        self._outcome: tuple[bool, Any] | None = None
        self._backend_pid: int | None = None

    def run(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self._backend_pid = cursor.fetchone()[0]
            self._outcome = (True, self._target_fn())
        except BaseException as error:  # handed to the test thread
            self._outcome = (False, error)
        finally:
            connection.close()

    def waits_for_a_lock(self, timeout: float = 30.0) -> bool:
        """Whether its database session comes to wait for a lock (PostgreSQL says so) while the
        thread runs: a wait seen, not inferred from the thread being slow."""
        deadline = time.monotonic() + timeout
        while self.is_alive() and time.monotonic() < deadline:
            if self._backend_pid is not None:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                        [self._backend_pid],
                    )
                    row = cursor.fetchone()
                if row is not None and row[0] == "Lock":
                    return True
            time.sleep(0.01)
        return False

    def result(self, timeout: float = 30.0) -> Any:
        self.join(timeout)
        assert self._outcome is not None, "still running"
        succeeded, value = self._outcome
        if not succeeded:
            raise value
        return value


def _nothing_left_of_sam() -> None:
    assert not EndUser.objects.filter(user_id="sam").exists()
    assert not Message.objects.exists()
    assert not EpisodicMemory.objects.exists() and not SemanticMemory.objects.exists()
    assert not KnowledgeVaultItem.objects.exists()
    assert not ExtractionJob.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_deleting_a_user_during_their_extraction_waits_for_it_then_deletes_its_memories(
    org: TenantFixture, llm: LoopbackServer
) -> None:
    release = threading.Event()

    def stalled(request: Any) -> Reply:
        release.wait(30)
        return Reply(200, openai_reply(_proposals_citing(request.json)))

    llm.respond(stalled)
    add(org, chat_turns("My door code is 4711", "Stored safely"))
    job = ExtractionJob.objects.get()
    extraction = Background(
        lambda: extraction_job_run(organization_id=job.organization_id, job_id=job.pk)
    )
    extraction.start()
    deadline = time.monotonic() + 30
    while not llm.requests:  # the job is mid-run: its user held, its turns locked
        assert time.monotonic() < deadline, "the job never called the model"
        time.sleep(0.02)

    deletion = Background(lambda: org.api.delete("/users/sam"))
    deletion.start()
    assert deletion.waits_for_a_lock()  # waits for the job in flight rather than racing it
    release.set()

    [ran] = extraction.result()
    assert ran.status == ExtractionJob.Status.SUCCEEDED
    response = deletion.result()
    assert response.status_code == 200, response.json()
    # The memories the job stored as the deletion waited went with the user.
    assert response.json()["deleted"]["memory.EpisodicMemory"] == 1
    _nothing_left_of_sam()


@pytest.mark.django_db(transaction=True)
def test_a_claimed_extraction_that_runs_into_the_users_deletion_stops(
    org: TenantFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    add(org, chat_turns("My door code is 4711", "Stored safely"))
    job = ExtractionJob.objects.get()
    end_user = EndUser.objects.get(user_id="sam")
    claimed, go = threading.Event(), threading.Event()
    execute = extraction._jobs_execute

    def execute_after_the_deletion_began(*args: Any) -> list[ExtractionJob]:
        claimed.set()
        go.wait(30)
        return execute(*args)

    # Sequencing only: the job is claimed (running), then the deletion starts, then the job
    # goes on to extract.
    monkeypatch.setattr(extraction, "_jobs_execute", execute_after_the_deletion_began)
    extraction_run = Background(
        lambda: extraction_job_run(organization_id=job.organization_id, job_id=job.pk)
    )
    extraction_run.start()
    assert claimed.wait(30)
    deleted, release = threading.Event(), threading.Event()

    def deletion_held_before_commit() -> dict[str, int]:
        with transaction.atomic():
            counts = end_user_delete_own(tenant=org.tenant, end_user=end_user)
            deleted.set()
            release.wait(30)
        return counts

    deletion = Background(deletion_held_before_commit)
    deletion.start()
    assert deleted.wait(30)
    go.set()
    assert extraction_run.waits_for_a_lock()  # waits for the deletion to finish
    release.set()

    assert deletion.result()["memory.ExtractionJob"] == 1
    assert extraction_run.result() == []  # noticed its user was gone, and stored nothing
    _nothing_left_of_sam()


@pytest.mark.django_db(transaction=True)
def test_an_add_that_comes_during_the_users_deletion_recreates_the_user(
    org: TenantFixture,
) -> None:
    add(org, chat_turns("An old turn", "Noted"))
    end_user = EndUser.objects.get(user_id="sam")
    deleted, release = threading.Event(), threading.Event()

    def deletion_held_before_commit() -> None:
        with transaction.atomic():
            end_user_delete_own(tenant=org.tenant, end_user=end_user)
            deleted.set()
            release.wait(30)

    deletion = Background(deletion_held_before_commit)
    deletion.start()
    assert deleted.wait(30)
    adding = Background(
        lambda: org.api.post(
            "/memory/add",
            {"user_id": "sam", "messages": chat_turns("A new turn", "Noted")},
            format="json",
        )
    )
    adding.start()
    assert adding.waits_for_a_lock()
    release.set()

    deletion.result()
    assert adding.result().status_code == 202
    [recreated] = EndUser.objects.filter(user_id="sam")
    assert recreated.pk != end_user.pk
    assert list(Message.objects.values_list("end_user_id", flat=True)) == [recreated.pk] * 2
