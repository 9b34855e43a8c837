"""The MIRIX meta-agent configuration vocabulary, and its normalization into what we store.

The MIRIX client sends either ``{"provider", "api_key"?, "model"?}`` or a ``config`` dict with
``llm_config``, ``embedding_config`` and ``meta_agent_config.agents``. Both are normalized to a
``MetaAgentSettings``; anything that cannot be understood raises a ``ValidationError`` naming the
field, rather than being stored and failing later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from memory.models.agents import MEMORY_COMPONENTS
from memory.types import MEMORY_TYPES
from mirix_site.api.fields import NOT_BLANK_PATTERN
from mirix_site.providers.embeddings import (
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
# The fields of a config that are kept, with their JSON types: the AgentState the MIRIX client
# parses declares the same, so a value of another type is refused rather than stored and
# answered. None (or an absent field) is no value.
LLM_FIELDS = {
    "model": "string",
    "model_endpoint_type": "string",
    "model_endpoint": "string",
    "model_wrapper": "string",
    "context_window": "integer",
    "temperature": "number",
    "max_tokens": "integer",
    "enable_reasoner": "boolean",
    "reasoning_effort": "string",
    "max_reasoning_tokens": "integer",
    "put_inner_thoughts_in_kwargs": "boolean",
    "is_local_model": "boolean",
    "api_version": "string",
    "azure_endpoint": "string",
    "azure_deployment": "string",
    "handle": "string",
}
EMBEDDING_FIELDS = {
    "embedding_endpoint_type": "string",
    "embedding_endpoint": "string",
    "embedding_model": "string",
    "embedding_dim": "integer",
    "embedding_chunk_size": "integer",
    "azure_endpoint": "string",
    "azure_version": "string",
    "azure_deployment": "string",
    "handle": "string",
}
# Read from a config but not kept in it: the provider key (stored encrypted) and MIRIX's other
# name for the embedding model.
LLM_INPUT_FIELDS = {**LLM_FIELDS, "api_key": "string"}
EMBEDDING_INPUT_FIELDS = {**EMBEDDING_FIELDS, "model": "string", "api_key": "string"}
_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}

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

# MIRIX agent names in meta_agent_config.agents, and the memory component each one enables
# (each memory type names its agent, ``memory.types``).
AGENT_COMPONENTS: dict[str, str | None] = {
    **{
        agent: name
        for name, memory_type in MEMORY_TYPES.items()
        for agent in (memory_type.mirix_agent, *memory_type.mirix_agent_aliases)
    },
    # MIRIX agents with no memory component of their own: accepted, enable nothing.
    "meta_memory_agent": None,
    "reflexion_agent": None,
    "background_agent": None,
    "chat_agent": None,
}
# The AgentState agent_type the MIRIX client knows for each component.
COMPONENT_AGENT_TYPES = {
    name: memory_type.mirix_agent for name, memory_type in MEMORY_TYPES.items()
}
CORE_BLOCK_LIMIT = 5000
BLOCK_FIELDS = {"label": "string", "value": "string", "limit": "integer"}
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


def _typed(raw: Any, fields: dict[str, str], *, where: str) -> dict[str, Any]:
    """The values of ``fields`` in ``raw`` that are not None, each of its JSON type."""
    if not isinstance(raw, dict):
        raise ValidationError({where: ["Must be an object."]})
    values = {}
    for name, json_type in fields.items():
        value = raw.get(name)
        if value is None:
            continue
        if not isinstance(value, _PYTHON_TYPES[json_type]) or (
            isinstance(value, bool) and json_type != "boolean"
        ):
            raise ValidationError({f"{where}.{name}": [f"Must be of type {json_type}."]})
        values[name] = value
    return values


def _named(value: Any) -> bool:
    return isinstance(value, str) and re.search(NOT_BLANK_PATTERN, value) is not None


def _llm_config_normalize(raw: Any, *, where: str) -> dict[str, Any]:
    config = _typed(raw, LLM_FIELDS, where=where)
    model = config.get("model")
    if not _named(model):
        raise ValidationError({f"{where}.model": ["A model name is required."]})
    config.setdefault("model_endpoint_type", _infer_llm_endpoint_type(model))
    if config["model_endpoint_type"] not in LLM_ENDPOINT_TYPES:
        raise ValidationError(
            {
                f"{where}.model_endpoint_type": [
                    f"Unknown endpoint type {config['model_endpoint_type']!r}."
                ]
            }
        )
    if config.setdefault("context_window", settings.LLM_CONTEXT_WINDOW) < 1:
        raise ValidationError({f"{where}.context_window": ["Must be a positive integer."]})
    return config


def _embedding_config_normalize(raw: Any, *, where: str) -> dict[str, Any]:
    given = _typed(raw, EMBEDDING_INPUT_FIELDS, where=where)
    model = next(
        (given[name] for name in ("embedding_model", "model") if _named(given.get(name))), None
    )
    if model is None:
        raise ValidationError(
            {f"{where}.embedding_model": ["An embedding model name is required."]}
        )
    config = {name: value for name, value in given.items() if name in EMBEDDING_FIELDS}
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
    if dim is None or dim < 1:
        raise ValidationError(
            {f"{where}.embedding_dim": ["Required for this model: a positive integer."]}
        )
    return config


def _blocks_normalize(raw: Any, *, where: str) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise ValidationError({where: ["Must be a list of {label, value} objects."]})
    blocks = []
    for index, block in enumerate(raw):
        given = _typed(block, BLOCK_FIELDS, where=f"{where}.{index}")
        label = given.get("label")
        if not _named(label):
            raise ValidationError({f"{where}.{index}.label": ["A label is required."]})
        value, limit = given.get("value", ""), given.get("limit", CORE_BLOCK_LIMIT)
        if limit < 1:
            raise ValidationError({f"{where}.{index}.limit": ["Must be a positive integer."]})
        if len(value) > limit:
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
            if options is None:
                options = {}
            if not isinstance(options, dict):
                raise ValidationError({f"{where}.{index}.{name}": ["Must be an object."]})
        else:
            raise ValidationError(
                {f"{where}.{index}": ["An agent name or a {name: options} object."]}
            )
        if name not in AGENT_COMPONENTS:
            raise ValidationError({f"{where}.{index}": [f"Unknown agent {name!r}."]})
        component = AGENT_COMPONENTS[name]
        if component and component not in components:
            components.append(component)
        if component == "core" and options.get("blocks") is not None:
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
    llm_keys = _typed(llm_raw or {}, {"api_key": "string"}, where="config.llm_config")
    embedding_keys = _typed(
        embedding_raw or {}, {"api_key": "string"}, where="config.embedding_config"
    )
    result = MetaAgentSettings(
        llm_config=_llm_config_normalize(llm_raw, where="config.llm_config")
        if llm_raw is not None
        else server_llm_config(),
        embedding_config=_embedding_config_normalize(embedding_raw, where="config.embedding_config")
        if embedding_raw is not None
        else None,
        llm_api_key=llm_keys.get("api_key") or None,
        embedding_api_key=embedding_keys.get("api_key") or None,
    )
    meta = config.get("meta_agent_config")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise ValidationError({"config.meta_agent_config": ["Must be an object."]})
    if meta.get("agents") is not None:
        _agents_normalize(meta["agents"], result, where="config.meta_agent_config.agents")
    prompts = meta.get("system_prompts")
    if prompts is None:
        prompts = {}
    if not isinstance(prompts, dict) or not all(isinstance(text, str) for text in prompts.values()):
        raise ValidationError(
            {"config.meta_agent_config.system_prompts": ["An object of agent name → text."]}
        )
    result.system_prompts = prompts
    return result


def _fields_schema(fields: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {name: {"type": json_type, "nullable": True} for name, json_type in fields.items()}


def config_schema() -> dict[str, Any]:
    """The JSON schema of a ``config`` as ``meta_agent_settings_from_config`` takes it."""
    named = {"type": "string", "pattern": NOT_BLANK_PATTERN}
    known = {"enum": sorted(KNOWN_EMBEDDING_DIMS)}
    dimensioned = {
        "required": ["embedding_dim"],
        "properties": {"embedding_dim": {"type": "integer"}},
    }
    llm = {
        "type": "object",
        "nullable": True,
        "required": ["model"],
        "properties": _fields_schema(LLM_INPUT_FIELDS)
        | {
            "model": named,
            "model_endpoint_type": {"enum": [*sorted(LLM_ENDPOINT_TYPES), None], "nullable": True},
            "context_window": {"type": "integer", "minimum": 1, "nullable": True},
        },
        "description": "without it, the server's own model; api_key is stored encrypted",
    }
    embedding = {
        "type": "object",
        "nullable": True,
        "properties": _fields_schema(EMBEDDING_INPUT_FIELDS)
        | {
            "embedding_endpoint_type": {
                "enum": [*sorted(EMBEDDING_ENDPOINT_TYPES), None],
                "nullable": True,
            },
            "embedding_dim": {"type": "integer", "minimum": 1, "nullable": True},
        },
        "allOf": [
            {
                "anyOf": [
                    {"required": ["embedding_model"], "properties": {"embedding_model": named}},
                    {"required": ["model"], "properties": {"model": named}},
                ]
            },
            {
                "anyOf": [
                    dimensioned,
                    {"required": ["embedding_model"], "properties": {"embedding_model": known}},
                    {
                        "required": ["model"],
                        "properties": {"model": known, "embedding_model": {"not": named}},
                    },
                ]
            },
        ],
        "description": "the model in embedding_model (or model); embedding_dim is required "
        "unless the server knows the model's",
    }
    block = {
        "type": "object",
        "required": ["label"],
        "properties": _fields_schema(BLOCK_FIELDS)
        | {
            "label": named,
            "limit": {"type": "integer", "minimum": 1, "nullable": True},
        },
        "description": f"value: at most limit characters (default {CORE_BLOCK_LIMIT})",
    }
    options = {"type": "object", "nullable": True}
    core_options = options | {
        "properties": {"blocks": {"type": "array", "nullable": True, "items": block}}
    }
    agent = {
        "oneOf": [
            {"enum": sorted(AGENT_COMPONENTS)},
            *(
                {
                    "type": "object",
                    "required": [name],
                    "additionalProperties": False,
                    "properties": {name: core_options if name == "core_memory_agent" else options},
                }
                for name in sorted(AGENT_COMPONENTS)
            ),
        ]
    }
    meta = {
        "type": "object",
        "nullable": True,
        "properties": {
            "agents": {
                "type": "array",
                "nullable": True,
                "items": agent,
                "description": "the memory components to run; all of them without it",
            },
            "system_prompts": {
                "type": "object",
                "nullable": True,
                "additionalProperties": {"type": "string"},
            },
        },
    }
    return {
        "type": "object",
        "nullable": True,
        "properties": {"llm_config": llm, "embedding_config": embedding, "meta_agent_config": meta},
        "description": "a MIRIX configuration (quick setup: provider instead)",
    }
