"""Skills, their immutable versions and their uses in task sessions; what distilled lessons add
to experiences; learning runs' counts, and the rule that a user's runs never overlap.

A skill version is never changed once written: a trigger refuses any update of its content
(the one change allowed is the foreign key to its run becoming null, when the run is deleted).
"""

import django.contrib.postgres.fields
import django.contrib.postgres.indexes
import django.db.models.deletion
import django.db.models.functions.comparison
import pgvector.django.indexes
import pgvector.django.vector
from django.db import migrations, models

IMMUTABLE_VERSIONS = """
CREATE FUNCTION skills_skillversion_immutable() RETURNS trigger AS $$
BEGIN
    IF (NEW.skill_id, NEW.number, NEW.snapshot, NEW.diff, NEW.author, NEW.operation,
        NEW.experience_ids, NEW.operation_key, NEW.needs_review, NEW.note, NEW.created_at)
       IS DISTINCT FROM
       (OLD.skill_id, OLD.number, OLD.snapshot, OLD.diff, OLD.author, OLD.operation,
        OLD.experience_ids, OLD.operation_key, OLD.needs_review, OLD.note, OLD.created_at)
    THEN
        RAISE EXCEPTION 'skill versions are immutable (version %)', OLD.id
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER skills_skillversion_immutable BEFORE UPDATE ON skills_skillversion
    FOR EACH ROW EXECUTE FUNCTION skills_skillversion_immutable();
"""
MUTABLE_VERSIONS = """
DROP TRIGGER skills_skillversion_immutable ON skills_skillversion;
DROP FUNCTION skills_skillversion_immutable();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_api_key_reveals_secrets"),
        ("conversations", "0003_message_images"),
        ("skills", "0004_learning_runs"),
    ]

    operations = [
        migrations.CreateModel(
            name="Skill",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=64)),
                ("description", models.CharField(max_length=1024)),
                (
                    "triggers",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.TextField(), blank=True, default=list, size=None
                    ),
                ),
                ("instructions", models.TextField(blank=True)),
                (
                    "pitfalls",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.TextField(), blank=True, default=list, size=None
                    ),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("candidate", "Candidate"),
                            ("active", "Active"),
                            ("deprecated", "Deprecated"),
                            ("deleted", "Deleted"),
                        ],
                        default="candidate",
                        max_length=10,
                    ),
                ),
                ("version", models.PositiveIntegerField(default=0)),
                ("successes", models.PositiveIntegerField(default=0)),
                ("failures", models.PositiveIntegerField(default=0)),
                ("partials", models.PositiveIntegerField(default=0)),
                ("learned_successes", models.PositiveIntegerField(default=0)),
                ("learned_failures", models.PositiveIntegerField(default=0)),
                ("learned_partials", models.PositiveIntegerField(default=0)),
                ("needs_review", models.BooleanField(default=False)),
                ("review_reason", models.TextField(blank=True)),
                (
                    "tools",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.TextField(), blank=True, default=list, size=None
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "ordering": ["name", "id"],
            },
        ),
        migrations.CreateModel(
            name="SkillEmbedding",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("model", models.CharField(max_length=100)),
                ("chunk_index", models.PositiveSmallIntegerField(default=0)),
                ("embedding", pgvector.django.vector.VectorField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "abstract": False,
            },
        ),
        migrations.CreateModel(
            name="SkillUse",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "outcome",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("success", "Success"),
                            ("failure", "Failure"),
                            ("partial", "Partial"),
                        ],
                        max_length=7,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("counted_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name="SkillVersion",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("number", models.PositiveIntegerField()),
                ("snapshot", models.JSONField()),
                ("diff", models.TextField(blank=True)),
                (
                    "author",
                    models.CharField(
                        choices=[
                            ("curator", "Curator"),
                            ("operator", "Operator"),
                            ("rollback", "Rollback"),
                            ("import", "Import"),
                        ],
                        max_length=8,
                    ),
                ),
                (
                    "operation",
                    models.CharField(
                        blank=True, help_text="create, edit, merge, ...", max_length=12
                    ),
                ),
                (
                    "experience_ids",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.BigIntegerField(), blank=True, default=list, size=None
                    ),
                ),
                (
                    "operation_key",
                    models.CharField(blank=True, max_length=64, null=True, unique=True),
                ),
                ("needs_review", models.BooleanField(default=False)),
                ("note", models.TextField(blank=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["skill_id", "number"],
            },
        ),
        migrations.AddField(
            model_name="experience",
            name="consumed_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="consumed",
                to="skills.learningrun",
            ),
        ),
        migrations.AddField(
            model_name="experience",
            name="content",
            field=models.TextField(blank=True),
        ),
        migrations.AddField(
            model_name="experience",
            name="credibility",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="experience",
            name="distilled_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="lessons",
                to="skills.learningrun",
            ),
        ),
        migrations.AddField(
            model_name="experience",
            name="evidence",
            field=models.TextField(blank=True, help_text="The quote the lesson rests on."),
        ),
        migrations.AddField(
            model_name="experience",
            name="importance",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="experience",
            name="lesson_type",
            field=models.CharField(
                blank=True, choices=[("learn", "Learn"), ("avoid", "Avoid")], max_length=5
            ),
        ),
        migrations.AddField(
            model_name="experience",
            name="pool_reason",
            field=models.TextField(blank=True, help_text="Why a pooled lesson waits."),
        ),
        migrations.AddField(
            model_name="experience",
            name="signal",
            field=models.CharField(
                blank=True,
                choices=[
                    ("tool_error", "Tool Error"),
                    ("user_critique", "User Critique"),
                    ("user_confirmation", "User Confirmation"),
                    ("self_correction", "Self Correction"),
                    ("inferred", "Inferred"),
                ],
                max_length=17,
            ),
        ),
        migrations.AddField(
            model_name="experience",
            name="status",
            field=models.CharField(
                blank=True,
                choices=[
                    ("pending", "Pending"),
                    ("consumed", "Consumed"),
                    ("pooled", "Pooled"),
                    ("superseded", "Superseded"),
                ],
                help_text="Where the curator is with the lesson (blank: not a lesson).",
                max_length=10,
            ),
        ),
        migrations.AddField(
            model_name="experience",
            name="title",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name="learningrun",
            name="experiences_consumed",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="learningrun",
            name="experiences_distilled",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="learningrun",
            name="experiences_pooled",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="learningrun",
            name="warnings",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="learningrunsession",
            name="distilled_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="learningrunsession",
            name="outcome",
            field=models.CharField(
                blank=True,
                choices=[("success", "Success"), ("failure", "Failure"), ("partial", "Partial")],
                max_length=7,
            ),
        ),
        migrations.AddIndex(
            model_name="experience",
            index=models.Index(
                condition=models.Q(("status__in", ["pending", "pooled"])),
                fields=["client", "end_user", "status"],
                name="experience_lessons_waiting",
            ),
        ),
        migrations.AddConstraint(
            model_name="experience",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("importance__isnull", True),
                    models.Q(
                        ("credibility__gte", 0.0),
                        ("credibility__lte", 1.0),
                        ("importance__gte", 0.0),
                        ("importance__lte", 1.0),
                    ),
                    _connector="OR",
                ),
                name="experience_lesson_scores_range",
            ),
        ),
        migrations.AddConstraint(
            model_name="learningrun",
            constraint=models.UniqueConstraint(
                condition=models.Q(("state", "running")),
                fields=("client", "end_user"),
                name="one_running_learning_run_per_user",
            ),
        ),
        migrations.AddField(
            model_name="skill",
            name="client",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="accounts.client"
            ),
        ),
        migrations.AddField(
            model_name="skill",
            name="end_user",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="accounts.enduser"
            ),
        ),
        migrations.AddField(
            model_name="skill",
            name="organization",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="accounts.organization",
            ),
        ),
        migrations.AddField(
            model_name="skillembedding",
            name="client",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="accounts.client"
            ),
        ),
        migrations.AddField(
            model_name="skillembedding",
            name="end_user",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="accounts.enduser"
            ),
        ),
        migrations.AddField(
            model_name="skillembedding",
            name="organization",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="accounts.organization",
            ),
        ),
        migrations.AddField(
            model_name="skillembedding",
            name="skill",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="embeddings",
                to="skills.skill",
            ),
        ),
        migrations.AddField(
            model_name="skilluse",
            name="client",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="accounts.client"
            ),
        ),
        migrations.AddField(
            model_name="skilluse",
            name="end_user",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="accounts.enduser"
            ),
        ),
        migrations.AddField(
            model_name="skilluse",
            name="organization",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="accounts.organization",
            ),
        ),
        migrations.AddField(
            model_name="skilluse",
            name="session",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="conversations.session",
            ),
        ),
        migrations.AddField(
            model_name="skilluse",
            name="skill",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="uses", to="skills.skill"
            ),
        ),
        migrations.AddField(
            model_name="skillversion",
            name="client",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="accounts.client"
            ),
        ),
        migrations.AddField(
            model_name="skillversion",
            name="end_user",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="accounts.enduser"
            ),
        ),
        migrations.AddField(
            model_name="skillversion",
            name="organization",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="accounts.organization",
            ),
        ),
        migrations.AddField(
            model_name="skillversion",
            name="run",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="versions",
                to="skills.learningrun",
            ),
        ),
        migrations.AddField(
            model_name="skillversion",
            name="skill",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="versions",
                to="skills.skill",
            ),
        ),
        migrations.AddIndex(
            model_name="skill",
            index=models.Index(fields=["end_user", "client", "status"], name="skill_owner"),
        ),
        migrations.AddConstraint(
            model_name="skill",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status", "deleted"), _negated=True),
                fields=("end_user", "client", "name"),
                name="skill_name_unique",
            ),
        ),
        migrations.AddIndex(
            model_name="skillembedding",
            index=pgvector.django.indexes.HnswIndex(
                django.contrib.postgres.indexes.OpClass(
                    django.db.models.functions.comparison.Cast(
                        "embedding", output_field=pgvector.django.vector.VectorField(dimensions=384)
                    ),
                    name="vector_cosine_ops",
                ),
                condition=models.Q(("model", "all-MiniLM-L6-v2")),
                ef_construction=64,
                m=16,
                name="skillembedding_hnsw",
            ),
        ),
        migrations.AddIndex(
            model_name="skillembedding",
            index=models.Index(fields=["end_user", "client", "model"], name="skillembedding_owner"),
        ),
        migrations.AddIndex(
            model_name="skilluse",
            index=models.Index(fields=["session"], name="skill_use_session"),
        ),
        migrations.AddConstraint(
            model_name="skilluse",
            constraint=models.UniqueConstraint(
                fields=("skill", "session"), name="skill_use_unique"
            ),
        ),
        migrations.AddConstraint(
            model_name="skillversion",
            constraint=models.UniqueConstraint(
                fields=("skill", "number"), name="skill_version_unique"
            ),
        ),
        migrations.RunSQL(IMMUTABLE_VERSIONS, MUTABLE_VERSIONS),
    ]
