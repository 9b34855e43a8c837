"""The bundled embedding model's action-grouping calibration, measured on the bundled pairs as
``manage.py calibrate_action_grouping`` measures it, so that a fresh install groups actions as
it was tested. Another model is calibrated by the first start
(``calibrate_action_grouping --if-missing``); so is the local model when
``GATE_CALIBRATE_ON_MIGRATE`` (the setting of every model calibration a migration makes) is off."""

from django.conf import settings
from django.db import migrations


def calibrate_bundled_model(apps, schema_editor) -> None:  # noqa: ANN001
    if not settings.GATE_CALIBRATE_ON_MIGRATE or settings.EMBEDDING_PROVIDER != "local":
        return
    from mirix_site.providers.embeddings import embedding_provider_from_settings
    from skills.services.grouping import bundled_pairs, grouping_measure

    calibrations = apps.get_model("skills", "ActionGroupingCalibration")
    embedder = embedding_provider_from_settings()
    if calibrations.objects.filter(model=embedder.model_name).exists():
        return
    same, different = bundled_pairs()
    measured = grouping_measure(embedder=embedder, same=same, different=different)
    # Later fields are filled by the migrations that add them (0014).
    known = {field.name for field in calibrations._meta.get_fields()}
    calibrations.objects.create(
        model=embedder.model_name, **{k: v for k, v in measured.items() if k in known}
    )


class Migration(migrations.Migration):
    dependencies = [("skills", "0001_experiences")]

    operations = [migrations.RunPython(calibrate_bundled_model, migrations.RunPython.noop)]
