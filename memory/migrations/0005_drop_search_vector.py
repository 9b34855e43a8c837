# BM25 reads the postings table; the search_vector column and its GIN index were written on
# every store and read by nothing.

from django.db import migrations

MEMORY_MODELS = (
    "corememoryblock",
    "episodicmemory",
    "knowledgevaultitem",
    "proceduralmemory",
    "resourcememory",
    "semanticmemory",
)


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0004_embedding_spaces"),
    ]

    operations = [
        operation
        for model in MEMORY_MODELS
        for operation in (
            migrations.RemoveIndex(model_name=model, name=f"{model}_search"),
            migrations.RemoveField(model_name=model, name="search_vector"),
        )
    ]
