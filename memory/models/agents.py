from __future__ import annotations

import uuid

from django.db import models

from accounts.models import Client, Organization

MEMORY_COMPONENTS = ("core", "episodic", "semantic", "procedural", "resource", "knowledge_vault")


def new_agent_id() -> str:
    return f"agent-{uuid.uuid4()}"


def default_memory_components() -> list[str]:
    return list(MEMORY_COMPONENTS)


class MetaAgent(models.Model):
    """A client's memory configuration, the MIRIX "meta agent": which LLM and embedding model it
    asked for, which memory components are enabled, its core-memory block templates.
    One per client. Provider API keys are kept encrypted, never in the JSON configs."""

    id = models.CharField(primary_key=True, max_length=64, default=new_agent_id, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    client = models.OneToOneField(Client, on_delete=models.CASCADE, related_name="meta_agent")
    name = models.CharField(max_length=200, default="meta_memory_agent")
    system = models.TextField(blank=True)
    llm_config = models.JSONField(default=dict, blank=True)
    embedding_config = models.JSONField(null=True, blank=True)
    llm_api_key_encrypted = models.TextField(blank=True, editable=False)
    embedding_api_key_encrypted = models.TextField(blank=True, editable=False)
    memory_components = models.JSONField(default=default_memory_components)
    core_blocks = models.JSONField(default=list, blank=True)
    system_prompts = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "id"]
        verbose_name = "meta agent"

    def __str__(self) -> str:
        return f"{self.name} ({self.client_id})"

    def component_agent_id(self, component: str) -> str:
        """The stable id of the sub-agent that stands for one memory component (MIRIX shows
        each enabled component as a child agent of the meta agent)."""
        return f"agent-{uuid.uuid5(uuid.NAMESPACE_URL, f'{self.pk}/{component}')}"

    def core_block_id(self, label: str) -> str:
        return f"block-{uuid.uuid5(uuid.NAMESPACE_URL, f'{self.pk}/block/{label}')}"


class AgentPromptVersion(models.Model):
    """One system prompt an agent of a meta agent was given (``PATCH /agents/by-name/{name}/
    system``), in order: the agent's prompt is its last version's. The server's extractor
    reads it only with an LLM configured; without one it is kept and shown."""

    meta_agent = models.ForeignKey(MetaAgent, on_delete=models.CASCADE, related_name="prompts")
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    agent_type = models.CharField(max_length=64, help_text="meta_memory_agent, or a component's")
    number = models.PositiveIntegerField()
    system = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["meta_agent", "agent_type", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["meta_agent", "agent_type", "number"], name="agent_prompt_version_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent_type} v{self.number}"
