"""The LLM providers against a real HTTP server on loopback: what they send, what they return,
and which failures the caller may retry."""

from __future__ import annotations

import base64
import socket
import time
from email.utils import formatdate
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from mirix_site.providers.llm import (
    AnthropicProvider,
    GeminiProvider,
    LLMPermanentError,
    LLMProvider,
    LLMSettings,
    LLMTransientError,
    OpenAICompatibleProvider,
    PromptImage,
    StructuredResult,
    estimate_tokens,
    llm_provider,
    llm_provider_from_settings,
)
from tests.loopback import LoopbackServer, RecordedRequest, Reply

API_KEY = "sk-test-secret-0123456789"
SYSTEM = "You extract memories from chat transcripts."
PROMPT = "user: I moved to Lisbon last week."
SCHEMA_NAME = "memory_batch"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"memories": {"type": "array", "items": {"type": "string"}}},
    "required": ["memories"],
}
ANSWER = {"memories": ["The user moved to Lisbon."]}


def provider_for(
    loopback: LoopbackServer, provider: str, *, api_key: str | None = API_KEY, timeout: float = 5.0
) -> LLMProvider:
    return llm_provider(
        LLMSettings(
            provider=provider,
            model="test-model",
            api_base=loopback.url,
            api_key=api_key,
            timeout=timeout,
            max_output_tokens=777,
        )
    )


def ask(provider: LLMProvider) -> StructuredResult:
    return provider.structured(system=SYSTEM, prompt=PROMPT, schema=SCHEMA, schema_name=SCHEMA_NAME)


def openai_reply(content: Any, *, finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 15, "total_tokens": 135},
    }


def anthropic_reply(
    content: list[dict[str, Any]], *, stop_reason: str = "tool_use"
) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": stop_reason,
        "usage": {"input_tokens": 210, "output_tokens": 33},
    }


def gemini_reply(text: str, *, finish_reason: str = "STOP") -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": text}]},
                "finishReason": finish_reason,
            }
        ],
        "usageMetadata": {"promptTokenCount": 88, "candidatesTokenCount": 12},
    }


TOOL_USE_BLOCK = {"type": "tool_use", "id": "toolu_1", "name": SCHEMA_NAME, "input": ANSWER}
SUCCESS_REPLIES: dict[str, dict[str, Any]] = {
    "openai": openai_reply('{"memories": ["The user moved to Lisbon."]}'),
    "anthropic": anthropic_reply([TOOL_USE_BLOCK]),
    "gemini": gemini_reply('{"memories": ["The user moved to Lisbon."]}'),
}
PROVIDERS = sorted(SUCCESS_REPLIES)


# --- What each provider sends and returns -------------------------------------------------------


def test_openai_compatible_sends_schema_and_parses_answer(loopback: LoopbackServer) -> None:
    loopback.respond_json(SUCCESS_REPLIES["openai"])

    result = ask(provider_for(loopback, "openai"))

    assert result.data == ANSWER
    assert (result.input_tokens, result.output_tokens) == (120, 15)
    [request] = loopback.requests
    assert (request.method, request.path) == ("POST", "/chat/completions")
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.json == {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": SCHEMA_NAME, "schema": SCHEMA, "strict": False},
        },
        "max_tokens": 777,
    }


def test_openai_compatible_without_key_sends_no_authorization(loopback: LoopbackServer) -> None:
    loopback.respond_json(SUCCESS_REPLIES["openai"])

    ask(provider_for(loopback, "openai", api_key=None))

    assert "authorization" not in loopback.requests[0].headers


def test_openai_compatible_accepts_answer_in_a_json_code_fence(loopback: LoopbackServer) -> None:
    loopback.respond_json(openai_reply('```json\n{"memories": ["The user moved to Lisbon."]}\n```'))

    assert ask(provider_for(loopback, "openai")).data == ANSWER


def test_openai_compatible_missing_usage_gives_unknown_token_counts(
    loopback: LoopbackServer,
) -> None:
    reply = openai_reply('{"memories": []}')
    del reply["usage"]
    loopback.respond_json(reply)

    result = ask(provider_for(loopback, "openai"))

    assert (result.input_tokens, result.output_tokens) == (None, None)


def test_anthropic_forces_the_schema_tool_and_returns_its_input(loopback: LoopbackServer) -> None:
    loopback.respond_json(
        anthropic_reply([{"type": "text", "text": "Recording the memories."}, TOOL_USE_BLOCK])
    )

    result = ask(provider_for(loopback, "anthropic"))

    assert result.data == ANSWER
    assert (result.input_tokens, result.output_tokens) == (210, 33)
    [request] = loopback.requests
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == API_KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["content-type"] == "application/json"
    body = request.json
    assert body["model"] == "test-model"
    assert body["max_tokens"] == 777
    assert body["system"] == SYSTEM
    assert body["messages"] == [{"role": "user", "content": PROMPT}]
    [tool] = body["tools"]
    assert (tool["name"], tool["input_schema"]) == (SCHEMA_NAME, SCHEMA)
    assert tool["description"]
    assert body["tool_choice"] == {"type": "tool", "name": SCHEMA_NAME}


def test_gemini_sends_response_schema_and_joins_text_parts(loopback: LoopbackServer) -> None:
    reply = gemini_reply("")
    reply["candidates"][0]["content"]["parts"] = [
        {"text": '{"memories": ["The user moved'},
        {"text": ' to Lisbon."]}'},
    ]
    loopback.respond_json(reply)

    result = ask(provider_for(loopback, "gemini"))

    assert result.data == ANSWER
    assert (result.input_tokens, result.output_tokens) == (88, 12)
    [request] = loopback.requests
    assert (request.method, request.path) == ("POST", "/v1beta/models/test-model:generateContent")
    assert request.headers["x-goog-api-key"] == API_KEY
    assert API_KEY not in request.path
    assert request.json == {
        "systemInstruction": {"parts": [{"text": SYSTEM}]},
        "contents": [{"role": "user", "parts": [{"text": PROMPT}]}],
        "generationConfig": {
            "responseMimeType": "application/json",
            "responseJsonSchema": SCHEMA,
            "maxOutputTokens": 777,
        },
    }


# --- Failures the caller should retry -------------------------------------------------------------


IMAGE = PromptImage(mime="image/png", data=b"\x89PNG fake bytes")
IMAGE_B64 = base64.b64encode(IMAGE.data).decode()


def _user_content(provider: str, body: dict[str, Any]) -> Any:
    if provider == "openai":
        return body["messages"][1]["content"]
    if provider == "anthropic":
        return body["messages"][0]["content"]
    return body["contents"][0]["parts"]


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        (
            "openai",
            [
                {"type": "text", "text": PROMPT},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{IMAGE_B64}"}},
            ],
        ),
        (
            "anthropic",
            [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": IMAGE_B64},
                },
                {"type": "text", "text": PROMPT},
            ],
        ),
        (
            "gemini",
            [{"text": PROMPT}, {"inlineData": {"mimeType": "image/png", "data": IMAGE_B64}}],
        ),
    ],
)
def test_images_go_with_the_prompt_in_each_providers_format(
    loopback: LoopbackServer, provider: str, expected: list[dict[str, Any]]
) -> None:
    loopback.respond_json(SUCCESS_REPLIES[provider])
    result = provider_for(loopback, provider).structured(
        system=SYSTEM, prompt=PROMPT, schema=SCHEMA, schema_name=SCHEMA_NAME, images=[IMAGE]
    )
    assert result.data == ANSWER
    [request] = loopback.requests
    assert _user_content(provider, request.json) == expected


@pytest.mark.parametrize("provider", PROVIDERS)
def test_without_images_the_prompt_goes_as_before(loopback: LoopbackServer, provider: str) -> None:
    loopback.respond_json(SUCCESS_REPLIES[provider])
    ask(provider_for(loopback, provider))
    content = _user_content(provider, loopback.requests[0].json)
    assert content == ([{"text": PROMPT}] if provider == "gemini" else PROMPT)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_rate_limit_is_transient_and_exposes_retry_after(
    loopback: LoopbackServer, provider: str
) -> None:
    loopback.respond(
        lambda _request: Reply(
            429, {"error": {"message": "Rate limit reached"}}, {"Retry-After": "7"}
        )
    )

    with pytest.raises(LLMTransientError) as raised:
        ask(provider_for(loopback, provider))

    assert raised.value.retry_after == 7.0
    assert "429" in str(raised.value)
    assert "Rate limit reached" in str(raised.value)


def test_retry_after_given_as_an_http_date_becomes_seconds(loopback: LoopbackServer) -> None:
    in_30_seconds = formatdate(time.time() + 30, usegmt=True)
    loopback.respond(lambda _request: Reply(503, "busy", {"Retry-After": in_30_seconds}))

    with pytest.raises(LLMTransientError) as raised:
        ask(provider_for(loopback, "openai"))

    assert raised.value.retry_after is not None
    assert 25 <= raised.value.retry_after <= 30


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [408, 503, 529])
def test_server_side_statuses_are_transient(
    loopback: LoopbackServer, provider: str, status: int
) -> None:
    loopback.respond_json({"error": {"message": "overloaded"}}, status=status)

    with pytest.raises(LLMTransientError) as raised:
        ask(provider_for(loopback, provider))

    assert raised.value.retry_after is None
    assert str(status) in str(raised.value)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_html_error_page_from_a_gateway_is_transient(
    loopback: LoopbackServer, provider: str
) -> None:
    loopback.respond(lambda _request: Reply(502, "<html><body>Bad Gateway</body></html>"))

    with pytest.raises(LLMTransientError, match="Bad Gateway"):
        ask(provider_for(loopback, provider))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_slow_server_is_a_transient_timeout(loopback: LoopbackServer, provider: str) -> None:
    def sleep_then_answer(_request: RecordedRequest) -> Reply:
        time.sleep(1.0)
        return Reply(200, SUCCESS_REPLIES[provider])

    loopback.respond(sleep_then_answer)

    # The answer comes after the timeout: only the timeout can make this an error, and its
    # message says so (no wall-time bound: a loaded machine only makes it slower).
    with pytest.raises(LLMTransientError, match=r"did not answer within 0\.3 s"):
        ask(provider_for(loopback, provider, timeout=0.3))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_refused_connection_is_transient(provider: str) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    settings = LLMSettings(
        provider=provider, model="test-model", api_base=f"http://127.0.0.1:{port}", timeout=2.0
    )

    with pytest.raises(LLMTransientError):
        ask(llm_provider(settings))


# --- Failures that retrying will not fix ----------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("status", [400, 404])
def test_client_errors_are_permanent_and_never_show_the_key(
    loopback: LoopbackServer, provider: str, status: int
) -> None:
    # Some servers echo the key they were sent in the error message.
    loopback.respond_json(
        {"error": {"message": f"Model not found for API key {API_KEY}"}}, status=status
    )

    with pytest.raises(LLMPermanentError) as raised:
        ask(provider_for(loopback, provider))

    message = str(raised.value)
    assert str(status) in message
    assert "Model not found" in message
    assert API_KEY not in message


@pytest.mark.parametrize("provider", PROVIDERS)
def test_long_error_bodies_are_cut_to_a_short_excerpt(
    loopback: LoopbackServer, provider: str
) -> None:
    loopback.respond(lambda _request: Reply(400, "x" * 10_000))

    with pytest.raises(LLMPermanentError) as raised:
        ask(provider_for(loopback, provider))

    assert len(str(raised.value)) < 400


@pytest.mark.parametrize("provider", PROVIDERS)
def test_success_status_with_a_body_that_is_not_json_is_permanent(
    loopback: LoopbackServer, provider: str
) -> None:
    loopback.respond(lambda _request: Reply(200, "<html>captive portal</html>"))

    with pytest.raises(LLMPermanentError, match="not JSON"):
        ask(provider_for(loopback, provider))


@pytest.mark.parametrize(
    "content",
    ["I'm sorry, here are the memories: the user moved.", '["a list, not an object"]', ""],
)
def test_openai_compatible_answer_that_is_not_a_json_object_is_permanent(
    loopback: LoopbackServer, content: str
) -> None:
    loopback.respond_json(openai_reply(content))

    with pytest.raises(LLMPermanentError):
        ask(provider_for(loopback, "openai"))


def test_openai_compatible_answer_cut_off_at_max_tokens_is_permanent(
    loopback: LoopbackServer,
) -> None:
    # Even a prefix that happens to parse must not be taken for the whole answer.
    loopback.respond_json(openai_reply('{"memories": []}', finish_reason="length"))

    with pytest.raises(LLMPermanentError, match="max_tokens"):
        ask(provider_for(loopback, "openai"))


def test_openai_compatible_refusal_is_permanent(loopback: LoopbackServer) -> None:
    reply = openai_reply(None)
    reply["choices"][0]["message"]["refusal"] = "I can't help with that."
    loopback.respond_json(reply)

    with pytest.raises(LLMPermanentError, match="can't help"):
        ask(provider_for(loopback, "openai"))


def test_openai_compatible_reply_without_choices_is_permanent(loopback: LoopbackServer) -> None:
    loopback.respond_json({"choices": []})

    with pytest.raises(LLMPermanentError):
        ask(provider_for(loopback, "openai"))


def test_anthropic_reply_without_tool_use_is_permanent(loopback: LoopbackServer) -> None:
    loopback.respond_json(
        anthropic_reply([{"type": "text", "text": '{"memories": []}'}], stop_reason="end_turn")
    )

    with pytest.raises(LLMPermanentError, match="tool_use"):
        ask(provider_for(loopback, "anthropic"))


@pytest.mark.parametrize("stop_reason", ["max_tokens", "refusal"])
def test_anthropic_truncated_or_refused_answer_is_permanent(
    loopback: LoopbackServer, stop_reason: str
) -> None:
    loopback.respond_json(anthropic_reply([TOOL_USE_BLOCK], stop_reason=stop_reason))

    with pytest.raises(LLMPermanentError, match=stop_reason):
        ask(provider_for(loopback, "anthropic"))


def test_gemini_blocked_prompt_is_permanent(loopback: LoopbackServer) -> None:
    loopback.respond_json(
        {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 9}}
    )

    with pytest.raises(LLMPermanentError, match="blockReason=SAFETY"):
        ask(provider_for(loopback, "gemini"))


@pytest.mark.parametrize("finish_reason", ["SAFETY", "RECITATION", "MAX_TOKENS"])
def test_gemini_withheld_or_truncated_answer_is_permanent(
    loopback: LoopbackServer, finish_reason: str
) -> None:
    loopback.respond_json(gemini_reply('{"memories": []}', finish_reason=finish_reason))

    with pytest.raises(LLMPermanentError, match=finish_reason):
        ask(provider_for(loopback, "gemini"))


def test_gemini_answer_that_is_not_json_is_permanent(loopback: LoopbackServer) -> None:
    loopback.respond_json(gemini_reply("The user moved to Lisbon."))

    with pytest.raises(LLMPermanentError, match="not JSON"):
        ask(provider_for(loopback, "gemini"))


# --- Choosing a provider ------------------------------------------------------------------------


def test_unknown_provider_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="mistral"):
        llm_provider(LLMSettings(provider="mistral", model="m"))


def test_settings_repr_does_not_show_the_key() -> None:
    assert API_KEY not in repr(LLMSettings(provider="openai", model="m", api_key=API_KEY))


def test_no_provider_when_llm_is_disabled(settings: Any) -> None:
    settings.LLM_PROVIDER = "none"

    assert llm_provider_from_settings() is None


@pytest.mark.parametrize(
    ("name", "expected_class"),
    [
        ("openai", OpenAICompatibleProvider),
        ("anthropic", AnthropicProvider),
        ("gemini", GeminiProvider),
    ],
)
def test_provider_from_settings_uses_the_configured_class_and_values(
    settings: Any, name: str, expected_class: type[LLMProvider]
) -> None:
    settings.LLM_PROVIDER = name
    settings.LLM_MODEL = "some-model"
    settings.LLM_API_BASE = "http://127.0.0.1:11434/v1"
    settings.LLM_API_KEY = API_KEY
    settings.LLM_CONTEXT_WINDOW = 32_000

    provider = llm_provider_from_settings()

    assert type(provider) is expected_class
    assert provider.settings == LLMSettings(
        provider=name,
        model="some-model",
        api_base="http://127.0.0.1:11434/v1",
        api_key=API_KEY,
        context_window=32_000,
    )


def test_provider_from_settings_without_a_model_fails_clearly(settings: Any) -> None:
    settings.LLM_PROVIDER = "openai"
    settings.LLM_MODEL = None

    with pytest.raises(ImproperlyConfigured, match="LLM_MODEL"):
        llm_provider_from_settings()


# --- Budgeting ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "tokens"), [("", 0), ("abc", 1), ("abcd", 2), ("a" * 300, 100)])
def test_estimate_tokens_rounds_up_at_three_characters_per_token(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def test_estimate_tokens_over_counts_typical_english() -> None:
    # About 4 characters per token in English: the estimate must not come in under that.
    sentence = "The user moved to Lisbon last week and prefers morning meetings. " * 20

    assert estimate_tokens(sentence) >= len(sentence) / 4
