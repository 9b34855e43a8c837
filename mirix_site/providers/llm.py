"""Large language model providers: one small interface, one structured-output call at a time.

Memory extraction and skill learning ask a model for a JSON object that matches a JSON Schema and
nothing else. Each provider speaks one wire protocol over plain HTTP (``requests``):

- ``openai``: any OpenAI-compatible ``/chat/completions`` server (OpenAI, vLLM, Ollama, llama.cpp),
  using ``response_format`` with a JSON Schema;
- ``anthropic``: the Messages API, forcing one tool call whose ``input`` is the answer;
- ``gemini``: the Generative Language API with ``responseJsonSchema``.

Failures are sorted for the caller: ``LLMTransientError`` is worth retrying with backoff (the Celery
task does that; providers never retry), ``LLMPermanentError`` is not.
"""

from __future__ import annotations

import base64
import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import requests
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from mirix_site.providers.http import error_excerpt, post_json_object

OPENAI_DEFAULT_API_BASE = "https://api.openai.com/v1"
ANTHROPIC_DEFAULT_API_BASE = "https://api.anthropic.com"
GEMINI_DEFAULT_API_BASE = "https://generativelanguage.googleapis.com"
ANTHROPIC_API_VERSION = "2023-06-01"

# Any reason other than a normal stop means the text is cut short or withheld, so it cannot be
# trusted to be the whole JSON object even when it happens to parse.
GEMINI_COMPLETE_FINISH_REASONS = frozenset({"STOP", "FINISH_REASON_UNSPECIFIED"})

_JSON_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL | re.IGNORECASE)


class LLMError(Exception):
    """A structured-output call that produced no usable answer."""


class LLMTransientError(LLMError):
    """A failure worth retrying later: a timeout, a dropped connection, a rate limit, a 5xx (the
    list is ``mirix_site.providers.http.TRANSIENT_HTTP_STATUSES``).

    ``retry_after`` is the server's ``Retry-After`` in seconds when it sent one.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LLMPermanentError(LLMError):
    """A failure that retrying the same call will not fix: a rejected request (bad key, bad model,
    bad schema), a refusal, a truncated answer, or an answer that is not the JSON asked for."""


@dataclass(frozen=True)
class LLMSettings:
    """Where and how to call one model. ``provider`` is ``openai``, ``anthropic`` or ``gemini``;
    ``api_base`` None means the provider's public endpoint."""

    provider: str
    model: str
    api_base: str | None = None
    # Kept out of repr so a logged or printed LLMSettings never shows the key.
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 60.0
    max_output_tokens: int = 4096
    context_window: int = 128_000


@dataclass(frozen=True)
class PromptImage:
    """An image shown to the model beside the prompt (for ``LLM_VISION`` models): its media
    type and bytes, as the image store holds them."""

    mime: str
    data: bytes = field(repr=False)

    @property
    def base64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")


@dataclass(frozen=True)
class StructuredResult:
    """The JSON object a model answered with, and the tokens the call cost when the server says."""

    data: dict[str, Any]
    input_tokens: int | None
    output_tokens: int | None


class LLMProvider(ABC):
    """A model that answers one prompt with one JSON object matching a given JSON Schema."""

    label: ClassVar[str]

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self._session = requests.Session()

    @abstractmethod
    def structured(
        self,
        *,
        system: str,
        prompt: str,
        schema: dict[str, Any],
        schema_name: str,
        images: Sequence[PromptImage] = (),
    ) -> StructuredResult:
        """One call; the model must answer with a JSON object matching `schema` (a JSON Schema
        object). ``images`` go with the prompt, for a model that reads them."""

    def close(self) -> None:
        """Release the pooled connections."""
        self._session.close()

    def _post(self, url: str, *, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` as JSON and return the decoded JSON object of a 2xx answer."""
        return post_json_object(
            self._session,
            url,
            body=body,
            headers=headers,
            timeout=self.settings.timeout,
            label=self.label,
            api_key=self.settings.api_key,
            transient_error=LLMTransientError,
            permanent_error=LLMPermanentError,
        )

    def _excerpt(self, text: str) -> str:
        return error_excerpt(text, api_key=self.settings.api_key)

    def _json_object(self, text: str) -> dict[str, Any]:
        """The JSON object in a model's text answer, bare or inside a Markdown code fence."""
        candidates = [text]
        fenced = _JSON_FENCE.search(text)
        if fenced:
            candidates.append(fenced.group(1))
        for candidate in candidates:
            try:
                value = json.loads(candidate)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
            raise LLMPermanentError(
                f"{self.label} answered with JSON that is not an object: {self._excerpt(text)}"
            )
        raise LLMPermanentError(
            f"{self.label} answered with text that is not JSON: {self._excerpt(text)}"
        )

    def _shape_error(self, what: str, payload: dict[str, Any]) -> LLMPermanentError:
        return LLMPermanentError(
            f"{self.label} response has no {what}: {self._excerpt(json.dumps(payload))}"
        )


class OpenAICompatibleProvider(LLMProvider):
    """An OpenAI-compatible ``/chat/completions`` server: OpenAI, vLLM, Ollama, llama.cpp."""

    label = "OpenAI-compatible provider"

    def structured(
        self,
        *,
        system: str,
        prompt: str,
        schema: dict[str, Any],
        schema_name: str,
        images: Sequence[PromptImage] = (),
    ) -> StructuredResult:
        """One chat completion constrained by ``response_format`` to ``schema``."""
        api_base = (self.settings.api_base or OPENAI_DEFAULT_API_BASE).rstrip("/")
        headers = {"Content-Type": "application/json"}
        # Local servers take no key; an empty Bearer header would make some of them answer 401.
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        body = {
            "model": self.settings.model,
            "messages": [
                {"role": "system", "content": system},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": prompt},
                        *(
                            {
                                "type": "image_url",
                                "image_url": {"url": f"data:{image.mime};base64,{image.base64}"},
                            }
                            for image in images
                        ),
                    ]
                    if images
                    else prompt,
                },
            ],
            "response_format": {
                "type": "json_schema",
                # Strict mode rejects schemas with optional properties or open objects, which
                # callers' schemas have; the schema still guides the answer and we parse it.
                "json_schema": {"name": schema_name, "schema": schema, "strict": False},
            },
            "max_tokens": self.settings.max_output_tokens,
        }
        payload = self._post(f"{api_base}/chat/completions", headers=headers, body=body)

        try:
            choice = payload["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise self._shape_error("choices[0].message", payload) from None
        finish_reason = choice.get("finish_reason")
        if finish_reason == "length":
            raise LLMPermanentError(
                f"{self.label} answer was cut off at max_tokens="
                f"{self.settings.max_output_tokens} (finish_reason=length)"
            )
        if finish_reason == "content_filter":
            raise LLMPermanentError(
                f"{self.label} withheld the answer (finish_reason=content_filter)"
            )
        if message.get("refusal"):
            raise LLMPermanentError(
                f"{self.label} refused: {self._excerpt(str(message['refusal']))}"
            )
        content = message.get("content")
        if not isinstance(content, str):
            raise self._shape_error("text content", payload)

        usage = payload.get("usage") or {}
        return StructuredResult(
            data=self._json_object(content),
            input_tokens=_token_count(usage.get("prompt_tokens")),
            output_tokens=_token_count(usage.get("completion_tokens")),
        )


class AnthropicProvider(LLMProvider):
    """Anthropic's Messages API; the answer is the input of one forced tool call."""

    label = "Anthropic"

    def structured(
        self,
        *,
        system: str,
        prompt: str,
        schema: dict[str, Any],
        schema_name: str,
        images: Sequence[PromptImage] = (),
    ) -> StructuredResult:
        """One message whose only possible answer is a call to a tool taking ``schema``."""
        api_base = (self.settings.api_base or ANTHROPIC_DEFAULT_API_BASE).rstrip("/")
        headers = {"Content-Type": "application/json", "anthropic-version": ANTHROPIC_API_VERSION}
        if self.settings.api_key:
            headers["x-api-key"] = self.settings.api_key
        body = {
            "model": self.settings.model,
            "max_tokens": self.settings.max_output_tokens,
            "system": system,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        *(
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": image.mime,
                                    "data": image.base64,
                                },
                            }
                            for image in images
                        ),
                        {"type": "text", "text": prompt},
                    ]
                    if images
                    else prompt,
                }
            ],
            "tools": [
                {
                    "name": schema_name,
                    "description": f"Record the answer as one {schema_name} object.",
                    "input_schema": schema,
                }
            ],
            "tool_choice": {"type": "tool", "name": schema_name},
        }
        payload = self._post(f"{api_base}/v1/messages", headers=headers, body=body)

        stop_reason = payload.get("stop_reason")
        if stop_reason == "max_tokens":
            raise LLMPermanentError(
                f"{self.label} answer was cut off at max_tokens="
                f"{self.settings.max_output_tokens} (stop_reason=max_tokens)"
            )
        if stop_reason == "refusal":
            raise LLMPermanentError(f"{self.label} refused (stop_reason=refusal)")
        content = payload.get("content")
        blocks = content if isinstance(content, list) else []
        tool_input = next(
            (
                block.get("input")
                for block in blocks
                if isinstance(block, dict) and block.get("type") == "tool_use"
            ),
            None,
        )
        if not isinstance(tool_input, dict):
            raise self._shape_error("tool_use block with an object input", payload)

        usage = payload.get("usage") or {}
        return StructuredResult(
            data=tool_input,
            input_tokens=_token_count(usage.get("input_tokens")),
            output_tokens=_token_count(usage.get("output_tokens")),
        )


class GeminiProvider(LLMProvider):
    """Google's Generative Language API (Gemini) with a JSON Schema response."""

    label = "Gemini"

    def structured(
        self,
        *,
        system: str,
        prompt: str,
        schema: dict[str, Any],
        schema_name: str,
        images: Sequence[PromptImage] = (),
    ) -> StructuredResult:
        """One ``generateContent`` call with ``responseJsonSchema`` set to ``schema``.

        Gemini takes no name for the schema; ``schema_name`` is accepted for the common interface.
        """
        api_base = (self.settings.api_base or GEMINI_DEFAULT_API_BASE).rstrip("/")
        # Model names are listed by the API as "models/<id>"; accept either spelling.
        model = self.settings.model.removeprefix("models/")
        headers = {"Content-Type": "application/json"}
        if self.settings.api_key:
            headers["x-goog-api-key"] = self.settings.api_key
        body = {
            "systemInstruction": {"parts": [{"text": system}]},
            "contents": [
                {
                    "role": "user",
                    "parts": [
                        {"text": prompt},
                        *(
                            {"inlineData": {"mimeType": image.mime, "data": image.base64}}
                            for image in images
                        ),
                    ],
                }
            ],
            "generationConfig": {
                "responseMimeType": "application/json",
                "responseJsonSchema": schema,
                "maxOutputTokens": self.settings.max_output_tokens,
            },
        }
        payload = self._post(
            f"{api_base}/v1beta/models/{model}:generateContent", headers=headers, body=body
        )

        block_reason = (payload.get("promptFeedback") or {}).get("blockReason")
        if block_reason:
            raise LLMPermanentError(f"{self.label} blocked the prompt (blockReason={block_reason})")
        try:
            candidate = payload["candidates"][0]
        except (KeyError, IndexError, TypeError):
            raise self._shape_error("candidates", payload) from None
        finish_reason = candidate.get("finishReason")
        if finish_reason == "MAX_TOKENS":
            raise LLMPermanentError(
                f"{self.label} answer was cut off at maxOutputTokens="
                f"{self.settings.max_output_tokens} (finishReason=MAX_TOKENS)"
            )
        if finish_reason is not None and finish_reason not in GEMINI_COMPLETE_FINISH_REASONS:
            raise LLMPermanentError(
                f"{self.label} withheld the answer (finishReason={finish_reason})"
            )
        parts = (candidate.get("content") or {}).get("parts") or []
        # Thinking models may return their reasoning as parts flagged "thought": not the answer.
        text = "".join(
            part["text"]
            for part in parts
            if isinstance(part, dict)
            and isinstance(part.get("text"), str)
            and not part.get("thought")
        )
        if not text:
            raise self._shape_error("text parts", payload)

        usage = payload.get("usageMetadata") or {}
        return StructuredResult(
            data=self._json_object(text),
            input_tokens=_token_count(usage.get("promptTokenCount")),
            output_tokens=_token_count(usage.get("candidatesTokenCount")),
        )


PROVIDER_CLASSES: dict[str, type[LLMProvider]] = {
    "openai": OpenAICompatibleProvider,
    "anthropic": AnthropicProvider,
    "gemini": GeminiProvider,
}


def llm_provider(settings: LLMSettings) -> LLMProvider:
    """The provider for ``settings.provider``; ValueError for a name we do not know."""
    try:
        provider_class = PROVIDER_CLASSES[settings.provider]
    except KeyError:
        known = ", ".join(sorted(PROVIDER_CLASSES))
        raise ValueError(
            f"Unknown LLM provider {settings.provider!r}; expected one of: {known}"
        ) from None
    return provider_class(settings)


def llm_provider_from_settings() -> LLMProvider | None:
    """The provider configured by the ``LLM_*`` Django settings; None for ``LLM_PROVIDER=none``."""
    provider = django_settings.LLM_PROVIDER
    if provider == "none":
        return None
    if not django_settings.LLM_MODEL:
        raise ImproperlyConfigured(f"LLM_MODEL must be set when LLM_PROVIDER={provider}.")
    return llm_provider(
        LLMSettings(
            provider=provider,
            model=django_settings.LLM_MODEL,
            api_base=django_settings.LLM_API_BASE,
            api_key=django_settings.LLM_API_KEY,
            context_window=django_settings.LLM_CONTEXT_WINDOW,
        )
    )


def estimate_tokens(text: str) -> int:
    """A deliberately high token count for budgeting prompts when no tokenizer is at hand.

    English averages about 4 characters per token; dividing by 3 over-counts so that a batch
    sized with this estimate still fits the context window under a real tokenizer.
    """
    return math.ceil(len(text) / 3)


def _token_count(value: Any) -> int | None:
    # bool is an int subclass; a server sending true/false here is not reporting a count.
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None
