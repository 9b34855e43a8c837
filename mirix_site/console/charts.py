"""Charts as server-rendered SVG: no script and nothing fetched, so the dashboard works behind
any firewall and reads the same in every browser. Every mark links into the admin list it
counts and carries its number (a ``<title>`` a pointer shows, and ``data-value``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH = 460
# The admin list a daily chart's mark counts: of (day, series name).
DayUrl = Callable[[date, str], str | None]
# Colours that stay apart for the colour-blind (Okabe and Ito's palette).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")


@dataclass(frozen=True)
class Bar:
    """One bar: its label, its value, the list it counts; ``shown`` prints the value (``≈ 1.2M``
    for an estimate)."""

    label: str
    value: float
    url: str | None = None
    shown: str | None = None


def number(value: float) -> str:
    """A figure as a person reads it: 12, 1,234, 3.5, 1.2M."""
    if abs(value) >= 10_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.1f}"


def _px(coordinate: float) -> str:
    return f"{coordinate:.1f}"


def _link(url: str | None, inner: SafeString) -> SafeString:
    if not url:
        return inner
    return format_html('<a href="{}">{}</a>', url, inner)


def bar_chart(bars: Sequence[Bar], *, label: str) -> SafeString:
    """Horizontal bars, one per row, each a link to what it counts."""
    row, label_width = 24, 150
    height = row * max(len(bars), 1) + 8
    top = max((bar.value for bar in bars), default=0) or 1
    span = WIDTH - label_width - 80
    marks = []
    for index, bar in enumerate(bars):
        y = 4 + index * row
        width = max(bar.value / top * span, 1 if bar.value else 0)
        shown = bar.shown or number(bar.value)
        marks.append(
            _link(
                bar.url,
                format_html(
                    '<g class="bar" data-label="{}" data-value="{}"><title>{}: {}</title>'
                    '<text x="{}" y="{}" text-anchor="end">{}</text>'
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>'
                    '<text x="{}" y="{}">{}</text></g>',
                    bar.label,
                    bar.value,
                    bar.label,
                    shown,
                    label_width - 8,
                    y + 15,
                    bar.label,
                    label_width,
                    y + 3,
                    _px(width),
                    row - 8,
                    PALETTE[index % len(PALETTE)],
                    _px(label_width + width + 6),
                    y + 15,
                    shown,
                ),
            )
        )
    return _svg(label, height, _joined(marks))


@dataclass(frozen=True)
class Series:
    """A named line or stack of a daily chart: its value per day (a missing day: no mark)."""

    name: str
    values: dict[date, float]


def daily_chart(
    days: Sequence[date],
    series: Sequence[Series],
    *,
    label: str,
    lines: bool = False,
    unit: str = "",
    url: DayUrl | None = None,
) -> SafeString:
    """One column per day: the series stacked as bars (counts), or drawn as lines
    (``lines``: latencies, rates). ``url(day, series name)`` is the list a mark counts."""
    left, bottom = 44, 22
    keys, legend = _legend(series, left=left)
    height = 150 + legend
    plot_h = height - bottom - legend - 6
    plot_w = WIDTH - left - 8
    column = plot_w / max(len(days), 1)
    if lines:
        top = max((v for s in series for v in s.values.values()), default=0)
    else:
        top = max((sum(s.values.get(day, 0) for s in series) for day in days), default=0)
    top = top or 1
    base = legend + 6 + plot_h

    def y_of(value: float) -> float:
        return base - value / top * plot_h

    parts = [
        format_html(
            '<line x1="{}" y1="{}" x2="{}" y2="{}" class="axis"/>'
            '<text x="{}" y="{}" text-anchor="end" class="tick">{}{}</text>'
            '<text x="{}" y="{}" text-anchor="end" class="tick">0</text>',
            left,
            base,
            WIDTH - 8,
            base,
            left - 4,
            _px(y_of(top) + 4),
            number(top),
            unit,
            left - 4,
            base,
        )
    ]
    step = max(round(len(days) / 7), 1)
    for index, day in enumerate(days):
        if (len(days) - 1 - index) % step == 0:  # evenly spaced, the last day always named
            parts.append(
                format_html(
                    '<text x="{}" y="{}" text-anchor="middle" class="tick">{}</text>',
                    _px(left + column * (index + 0.5)),
                    height - 6,
                    day.strftime("%m-%d"),
                )
            )
    parts += keys
    if lines:
        parts += _lines(days, series, left=left, column=column, y_of=y_of, unit=unit, url=url)
    else:
        parts += _stacks(days, series, left=left, column=column, y_of=y_of, unit=unit, url=url)
    return _svg(label, height, _joined(parts))


def _legend(series: Sequence[Series], *, left: int) -> tuple[list[SafeString], int]:
    """The series' names and colours, in rows that fit the width; and the rows' height."""
    keys, x, y = [], left, 4
    for index, one in enumerate(series):
        width = 14 + 6 * len(one.name) + 14
        if x + width > WIDTH and x > left:
            x, y = left, y + 16
        keys.append(
            format_html(
                '<rect x="{}" y="{}" width="10" height="10" fill="{}"/>'
                '<text x="{}" y="{}" class="tick">{}</text>',
                x,
                y,
                PALETTE[index % len(PALETTE)],
                x + 14,
                y + 9,
                one.name,
            )
        )
        x += width
    return keys, y + 14


def _stacks(
    days: Sequence[date],
    series: Sequence[Series],
    *,
    left: float,
    column: float,
    y_of: Callable[[float], float],
    unit: str,
    url: DayUrl | None,
) -> list[SafeString]:
    marks = []
    for index, day in enumerate(days):
        stacked = 0.0
        for number_, one in enumerate(series):
            value = one.values.get(day, 0)
            if not value:
                continue
            y_top, y_bottom = y_of(stacked + value), y_of(stacked)
            stacked += value
            marks.append(
                _link(
                    url(day, one.name) if url else None,
                    format_html(
                        '<rect class="mark" data-day="{}" data-series="{}" data-value="{}" '
                        'x="{}" y="{}" width="{}" height="{}" fill="{}">'
                        "<title>{} {}: {}{}</title></rect>",
                        day.isoformat(),
                        one.name,
                        value,
                        _px(left + column * index + column * 0.15),
                        _px(y_top),
                        _px(column * 0.7),
                        _px(max(y_bottom - y_top, 1)),
                        PALETTE[number_ % len(PALETTE)],
                        day.isoformat(),
                        one.name,
                        number(value),
                        unit,
                    ),
                )
            )
    return marks


def _lines(
    days: Sequence[date],
    series: Sequence[Series],
    *,
    left: float,
    column: float,
    y_of: Callable[[float], float],
    unit: str,
    url: DayUrl | None,
) -> list[SafeString]:
    marks = []
    for number_, one in enumerate(series):
        colour = PALETTE[number_ % len(PALETTE)]
        points = [
            (left + column * (index + 0.5), y_of(one.values[day]), day)
            for index, day in enumerate(days)
            if day in one.values
        ]
        if len(points) > 1:
            marks.append(
                format_html(
                    '<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>',
                    colour,
                    " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points),
                )
            )
        for x, y, day in points:
            value = one.values[day]
            marks.append(
                _link(
                    url(day, one.name) if url else None,
                    format_html(
                        '<circle class="mark" data-day="{}" data-series="{}" data-value="{}" '
                        'cx="{}" cy="{}" r="3.5" fill="{}"><title>{} {}: {}{}</title>'
                        "</circle>",
                        day.isoformat(),
                        one.name,
                        value,
                        _px(x),
                        _px(y),
                        colour,
                        day.isoformat(),
                        one.name,
                        number(value),
                        unit,
                    ),
                )
            )
    return marks


def _joined(marks: Sequence[SafeString]) -> SafeString:
    return format_html_join("", "{}", ((mark,) for mark in marks))


def _svg(label: str, height: int, body: SafeString) -> SafeString:
    return format_html(
        '<svg class="chart" role="img" aria-label="{}" viewBox="0 0 {} {}" width="{}" '
        'height="{}" xmlns="http://www.w3.org/2000/svg">{}</svg>',
        label,
        WIDTH,
        height,
        WIDTH,
        height,
        body,
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> SafeString:
    """A small table of figures, for what reads better as numbers than as marks."""
    head = format_html_join("", "<th>{}</th>", ((header,) for header in headers))
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        ((format_html_join("", "<td>{}</td>", ((cell,) for cell in row)),) for row in rows),
    )
    return format_html(
        '<table class="figures"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', head, body
    )
