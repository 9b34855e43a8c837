"""The retrieval engine's tables leave the memory app's record for the search app's
(``search.0001_engine_tables``); the database is not touched."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0012_agent_prompt_versions"),
        ("search", "0001_engine_tables"),
        # Its data migration reads memory.GateCalibration as the history had it before the move.
        ("skills", "0006_skill_gate_bundled"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name="documentstats",
                    name="client",
                ),
                migrations.RemoveField(
                    model_name="documentstats",
                    name="end_user",
                ),
                migrations.RemoveField(
                    model_name="documentstats",
                    name="organization",
                ),
                migrations.DeleteModel(
                    name="EmbeddingSpace",
                ),
                migrations.DeleteModel(
                    name="GateCalibration",
                ),
                migrations.RemoveField(
                    model_name="posting",
                    name="client",
                ),
                migrations.RemoveField(
                    model_name="posting",
                    name="end_user",
                ),
                migrations.RemoveField(
                    model_name="posting",
                    name="organization",
                ),
                migrations.RemoveField(
                    model_name="retrievallog",
                    name="client",
                ),
                migrations.RemoveField(
                    model_name="retrievallog",
                    name="end_user",
                ),
                migrations.RemoveField(
                    model_name="retrievallog",
                    name="organization",
                ),
                migrations.DeleteModel(
                    name="SearchableKindCode",
                ),
                migrations.RemoveField(
                    model_name="termstats",
                    name="client",
                ),
                migrations.RemoveField(
                    model_name="termstats",
                    name="end_user",
                ),
                migrations.RemoveField(
                    model_name="termstats",
                    name="organization",
                ),
                migrations.DeleteModel(
                    name="DocumentStats",
                ),
                migrations.DeleteModel(
                    name="Posting",
                ),
                migrations.DeleteModel(
                    name="RetrievalLog",
                ),
                migrations.DeleteModel(
                    name="TermStats",
                ),
            ],
            database_operations=[],
        ),
    ]
