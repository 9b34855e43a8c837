"""The bundled embedding model's similarity-gate calibration, measured on the bundled pairs as
``manage.py calibrate_gate`` measures it: a fresh install searches with the gate its figures
were benchmarked with. A remote model (openai, gemini) is calibrated by the first start
(``calibrate_gate --if-missing``) rather than by a migration calling an API; so is the local
model when ``GATE_CALIBRATE_ON_MIGRATE`` is off (the test suite)."""

from django.conf import settings
from django.db import migrations


def calibrate_bundled_model(apps, schema_editor) -> None:  # noqa: ANN001
    if not settings.GATE_CALIBRATE_ON_MIGRATE or settings.EMBEDDING_PROVIDER != "local":
        return
    from mirix_site.providers.embeddings import embedding_provider_from_settings
    from mirix_site.search.gate import bundled_pairs, gate_measure

    calibrations = apps.get_model("memory", "GateCalibration")
    embedder = embedding_provider_from_settings()
    if calibrations.objects.filter(model=embedder.model_name, kind="").exists():
        return
    measured = gate_measure(embedder=embedder, related_pairs=bundled_pairs())
    calibrations.objects.create(model=embedder.model_name, kind="", **measured)


class Migration(migrations.Migration):
    dependencies = [("memory", "0008_extraction_job_served")]

    operations = [migrations.RunPython(calibrate_bundled_model, migrations.RunPython.noop)]
