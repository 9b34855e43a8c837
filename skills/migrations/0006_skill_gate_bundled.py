"""The bundled embedding model's similarity-gate calibration for skills, measured on the pairs
the skill kind ships (``skills/calibration/skill_pairs.json``) as ``manage.py calibrate_gate``
measures them: a fresh install retrieves skills with the gate its figures were benchmarked
with. Other models, and the local one when ``GATE_CALIBRATE_ON_MIGRATE`` is off, are calibrated
by the first start (``calibrate_gate --if-missing``)."""

from django.conf import settings
from django.db import migrations


def calibrate_bundled_model(apps, schema_editor) -> None:  # noqa: ANN001
    if not settings.GATE_CALIBRATE_ON_MIGRATE or settings.EMBEDDING_PROVIDER != "local":
        return
    from mirix_site.providers.embeddings import embedding_provider_from_settings
    from mirix_site.search.gate import bundled_pairs, gate_measure
    from skills.search import SKILL_KIND

    calibrations = apps.get_model("memory", "GateCalibration")
    embedder = embedding_provider_from_settings()
    if calibrations.objects.filter(model=embedder.model_name, kind=SKILL_KIND.name).exists():
        return
    pairs = bundled_pairs(SKILL_KIND.calibration_pairs)
    measured = gate_measure(embedder=embedder, related_pairs=pairs)
    calibrations.objects.create(model=embedder.model_name, kind=SKILL_KIND.name, **measured)


class Migration(migrations.Migration):
    dependencies = [
        ("skills", "0005_skills_and_lessons"),
        ("memory", "0009_gate_calibration_bundled"),
    ]

    operations = [migrations.RunPython(calibrate_bundled_model, migrations.RunPython.noop)]
