from __future__ import annotations

import math
import time

import pytest

from mirix_site.providers.embeddings import (
    EmbeddingPermanentError,
    EmbeddingSettings,
    EmbeddingTransientError,
    GeminiEmbeddingProvider,
    LocalEmbeddingProvider,
    OpenAIEmbeddingProvider,
    embedding_provider,
    embedding_provider_from_settings,
)
from mirix_site.providers.local_model import local_model_file, local_model_load, local_model_weights
from tests.loopback import LoopbackServer, RecordedRequest, Reply, Responder

API_KEY = "sk-test-4f9a1c2e"
LOCAL = EmbeddingSettings(provider="local", model="all-MiniLM-L6-v2")


def cosine(left: list[float], right: list[float]) -> float:
    dot = sum(a * b for a, b in zip(left, right, strict=True))
    return dot / (math.hypot(*left) * math.hypot(*right))


def one_hot(position: int, dimensions: int) -> list[float]:
    vector = [0.0] * dimensions
    vector[position] = 1.0
    return vector


def texts_numbered(count: int) -> list[str]:
    return [f"text {number}" for number in range(count)]


def number_of(text: str) -> int:
    return int(text.removeprefix("text "))


def long_text(words: int) -> str:
    """Paragraphs of numbered sentences, so a test can see where chunks were cut."""
    sentences = [
        f"Sentence {number} says the agent remembered one more detail about the user."
        for number in range(words // 12 + 1)
    ]
    paragraphs = [" ".join(sentences[start : start + 7]) for start in range(0, len(sentences), 7)]
    return "\n\n".join(paragraphs)


# --- Local model ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local() -> LocalEmbeddingProvider:
    provider = embedding_provider(LOCAL)
    assert isinstance(provider, LocalEmbeddingProvider)
    return provider


def test_local_vectors_place_related_texts_closer(local: LocalEmbeddingProvider) -> None:
    coffee, espresso, tax = local.embed(
        [
            "The user drinks a cup of coffee every morning.",
            "Each morning she has an espresso before work.",
            "Quarterly tax filings are due at the end of April.",
        ]
    )

    assert cosine(coffee, espresso) > cosine(coffee, tax) + 0.2
    for vector in (coffee, espresso, tax):
        assert len(vector) == 384
        assert all(isinstance(value, float) for value in vector)
        assert math.hypot(*vector) == pytest.approx(1.0, abs=1e-5)


def test_local_same_text_gives_same_vector_alone_or_in_a_batch(
    local: LocalEmbeddingProvider,
) -> None:
    text = "The user's daughter is called Maya."
    [alone] = local.embed([text])
    in_batch = local.embed(["Something else, a good deal longer than the first text.", text])[1]

    assert local.embed([text]) == [alone]
    assert in_batch == pytest.approx(alone, abs=1e-5)


def test_local_vectors_are_the_models_whether_batched_and_padded_or_not(
    local: LocalEmbeddingProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runtime is ONNX Runtime over an export; the reference is the model as
    # sentence-transformers runs it, which every calibration was measured with.
    from sentence_transformers import SentenceTransformer

    texts = [
        "Short.",
        "The user's daughter is called Maya and she started school in September.",
        long_text(words=400),  # longer than the model reads: truncated alike
    ]
    reference = SentenceTransformer(str(local_model_weights()), device="cpu").encode(
        texts, normalize_embeddings=True
    )

    by_budget = local.embed(texts)  # the long text alone, the two others padded together
    monkeypatch.setattr(LocalEmbeddingProvider, "_BATCH_TOKENS", None)
    monkeypatch.setattr(LocalEmbeddingProvider, "_BATCH_SIZE", 3)
    padded = local.embed(texts)
    monkeypatch.setattr(LocalEmbeddingProvider, "_BATCH_SIZE", 1)
    one_at_a_time = local.embed(texts)

    for vectors in (by_budget, one_at_a_time, padded):
        for vector, expected in zip(vectors, reference.tolist(), strict=True):
            assert vector == pytest.approx(expected, abs=1e-5)


def test_local_batches_hold_at_most_their_token_budget_once_padded(
    local: LocalEmbeddingProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = local.model
    texts = [" ".join(["word"] * count) for count in (3, 40, 5, 120, 8, 60, 2, 250, 30, 9)]
    widths: list[tuple[int, int]] = []
    pooled = model._pooled

    def recording(encodings: list) -> object:
        widths.append((len(encodings), max(len(encoding.ids) for encoding in encodings)))
        return pooled(encodings)

    monkeypatch.setattr(model, "_pooled", recording)
    batched = model.embed(texts, batch_size=4, batch_tokens=128)
    assert sum(count for count, _ in widths) == len(texts)
    # Shortest first, each batch as full as the budget and the count allow; a text longer
    # than the budget alone.
    assert all(count * width <= 128 or count == 1 for count, width in widths)
    assert all(count <= 4 for count, _ in widths)
    assert widths[0] == (4, 10) and widths[-1][0] == 1 and len(widths) < len(texts)
    alone = model.embed(texts, batch_size=1)
    assert abs(batched - alone).max() < 1e-5


def test_local_model_is_exported_once_and_then_read(tmp_path) -> None:
    first = local_model_load(tmp_path, threads=1)
    graph = local_model_file(tmp_path)
    written = graph.stat().st_mtime_ns

    second = local_model_load(tmp_path, threads=1)

    assert graph.stat().st_mtime_ns == written
    assert [path.name for path in tmp_path.iterdir() if path.suffix == ".onnx"] == [graph.name]
    text = ["The agent remembered the user's trip to the lake."]
    assert second.embed(text, batch_size=1).tolist() == first.embed(text, batch_size=1).tolist()


def test_local_embeds_nothing_for_no_texts(local: LocalEmbeddingProvider) -> None:
    assert local.embed([]) == []


def test_local_providers_share_one_loaded_model(local: LocalEmbeddingProvider) -> None:
    first = embedding_provider(LOCAL)
    second = embedding_provider(LOCAL)

    assert isinstance(first, LocalEmbeddingProvider)
    assert isinstance(second, LocalEmbeddingProvider)
    assert first.model is second.model is local.model


def test_local_chunks_fit_the_model_window_and_keep_every_word(
    local: LocalEmbeddingProvider,
) -> None:
    text = long_text(words=3000)

    chunks = local.chunk(text)

    assert local.max_chunk_tokens == 254  # 256 tokens, less [CLS] and [SEP]
    assert len(chunks) >= 10
    assert all(local.count_tokens(chunk) <= local.max_chunk_tokens for chunk in chunks)
    assert " ".join(chunks).split() == text.split()
    # The text has sentence ends everywhere, so no chunk is cut mid-sentence.
    assert all(chunk.endswith(".") for chunk in chunks)


def test_local_chunk_keeps_a_short_text_whole(local: LocalEmbeddingProvider) -> None:
    assert local.chunk("  A short memory.\n") == ["  A short memory.\n"]
    assert local.chunk("") == [""]


def test_local_refuses_a_model_it_cannot_run() -> None:
    with pytest.raises(ValueError, match="all-MiniLM-L6-v2"):
        embedding_provider(EmbeddingSettings(provider="local", model="text-embedding-3-small"))


# --- OpenAI --------------------------------------------------------------------------------------


def openai_settings(loopback: LoopbackServer, **overrides: object) -> EmbeddingSettings:
    values: dict[str, object] = {
        "provider": "openai",
        "model": "text-embedding-3-small",
        "api_base": f"{loopback.url}/v1",
        "api_key": API_KEY,
    }
    values.update(overrides)
    return EmbeddingSettings(**values)  # type: ignore[arg-type]


def openai_reply_reversed(dimensions: int = 1536) -> Responder:
    """Answers each "text N" with a one-hot vector at N, listed in reverse order."""

    def reply(request: RecordedRequest) -> Reply:
        body = request.json
        data = [
            {
                "object": "embedding",
                "index": index,
                "embedding": one_hot(number_of(text), dimensions),
            }
            for index, text in enumerate(body["input"])
        ]
        return Reply(200, {"object": "list", "data": data[::-1], "model": body["model"]})

    return reply


def test_openai_sends_the_documented_request(loopback: LoopbackServer) -> None:
    loopback.respond(openai_reply_reversed())
    provider = embedding_provider(openai_settings(loopback))

    vectors = provider.embed(["text 3", "text 7"])

    assert vectors == [one_hot(3, 1536), one_hot(7, 1536)]
    [request] = loopback.requests
    assert request.method == "POST"
    assert request.path == "/v1/embeddings"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.json == {"model": "text-embedding-3-small", "input": ["text 3", "text 7"]}


def test_openai_asks_for_a_shorter_vector_only_when_configured(loopback: LoopbackServer) -> None:
    loopback.respond(openai_reply_reversed(512))
    provider = embedding_provider(openai_settings(loopback, dimensions=512))

    [vector] = provider.embed(["text 1"])

    assert provider.dimensions == 512
    assert len(vector) == 512
    assert loopback.requests[0].json == {
        "model": "text-embedding-3-small",
        "input": ["text 1"],
        "dimensions": 512,
    }


def test_openai_compatible_server_without_key_gets_no_authorization(
    loopback: LoopbackServer,
) -> None:
    loopback.respond(openai_reply_reversed(768))
    provider = embedding_provider(
        openai_settings(loopback, model="nomic-embed-text", api_key=None, dimensions=768)
    )

    assert provider.embed(["text 5"]) == [one_hot(5, 768)]
    [request] = loopback.requests
    assert "authorization" not in request.headers
    assert request.json == {"model": "nomic-embed-text", "input": ["text 5"]}


def test_openai_needs_dimensions_for_a_model_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="dimensions"):
        embedding_provider(EmbeddingSettings(provider="openai", model="nomic-embed-text"))


def test_openai_batches_256_inputs_per_request_and_restores_order(
    loopback: LoopbackServer,
) -> None:
    loopback.respond(openai_reply_reversed())
    texts = texts_numbered(300)

    vectors = embedding_provider(openai_settings(loopback)).embed(texts)

    assert [len(request.json["input"]) for request in loopback.requests] == [256, 44]
    assert [vector.index(1.0) for vector in vectors] == list(range(300))


def test_openai_keeps_a_request_under_its_token_limit(loopback: LoopbackServer) -> None:
    long_chunk = "word " * 1200  # 6,000 bytes: 2,000 estimated tokens, a full chunk
    loopback.respond(
        lambda request: Reply(
            200,
            {
                "data": [
                    {"index": index, "embedding": one_hot(0, 1536)}
                    for index in range(len(request.json["input"]))
                ]
            },
        )
    )

    vectors = embedding_provider(openai_settings(loopback)).embed([long_chunk] * 200)

    assert len(vectors) == 200
    # 300,000 tokens per request at most: 150 of these chunks, then the other 50.
    assert [len(request.json["input"]) for request in loopback.requests] == [150, 50]


def test_openai_vector_of_the_wrong_size_is_a_permanent_error(loopback: LoopbackServer) -> None:
    loopback.respond_json({"data": [{"index": 0, "embedding": one_hot(0, 1024)}]})

    with pytest.raises(EmbeddingPermanentError, match="1024 dimensions instead of 1536"):
        embedding_provider(openai_settings(loopback)).embed(["text 0"])


@pytest.mark.parametrize(
    "body",
    [
        "<html>gateway</html>",
        {"data": []},
        {"data": [{"index": 0, "embedding": ["not", "numbers"]}]},
        {"data": [{"index": 1, "embedding": one_hot(0, 1536)}]},
    ],
    ids=["not-json", "no-items", "not-numbers", "bad-index"],
)
def test_openai_malformed_answer_is_a_permanent_error(
    loopback: LoopbackServer, body: object
) -> None:
    loopback.respond(lambda _request: Reply(200, body))

    with pytest.raises(EmbeddingPermanentError):
        embedding_provider(openai_settings(loopback)).embed(["text 0"])


@pytest.mark.parametrize("status", [408, 429, 500, 503])
def test_openai_overload_and_server_errors_are_transient(
    loopback: LoopbackServer, status: int
) -> None:
    loopback.respond(lambda _request: Reply(status, {"error": {"message": "busy"}}))

    with pytest.raises(EmbeddingTransientError, match=str(status)):
        embedding_provider(openai_settings(loopback)).embed(["text 0"])


def test_openai_rate_limit_passes_on_retry_after(loopback: LoopbackServer) -> None:
    loopback.respond(lambda _request: Reply(429, {"error": {}}, {"Retry-After": "20"}))

    with pytest.raises(EmbeddingTransientError) as raised:
        embedding_provider(openai_settings(loopback)).embed(["text 0"])

    assert raised.value.retry_after == 20.0


def test_openai_timeout_is_transient(loopback: LoopbackServer) -> None:
    def slow(_request: RecordedRequest) -> Reply:
        time.sleep(1.0)
        return Reply(200, {"data": []})

    loopback.respond(slow)

    with pytest.raises(EmbeddingTransientError, match="Timeout"):
        embedding_provider(openai_settings(loopback, timeout=0.2)).embed(["text 0"])


def test_openai_unreachable_server_is_transient() -> None:
    stopped = LoopbackServer()
    stopped.start()
    stopped.stop()  # its port is now closed: connecting is refused
    settings = EmbeddingSettings(
        provider="openai", model="text-embedding-3-small", api_base=f"{stopped.url}/v1"
    )

    with pytest.raises(EmbeddingTransientError):
        embedding_provider(settings).embed(["text 0"])


def test_openai_rejected_key_is_permanent_and_not_repeated(loopback: LoopbackServer) -> None:
    loopback.respond(
        lambda _request: Reply(401, {"error": {"message": f"Incorrect API key: {API_KEY}"}})
    )

    with pytest.raises(EmbeddingPermanentError, match="401") as raised:
        embedding_provider(openai_settings(loopback)).embed(["text 0"])

    assert API_KEY not in str(raised.value)


def test_openai_client_error_shows_the_server_message_without_the_key(
    loopback: LoopbackServer,
) -> None:
    loopback.respond(
        lambda _request: Reply(400, {"error": {"message": f"bad input (key {API_KEY})"}})
    )

    with pytest.raises(EmbeddingPermanentError, match="bad input") as raised:
        embedding_provider(openai_settings(loopback)).embed(["text 0"])

    assert API_KEY not in str(raised.value)


def test_remote_chunks_fit_the_estimate_even_without_spaces() -> None:
    provider = embedding_provider(
        EmbeddingSettings(provider="openai", model="text-embedding-3-small")
    )
    blob = "QUJD" * 5000  # 20,000 characters of base64 with nowhere to break

    chunks = provider.chunk(blob)

    assert len(chunks) > 1
    assert all(provider.count_tokens(chunk) <= 2048 for chunk in chunks)
    assert "".join(chunks) == blob


def test_remote_token_estimate_counts_cjk_as_a_token_per_character() -> None:
    provider = embedding_provider(
        EmbeddingSettings(provider="gemini", model="gemini-embedding-001")
    )

    assert provider.count_tokens("abcdef") == 2
    assert provider.count_tokens("记忆服务") == 4


# --- Gemini --------------------------------------------------------------------------------------


def gemini_settings(loopback: LoopbackServer, **overrides: object) -> EmbeddingSettings:
    values: dict[str, object] = {
        "provider": "gemini",
        "model": "gemini-embedding-001",
        "api_base": loopback.url,
        "api_key": API_KEY,
    }
    values.update(overrides)
    return EmbeddingSettings(**values)  # type: ignore[arg-type]


def gemini_reply(request: RecordedRequest) -> Reply:
    """Answers each "text N" with a one-hot vector at N."""
    embeddings = [
        {"values": one_hot(number_of(item["content"]["parts"][0]["text"]), 768)}
        for item in request.json["requests"]
    ]
    return Reply(200, {"embeddings": embeddings})


def test_gemini_sends_the_documented_request(loopback: LoopbackServer) -> None:
    loopback.respond(gemini_reply)
    provider = embedding_provider(gemini_settings(loopback))

    vectors = provider.embed(["text 2", "text 9"])

    assert isinstance(provider, GeminiEmbeddingProvider)
    assert provider.dimensions == 768
    assert vectors == [one_hot(2, 768), one_hot(9, 768)]
    [request] = loopback.requests
    assert request.method == "POST"
    assert request.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert request.headers["x-goog-api-key"] == API_KEY
    assert "authorization" not in request.headers
    assert request.json == {
        "requests": [
            {
                "model": "models/gemini-embedding-001",
                "content": {"parts": [{"text": text}]},
                "outputDimensionality": 768,
            }
            for text in ["text 2", "text 9"]
        ]
    }


def test_gemini_batches_100_inputs_per_request_in_order(loopback: LoopbackServer) -> None:
    loopback.respond(gemini_reply)

    vectors = embedding_provider(gemini_settings(loopback)).embed(texts_numbered(300))

    assert [len(request.json["requests"]) for request in loopback.requests] == [100, 100, 100]
    assert [vector.index(1.0) for vector in vectors] == list(range(300))


def test_gemini_shortened_vectors_come_back_unit_length(loopback: LoopbackServer) -> None:
    # Below 3,072 dimensions Gemini's vectors are not normalised.
    loopback.respond_json({"embeddings": [{"values": [3.0, 4.0] + [0.0] * 766}]})

    [vector] = embedding_provider(gemini_settings(loopback)).embed(["text 0"])

    assert vector[:2] == pytest.approx([0.6, 0.8])
    assert math.hypot(*vector) == pytest.approx(1.0)


def test_gemini_vector_of_the_wrong_size_is_a_permanent_error(loopback: LoopbackServer) -> None:
    loopback.respond_json({"embeddings": [{"values": one_hot(0, 3072)}]})

    with pytest.raises(EmbeddingPermanentError, match="3072 dimensions instead of 768"):
        embedding_provider(gemini_settings(loopback)).embed(["text 0"])


def test_gemini_missing_embeddings_are_a_permanent_error(loopback: LoopbackServer) -> None:
    loopback.respond_json({"embeddings": [{"values": one_hot(0, 768)}]})

    with pytest.raises(EmbeddingPermanentError, match="one embedding per input"):
        embedding_provider(gemini_settings(loopback)).embed(["text 0", "text 1"])


@pytest.mark.parametrize("status", [429, 503])
def test_gemini_overload_is_transient(loopback: LoopbackServer, status: int) -> None:
    loopback.respond(lambda _request: Reply(status, {"error": {"status": "UNAVAILABLE"}}))

    with pytest.raises(EmbeddingTransientError):
        embedding_provider(gemini_settings(loopback)).embed(["text 0"])


def test_gemini_timeout_is_transient(loopback: LoopbackServer) -> None:
    def slow(_request: RecordedRequest) -> Reply:
        time.sleep(1.0)
        return Reply(200, {"embeddings": []})

    loopback.respond(slow)

    with pytest.raises(EmbeddingTransientError, match="Timeout"):
        embedding_provider(gemini_settings(loopback, timeout=0.2)).embed(["text 0"])


def test_gemini_rejected_key_is_permanent_and_not_repeated(loopback: LoopbackServer) -> None:
    loopback.respond(
        lambda _request: Reply(403, {"error": {"message": f"API key {API_KEY} not valid"}})
    )

    with pytest.raises(EmbeddingPermanentError, match="403") as raised:
        embedding_provider(gemini_settings(loopback)).embed(["text 0"])

    assert API_KEY not in str(raised.value)


# --- Choosing a provider -------------------------------------------------------------------------


def test_settings_never_show_the_api_key() -> None:
    assert API_KEY not in repr(
        EmbeddingSettings(provider="openai", model="text-embedding-3-small", api_key=API_KEY)
    )


def test_unknown_provider_is_refused() -> None:
    with pytest.raises(ValueError, match="cohere"):
        embedding_provider(EmbeddingSettings(provider="cohere", model="embed-english-v3.0"))


def test_provider_from_settings_uses_the_configured_service(
    loopback: LoopbackServer, settings
) -> None:
    settings.EMBEDDING_PROVIDER = "openai"
    settings.EMBEDDING_MODEL = "text-embedding-3-large"
    settings.EMBEDDING_API_BASE = f"{loopback.url}/v1"
    settings.EMBEDDING_API_KEY = API_KEY
    loopback.respond(openai_reply_reversed(3072))

    provider = embedding_provider_from_settings()
    [vector] = provider.embed(["text 4"])

    assert isinstance(provider, OpenAIEmbeddingProvider)
    assert (provider.model_name, provider.dimensions) == ("text-embedding-3-large", 3072)
    assert vector == one_hot(4, 3072)
    [request] = loopback.requests
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.json == {"model": "text-embedding-3-large", "input": ["text 4"]}


def test_provider_from_settings_defaults_to_the_local_model(
    local: LocalEmbeddingProvider, settings
) -> None:
    settings.EMBEDDING_PROVIDER = "local"
    settings.EMBEDDING_MODEL = "all-MiniLM-L6-v2"
    settings.EMBEDDING_API_BASE = None
    settings.EMBEDDING_API_KEY = None

    provider = embedding_provider_from_settings()

    assert isinstance(provider, LocalEmbeddingProvider)
    assert provider.model_name == "all-MiniLM-L6-v2"
    assert provider.model is local.model
