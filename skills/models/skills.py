"""Skills: what learning runs and operators write, in versions; their embeddings and the phrasings
their vectors are fit on; and their uses in task sessions, with the outcomes that prove them."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from pgvector.django import VectorField

from accounts.models import Owned
from mirix_site.common.history import history_tracked
from mirix_site.search.models import Embedding
from skills.models.experiences import Outcome
from skills.models.learning import LearningRun


# Its status's changes (promoted by its uses, demoted, deprecated, approved): its text's are its
# versions.
@history_tracked("status")
class Skill(Owned):
    """A procedure learned from task sessions (or written by an operator): what it does and
    when to use it, the phrasings of tasks it is for, its steps and its pitfalls. Its text is
    that of its current version (``SkillVersion``), which every change writes anew. A searchable
    kind of the engine. A new skill is a ``candidate`` until sessions that used it prove it."""

    class Status(models.TextChoices):
        # Learned while SKILL_REQUIRE_APPROVAL is on: kept, not served, until an operator
        # approves it (then a candidate).
        DRAFT = "draft"
        CANDIDATE = "candidate"  # served, ranked below proven skills, not yet proven
        ACTIVE = "active"
        DEPRECATED = "deprecated"  # kept, not served
        DELETED = "deleted"  # deleted by the user (soft: a version says so)

    name = models.CharField(max_length=64)
    description = models.CharField(max_length=1024)
    triggers = ArrayField(models.TextField(), default=list, blank=True)
    instructions = models.TextField(blank=True)
    pitfalls = ArrayField(models.TextField(), default=list, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.CANDIDATE)
    version = models.PositiveIntegerField(default=0)
    # The outcomes of the task sessions the skill was retrieved for (its uses) ...
    successes = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    partials = models.PositiveIntegerField(default=0)
    # ... and of those it was learned from. Its confidence reads both; proving it, uses alone.
    learned_successes = models.PositiveIntegerField(default=0)
    learned_failures = models.PositiveIntegerField(default=0)
    learned_partials = models.PositiveIntegerField(default=0)
    needs_review = models.BooleanField(default=False)
    review_reason = models.TextField(blank=True)
    # The clustering key a deterministic curator files the skill under (its tools).
    tools = ArrayField(models.TextField(), default=list, blank=True)
    # What its tools do (name → description), as the sessions it was learned from declared
    # them: part of the phrasings its vector is made of, not of its versioned text.
    tool_descriptions = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["end_user", "client", "name"],
                condition=~Q(status="deleted"),
                name="skill_name_unique",
            ),
        ]
        indexes = [models.Index(fields=["end_user", "client", "status"], name="skill_owner")]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"


class SkillEmbedding(Embedding):
    """A skill's search vector, per model: the prototype fit over its phrasings against its
    owner's other skills (``skills.prototypes``), written again whenever the owner's skills
    change."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="embeddings")


class SkillPhrasing(Owned):
    """The embedding of one phrasing of a skill (its name and description, a task it was
    learned from, what one of its tools does) by one model, kept so that fitting the owner's
    prototypes embeds only what is new. Not searched itself."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="phrasings")
    model = models.CharField(max_length=100)
    digest = models.CharField(max_length=64, help_text="SHA-256 of the phrasing's text")
    embedding = VectorField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["skill", "model", "digest"], name="skill_phrasing_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.model} {self.digest[:12]}"


class SkillVersion(Owned):
    """One state of a skill, never changed once written (a database trigger refuses updates):
    its number, the whole snapshot, the diff from the version before, who wrote it, and the run
    and experiences behind it. ``operation_key`` makes a learning run's operation write its
    version once however often the run is claimed again."""

    class Author(models.TextChoices):
        CURATOR = "curator"
        OPERATOR = "operator"
        ROLLBACK = "rollback"
        IMPORT = "import"
        # Sensitive values taken out of an existing skill (skills.services.redaction).
        REDACTION = "redaction"

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    snapshot = models.JSONField()
    diff = models.TextField(blank=True)
    author = models.CharField(max_length=9, choices=Author.choices)
    operation = models.CharField(max_length=12, blank=True, help_text="create, edit, merge, ...")
    run = models.ForeignKey(
        LearningRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="versions"
    )
    experience_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    operation_key = models.CharField(max_length=64, null=True, blank=True, unique=True)
    needs_review = models.BooleanField(default=False)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["skill_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["skill", "number"], name="skill_version_unique"),
        ]

    def __str__(self) -> str:
        return f"skill {self.skill_id} v{self.number}"


class SkillProposal(Owned):
    """A curator's change of a skill that waits for an operator (SKILL_REQUIRE_APPROVAL): the
    whole content it would write, against the version it was made on. Approving it writes that
    content as the skill's next version (author ``curator``, with the run and experiences
    behind it) and deprecates the skills it merged; rejecting it writes nothing."""

    class State(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="proposals")
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    snapshot = models.JSONField()
    base_version = models.PositiveIntegerField(help_text="the version it was proposed against")
    operation = models.CharField(max_length=12, help_text="edit or merge")
    run = models.ForeignKey(
        LearningRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="proposals"
    )
    experience_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    # What approving it does besides the text: the run's evidence, the tools its sessions
    # declared, the skills it merged (deprecated then), the review flag a large rewrite sets.
    learned = models.JSONField(default=dict, blank=True)
    tools = ArrayField(models.TextField(), default=list, blank=True)
    tool_descriptions = models.JSONField(default=dict, blank=True)
    merged_skill_ids = ArrayField(models.BigIntegerField(), default=list, blank=True)
    needs_review = models.BooleanField(default=False)
    note = models.TextField(blank=True)
    operation_key = models.CharField(max_length=64, unique=True)
    version = models.ForeignKey(
        SkillVersion, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(
                fields=["skill", "created_at"],
                condition=Q(state="pending"),
                name="skill_proposal_pending",
            )
        ]

    def __str__(self) -> str:
        return f"{self.operation} of skill {self.skill_id} ({self.state})"


class SkillUse(Owned):
    """A skill retrieved for a task session (the retrieval named the session): when the session
    closes, its outcome is evidence for the skill, counted once (``counted_at``)."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="uses")
    session = models.ForeignKey("conversations.Session", on_delete=models.CASCADE, related_name="+")
    outcome = models.CharField(max_length=7, choices=Outcome.choices, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    counted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["skill", "session"], name="skill_use_unique"),
        ]
        indexes = [models.Index(fields=["session"], name="skill_use_session")]

    def __str__(self) -> str:
        return f"skill {self.skill_id} in session {self.session_id}"
