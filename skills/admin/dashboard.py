"""The dashboard's panels of skill learning and recommendation, and their daily series."""

from __future__ import annotations

from datetime import date

from django.conf import settings

from mirix_site.console.charts import Bar, Series, bar_chart, daily_chart, table
from mirix_site.console.panels import (
    DailySeries,
    Dashboard,
    Panel,
    daily_series_register,
    dashboard_register,
    list_url,
    on_day,
)
from skills.models import LearningRun, Recommendation, Skill, SkillVersion
from skills.selectors import (
    learning_run_daily_figures,
    recommendation_daily_figures,
    skill_change_daily_figures,
)

SKILL_CHANGES = ("created", "edited", "promoted", "demoted")
# The confidence bands recommendations are counted in (their lower ends).
BANDS = ("0.0", "0.2", "0.4", "0.6", "0.8")


def _runs_on(day: date, state: str) -> str:
    return list_url(LearningRun, state__exact=state, **on_day("created_at", day))


def _skill_changes_on(day: date, change: str) -> str:
    if change == "created":
        return list_url(SkillVersion, operation__exact="create", **on_day("created_at", day))
    if change == "edited":
        return list_url(SkillVersion, **on_day("created_at", day))
    return list_url(Skill, **on_day("updated_at", day))


def _recommendation_bands(dashboard: Dashboard) -> Panel:
    rows, bars = [], []
    for band in BANDS:
        issued = dashboard.total("recommendations", f"issued_{band}")
        outcomes = dashboard.total("recommendations", f"outcomes_{band}")
        credit = dashboard.total("recommendations", f"credit_{band}")
        confidence = dashboard.total("recommendations", f"confidence_{band}")
        high = f"{float(band) + 0.2:.1f}"
        rate = credit / outcomes if outcomes else None
        rows.append(
            [
                f"{band}-{high}",
                f"{issued:,.0f}",
                f"{outcomes:,.0f}",
                f"{rate:.2f}" if rate is not None else "-",
                f"{confidence / outcomes:.2f}" if outcomes else "-",
            ]
        )
        bars.append(
            Bar(
                f"confidence {band}-{high}",
                round(rate or 0.0, 4),
                list_url(Recommendation, confidence__gte=band, confidence__lt=high),
                f"{rate:.2f} of {outcomes:,.0f}" if rate is not None else "no outcome",
            )
        )
    return Panel(
        f"Recommendations followed, by confidence ({len(dashboard.days)} days)",
        table(["confidence", "issued", "outcomes", "success rate", "mean confidence"], rows)
        + bar_chart(bars, label="success rate of followed recommendations by confidence"),
        note="Outcomes recorded with a recommendation_id. An honest lower bound has a success "
        "rate at or above its band in every band with enough outcomes.",
        url=list_url(Recommendation),
    )


def _dashboard(dashboard: Dashboard) -> list[Panel]:
    return [
        Panel(
            "Learning runs by state",
            daily_chart(
                dashboard.days,
                [
                    Series(state, dashboard.values("learning_runs", state))
                    for state in LearningRun.State.values
                ],
                label="learning runs by state per day",
                url=_runs_on,
            ),
            note="Runs queued each day, by the state they are in now.",
            url=list_url(LearningRun),
        ),
        Panel(
            "Skills created, edited, promoted and demoted",
            daily_chart(
                dashboard.days,
                [Series(change, dashboard.values("skills", change)) for change in SKILL_CHANGES],
                label="skill changes per day",
                url=_skill_changes_on,
            ),
            note=f"Promoted: made active by {settings.SKILL_ACTIVATE_SUCCESSES} successful uses "
            "or an operator; demoted: active no more, or deprecated.",
            url=list_url(Skill),
        ),
        _recommendation_bands(dashboard),
    ]


daily_series_register(
    DailySeries(
        "learning_runs",
        keys=tuple(LearningRun.State.values),
        figures=learning_run_daily_figures,
        settle_days=settings.DASHBOARD_DAYS,  # a run's state changes after its day
    )
)
daily_series_register(
    DailySeries("skills", keys=SKILL_CHANGES, figures=skill_change_daily_figures, settle_days=2)
)
daily_series_register(
    DailySeries(
        "recommendations",
        keys=(),
        figures=recommendation_daily_figures,
        settle_days=settings.DASHBOARD_DAYS,  # an outcome comes back days after its advice
    )
)
dashboard_register(40, _dashboard)
