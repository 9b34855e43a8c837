"""The MIRIX meta-agent configuration vocabulary, and its normalization into what we store.

The MIRIX client sends either ``{"provider", "api_key"?, "model"?}`` or a ``config`` dict with
``llm_config``, ``embedding_config`` and ``meta_agent_config.agents``. Both are normalized to a
``MetaAgentSettings``; anything that cannot be understood raises a ``ValidationError`` naming the
field, rather than being stored and failing later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from memory.models.agents import MEMORY_COMPONENTS
from memory.providers.embeddings import (
    GEMINI_MODEL_DIMENSIONS,
    LOCAL_MODEL_DIMENSIONS,
    LOCAL_MODEL_NAME,
    OPENAI_MODEL_DIMENSIONS,
)

# The endpoint types the MIRIX 0.1.7 client accepts in an AgentState it parses.
LLM_ENDPOINT_TYPES = frozenset(
    {
        "openai",
        "anthropic",
        "cohere",
        "google_ai",
        "google_vertex",
        "azure_openai",
        "groq",
        "ollama",
        "webui",
        "webui-legacy",
        "lmstudio",
        "lmstudio-legacy",
        "lmstudio-chatcompletions",
        "llamacpp",
        "koboldcpp",
        "vllm",
        "hugging-face",
        "mistral",
        "together",
        "bedrock",
        "deepseek",
        "xai",
    }
)
EMBEDDING_ENDPOINT_TYPES = frozenset(
    {
        "openai",
        "anthropic",
        "bedrock",
        "cohere",
        "google_ai",
        "azure",
        "groq",
        "ollama",
        "webui",
        "webui-legacy",
        "lmstudio",
        "lmstudio-legacy",
        "llamacpp",
        "koboldcpp",
        "vllm",
        "hugging-face",
        "mistral",
        "together",
    }
)
LLM_FIELDS = (
    "model",
    "model_endpoint_type",
    "model_endpoint",
    "model_wrapper",
    "context_window",
    "temperature",
    "max_tokens",
    "enable_reasoner",
    "reasoning_effort",
    "max_reasoning_tokens",
    "put_inner_thoughts_in_kwargs",
    "is_local_model",
    "api_version",
    "azure_endpoint",
    "azure_deployment",
    "handle",
)
EMBEDDING_FIELDS = (
    "embedding_endpoint_type",
    "embedding_endpoint",
    "embedding_model",
    "embedding_dim",
    "embedding_chunk_size",
    "azure_endpoint",
    "azure_version",
    "azure_deployment",
    "handle",
)

# Quick-setup defaults for `initialize_meta_agent(provider=...)`, as the MIRIX client documents.
PROVIDER_DEFAULTS: dict[str, dict[str, dict[str, Any] | None]] = {
    "openai": {
        "llm": {
            "model": "gpt-4o-mini",
            "model_endpoint_type": "openai",
            "model_endpoint": "https://api.openai.com/v1",
            "context_window": 128_000,
        },
        "embedding": {
            "embedding_model": "text-embedding-3-small",
            "embedding_endpoint_type": "openai",
            "embedding_endpoint": "https://api.openai.com/v1",
            "embedding_dim": 1536,
            "embedding_chunk_size": 8191,
        },
    },
    "anthropic": {
        "llm": {
            "model": "claude-sonnet-4-5",
            "model_endpoint_type": "anthropic",
            "model_endpoint": "https://api.anthropic.com/v1",
            "context_window": 200_000,
        },
        "embedding": None,
    },
    "google_ai": {
        "llm": {
            "model": "gemini-2.0-flash",
            "model_endpoint_type": "google_ai",
            "model_endpoint": "https://generativelanguage.googleapis.com",
            "context_window": 1_000_000,
        },
        "embedding": {
            "embedding_model": "text-embedding-004",
            "embedding_endpoint_type": "google_ai",
            "embedding_endpoint": "https://generativelanguage.googleapis.com",
            "embedding_dim": 768,
            "embedding_chunk_size": 2048,
        },
    },
}
PROVIDERS = tuple(PROVIDER_DEFAULTS)

# Dimensions of embedding models we know, so a config may omit embedding_dim for them.
KNOWN_EMBEDDING_DIMS = {
    LOCAL_MODEL_NAME: LOCAL_MODEL_DIMENSIONS,
    **OPENAI_MODEL_DIMENSIONS,
    **GEMINI_MODEL_DIMENSIONS,
}

# MIRIX agent names in meta_agent_config.agents, and the memory component each one enables.
AGENT_COMPONENTS = {
    "core_memory_agent": "core",
    "episodic_memory_agent": "episodic",
    "semantic_memory_agent": "semantic",
    "procedural_memory_agent": "procedural",
    "resource_memory_agent": "resource",
    "knowledge_vault_memory_agent": "knowledge_vault",
    "knowledge_memory_agent": "knowledge_vault",
    # MIRIX agents with no memory component of their own: accepted, enable nothing.
    "meta_memory_agent": None,
    "reflexion_agent": None,
    "background_agent": None,
    "chat_agent": None,
}
# The AgentState agent_type the MIRIX client knows for each component.
COMPONENT_AGENT_TYPES = {
    "core": "core_memory_agent",
    "episodic": "episodic_memory_agent",
    "semantic": "semantic_memory_agent",
    "procedural": "procedural_memory_agent",
    "resource": "resource_memory_agent",
    "knowledge_vault": "knowledge_memory_agent",
}
CORE_BLOCK_LIMIT = 5000
DEFAULT_CORE_BLOCKS = (
    {"label": "human", "value": "", "limit": CORE_BLOCK_LIMIT},
    {"label": "persona", "value": "I am a helpful assistant.", "limit": CORE_BLOCK_LIMIT},
)


@dataclass
class MetaAgentSettings:
    """A validated meta-agent configuration, ready to store."""

    llm_config: dict[str, Any]
    embedding_config: dict[str, Any] | None
    llm_api_key: str | None = None
    embedding_api_key: str | None = None
    memory_components: list[str] = field(default_factory=lambda: list(MEMORY_COMPONENTS))
    core_blocks: list[dict[str, Any]] = field(default_factory=lambda: list(DEFAULT_CORE_BLOCKS))
    system_prompts: dict[str, str] = field(default_factory=dict)


def _infer_llm_endpoint_type(model: str) -> str:
    lowered = model.lower()
    if lowered.startswith("gemini"):
        return "google_ai"
    if lowered.startswith("claude"):
        return "anthropic"
    return "openai"


def server_llm_config() -> dict[str, Any]:
    """What this server itself runs, for a client that configures no LLM of its own.

    With ``LLM_PROVIDER=none`` extraction is deterministic and no model is called; the MIRIX
    AgentState still requires an ``llm_config``, so it names the deterministic extractor.
    """
    endpoint_types = {"openai": "openai", "anthropic": "anthropic", "gemini": "google_ai"}
    return {
        "model": settings.LLM_MODEL or ("deterministic" if settings.LLM_PROVIDER == "none" else ""),
        "model_endpoint_type": endpoint_types.get(settings.LLM_PROVIDER, "openai"),
        "model_endpoint": settings.LLM_API_BASE,
        "context_window": settings.LLM_CONTEXT_WINDOW,
    }


def _llm_config_normalize(raw: Any, *, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValidationError({where: ["Must be an object."]})
    model = raw.get("model")
    if not isinstance(model, str) or not model.strip():
        raise ValidationError({f"{where}.model": ["A model name is required."]})
    config = {name: raw[name] for name in LLM_FIELDS if raw.get(name) is not None}
    config.setdefault("model_endpoint_type", _infer_llm_endpoint_type(model))
    if config["model_endpoint_type"] not in LLM_ENDPOINT_TYPES:
        raise ValidationError(
            {
                f"{where}.model_endpoint_type": [
                    f"Unknown endpoint type {config['model_endpoint_type']!r}."
                ]
            }
        )
    context_window = config.setdefault("context_window", settings.LLM_CONTEXT_WINDOW)
    if (
        not isinstance(context_window, int)
        or isinstance(context_window, bool)
        or context_window < 1
    ):
        raise ValidationError({f"{where}.context_window": ["Must be a positive integer."]})
    return config


def _embedding_config_normalize(raw: Any, *, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValidationError({where: ["Must be an object."]})
    model = raw.get("embedding_model") or raw.get("model")
    if not isinstance(model, str) or not model.strip():
        raise ValidationError(
            {f"{where}.embedding_model": ["An embedding model name is required."]}
        )
    config = {name: raw[name] for name in EMBEDDING_FIELDS if raw.get(name) is not None}
    config["embedding_model"] = model
    config.setdefault(
        "embedding_endpoint_type",
        "google_ai" if model.startswith(("text-embedding-004", "gemini")) else "openai",
    )
    if config["embedding_endpoint_type"] not in EMBEDDING_ENDPOINT_TYPES:
        raise ValidationError(
            {
                f"{where}.embedding_endpoint_type": [
                    f"Unknown endpoint type {config['embedding_endpoint_type']!r}."
                ]
            }
        )
    dim = config.setdefault("embedding_dim", KNOWN_EMBEDDING_DIMS.get(model))
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
        raise ValidationError(
            {f"{where}.embedding_dim": ["Required for this model: a positive integer."]}
        )
    return config


def _blocks_normalize(raw: Any, *, where: str) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise ValidationError({where: ["Must be a list of {label, value} objects."]})
    blocks = []
    for index, block in enumerate(raw):
        label = block.get("label") if isinstance(block, dict) else None
        if not isinstance(label, str) or not label.strip():
            raise ValidationError({f"{where}.{index}.label": ["A label is required."]})
        value = block.get("value") or ""
        limit = block.get("limit") or CORE_BLOCK_LIMIT
        if not isinstance(value, str) or not isinstance(limit, int) or len(value) > limit:
            raise ValidationError(
                {f"{where}.{index}.value": [f"A string of at most {limit} characters."]}
            )
        blocks.append({"label": label.strip(), "value": value, "limit": limit})
    return blocks


def _agents_normalize(raw: Any, settings_: MetaAgentSettings, *, where: str) -> None:
    if not isinstance(raw, list):
        raise ValidationError(
            {where: ["Must be a list of agent names or {name: options} objects."]}
        )
    components: list[str] = []
    for index, item in enumerate(raw):
        if isinstance(item, str):
            name, options = item, {}
        elif isinstance(item, dict) and len(item) == 1:
            name, options = next(iter(item.items()))
            options = options or {}
        else:
            raise ValidationError(
                {f"{where}.{index}": ["An agent name or a {name: options} object."]}
            )
        if name not in AGENT_COMPONENTS:
            raise ValidationError({f"{where}.{index}": [f"Unknown agent {name!r}."]})
        component = AGENT_COMPONENTS[name]
        if component and component not in components:
            components.append(component)
        if component == "core" and isinstance(options, dict) and "blocks" in options:
            settings_.core_blocks = _blocks_normalize(
                options["blocks"], where=f"{where}.{index}.blocks"
            )
    settings_.memory_components = [name for name in MEMORY_COMPONENTS if name in components]


def meta_agent_settings_from_provider(
    *, provider: str, api_key: str | None, model: str | None
) -> MetaAgentSettings:
    defaults = PROVIDER_DEFAULTS[provider]
    llm = dict(defaults["llm"] or {})
    if model:
        llm["model"] = model
    embedding = dict(defaults["embedding"]) if defaults["embedding"] else None
    return MetaAgentSettings(
        llm_config=llm,
        embedding_config=embedding,
        llm_api_key=api_key,
        embedding_api_key=api_key if embedding else None,
    )


def meta_agent_settings_from_config(config: dict[str, Any]) -> MetaAgentSettings:
    llm_raw = config.get("llm_config")
    embedding_raw = config.get("embedding_config")
    result = MetaAgentSettings(
        llm_config=_llm_config_normalize(llm_raw, where="config.llm_config")
        if llm_raw is not None
        else server_llm_config(),
        embedding_config=_embedding_config_normalize(embedding_raw, where="config.embedding_config")
        if embedding_raw is not None
        else None,
        llm_api_key=(llm_raw or {}).get("api_key") or None,
        embedding_api_key=(embedding_raw or {}).get("api_key") or None,
    )
    meta = config.get("meta_agent_config") or {}
    if not isinstance(meta, dict):
        raise ValidationError({"config.meta_agent_config": ["Must be an object."]})
    if "agents" in meta:
        _agents_normalize(meta["agents"], result, where="config.meta_agent_config.agents")
    prompts = meta.get("system_prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(text, str) for text in prompts.values()):
        raise ValidationError(
            {"config.meta_agent_config.system_prompts": ["An object of agent name → text."]}
        )
    result.system_prompts = prompts
    return result
