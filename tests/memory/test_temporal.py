"""Temporal phrases to date ranges: every supported form, the ambiguous rules, the false positives.

``now`` is Wednesday 2026-03-18 15:00, in UTC and in New York (EDT since 2026-03-08, so ranges
reaching back before that cross a DST change). No database needed.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

import pytest

from memory.query.temporal import DateRange, temporal_range, temporal_spans

NEW_YORK = ZoneInfo("America/New_York")
ZONES = [pytest.param(UTC, id="utc"), pytest.param(NEW_YORK, id="new_york")]


def wednesday_afternoon(zone: tzinfo) -> datetime:
    return datetime(2026, 3, 18, 15, 0, tzinfo=zone)


def day_start(day: date, zone: tzinfo) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=zone)


def day_end(day: date, zone: tzinfo) -> datetime:
    return datetime(day.year, day.month, day.day, 23, 59, 59, 999999, tzinfo=zone)


def found(text: str, now: datetime) -> DateRange:
    result = temporal_range(text, now=now)
    assert result is not None, text
    return result


# (text, first day, last day, the phrase as found)
WHOLE_DAYS = [
    # today and yesterday
    ("What did we discuss today?", date(2026, 3, 18), date(2026, 3, 18), "today"),
    ("what's the plan tonight", date(2026, 3, 18), date(2026, 3, 18), "tonight"),
    ("What did I say this morning?", date(2026, 3, 18), date(2026, 3, 18), "this morning"),
    ("the call this afternoon", date(2026, 3, 18), date(2026, 3, 18), "this afternoon"),
    ("This evening we met", date(2026, 3, 18), date(2026, 3, 18), "This evening"),
    ("What did we discuss yesterday?", date(2026, 3, 17), date(2026, 3, 17), "yesterday"),
    ("Did I mention it last night?", date(2026, 3, 17), date(2026, 3, 17), "last night"),
    (
        "and the day before yesterday?",
        date(2026, 3, 16),
        date(2026, 3, 16),
        "the day before yesterday",
    ),
    ("day before yesterday", date(2026, 3, 16), date(2026, 3, 16), "day before yesterday"),
    # N units ago: the calendar day / week / month / year that many units back
    ("what did I say 3 days ago", date(2026, 3, 15), date(2026, 3, 15), "3 days ago"),
    ("a day ago", date(2026, 3, 17), date(2026, 3, 17), "a day ago"),
    ("Two days ago we talked", date(2026, 3, 16), date(2026, 3, 16), "Two days ago"),
    ("twelve days ago", date(2026, 3, 6), date(2026, 3, 6), "twelve days ago"),
    ("2 weeks ago", date(2026, 3, 2), date(2026, 3, 8), "2 weeks ago"),
    ("a month ago", date(2026, 2, 1), date(2026, 2, 28), "a month ago"),
    ("a year ago", date(2025, 1, 1), date(2025, 12, 31), "a year ago"),
    # vague counts span 2N units back to 1 unit back
    ("a few days ago", date(2026, 3, 12), date(2026, 3, 17), "a few days ago"),
    ("a couple of weeks ago", date(2026, 2, 16), date(2026, 3, 15), "a couple of weeks ago"),
    # rolling windows of whole days ending today
    ("in the last 4 days", date(2026, 3, 15), date(2026, 3, 18), "last 4 days"),
    ("over the past two weeks", date(2026, 3, 5), date(2026, 3, 18), "past two weeks"),
    ("in the past 3 months", date(2025, 12, 19), date(2026, 3, 18), "past 3 months"),
    ("the last 2 years", date(2024, 3, 19), date(2026, 3, 18), "last 2 years"),
    ("the last few days", date(2026, 3, 16), date(2026, 3, 18), "last few days"),
    ("the last couple days", date(2026, 3, 17), date(2026, 3, 18), "last couple days"),
    ("this past week", date(2026, 3, 12), date(2026, 3, 18), "past week"),
    ("in the past month", date(2026, 2, 19), date(2026, 3, 18), "past month"),
    ("the past year", date(2025, 3, 19), date(2026, 3, 18), "past year"),
    ("recently", date(2026, 3, 12), date(2026, 3, 18), "recently"),
    ("what have I been up to lately?", date(2026, 3, 12), date(2026, 3, 18), "lately"),
    ("the other day", date(2026, 3, 11), date(2026, 3, 17), "the other day"),
    # calendar periods, whole, ISO weeks from Monday
    ("What happened last week?", date(2026, 3, 9), date(2026, 3, 15), "last week"),
    ("the previous week", date(2026, 3, 9), date(2026, 3, 15), "previous week"),
    ("this week", date(2026, 3, 16), date(2026, 3, 22), "this week"),
    ("the week before last", date(2026, 3, 2), date(2026, 3, 8), "the week before last"),
    ("last month", date(2026, 2, 1), date(2026, 2, 28), "last month"),
    ("this month", date(2026, 3, 1), date(2026, 3, 31), "this month"),
    ("last year", date(2025, 1, 1), date(2025, 12, 31), "last year"),
    ("this year", date(2026, 1, 1), date(2026, 12, 31), "this year"),
    ("last weekend", date(2026, 3, 14), date(2026, 3, 15), "last weekend"),
    ("anything over the weekend?", date(2026, 3, 14), date(2026, 3, 15), "over the weekend"),
    # months: the latest one that has begun
    ("What did we discuss in March?", date(2026, 3, 1), date(2026, 3, 31), "March"),
    ("in march", date(2026, 3, 1), date(2026, 3, 31), "march"),
    ("during April", date(2025, 4, 1), date(2025, 4, 30), "April"),
    ("in December", date(2025, 12, 1), date(2025, 12, 31), "December"),
    ("in May 2024", date(2024, 5, 1), date(2024, 5, 31), "May 2024"),
    ("the March 2025 offsite", date(2025, 3, 1), date(2025, 3, 31), "March 2025"),
    ("last March", date(2025, 3, 1), date(2025, 3, 31), "last March"),
    ("In May I went to Paris", date(2025, 5, 1), date(2025, 5, 31), "May"),
    ("early February", date(2026, 2, 1), date(2026, 2, 10), "early February"),
    ("mid-March", date(2026, 3, 11), date(2026, 3, 20), "mid-March"),
    ("late February", date(2026, 2, 21), date(2026, 2, 28), "late February"),
    # dates: the latest one on or before today
    ("what did we say on March 5?", date(2026, 3, 5), date(2026, 3, 5), "March 5"),
    ("on March 25", date(2025, 3, 25), date(2025, 3, 25), "March 25"),
    ("March 5, 2025", date(2025, 3, 5), date(2025, 3, 5), "March 5, 2025"),
    ("on 5 March", date(2026, 3, 5), date(2026, 3, 5), "5 March"),
    ("on the 5th of March 2024", date(2024, 3, 5), date(2024, 3, 5), "the 5th of March 2024"),
    ("Jan 12th", date(2026, 1, 12), date(2026, 1, 12), "Jan 12th"),
    ("we met on may 5", date(2025, 5, 5), date(2025, 5, 5), "may 5"),
    ("Feb 29", date(2024, 2, 29), date(2024, 2, 29), "Feb 29"),
    # weekdays: the latest one before today
    ("What did we decide on Monday?", date(2026, 3, 16), date(2026, 3, 16), "Monday"),
    ("last Wednesday", date(2026, 3, 11), date(2026, 3, 11), "last Wednesday"),
    ("on Friday", date(2026, 3, 13), date(2026, 3, 13), "Friday"),
    ("what did we do sunday", date(2026, 3, 15), date(2026, 3, 15), "sunday"),
    # years and ISO dates
    ("in 2025", date(2025, 1, 1), date(2025, 12, 31), "2025"),
    ("between 2023 and 2025", date(2023, 1, 1), date(2025, 12, 31), "between 2023 and 2025"),
    ("notes from 2025-11-18", date(2025, 11, 18), date(2025, 11, 18), "2025-11-18"),
    ("on 2025/11/18", date(2025, 11, 18), date(2025, 11, 18), "2025/11/18"),
    ("at 2025-11-18T10:30:00Z", date(2025, 11, 18), date(2025, 11, 18), "2025-11-18T10:30:00Z"),
    # ranges
    (
        "between 2025-11-01 and 2025-11-18",
        date(2025, 11, 1),
        date(2025, 11, 18),
        "between 2025-11-01 and 2025-11-18",
    ),
    (
        "from 2025-11-01 to 2025-11-18",
        date(2025, 11, 1),
        date(2025, 11, 18),
        "from 2025-11-01 to 2025-11-18",
    ),
    ("2025-11-01..2025-11-18", date(2025, 11, 1), date(2025, 11, 18), "2025-11-01..2025-11-18"),
    (
        "between March 3 and March 10",
        date(2026, 3, 3),
        date(2026, 3, 10),
        "between March 3 and March 10",
    ),
    # May is ahead, so last year's; March is then read as the March before that May
    ("from March to May", date(2025, 3, 1), date(2025, 5, 31), "from March to May"),
]


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(("text", "first_day", "last_day", "expression"), WHOLE_DAYS)
def test_phrase_covers_whole_local_days(
    zone: tzinfo, text: str, first_day: date, last_day: date, expression: str
):
    result = found(text, wednesday_afternoon(zone))

    assert (result.start, result.end) == (day_start(first_day, zone), day_end(last_day, zone))
    assert result.start.utcoffset() == day_start(first_day, zone).utcoffset()
    assert result.expression == expression


# (text, first day, the phrase as found): these end at ``now``
UNTIL_NOW = [
    ("anything earlier today?", date(2026, 3, 18), "earlier today"),
    ("earlier this week", date(2026, 3, 16), "earlier this week"),
    ("earlier this month", date(2026, 3, 1), "earlier this month"),
    ("earlier this year", date(2026, 1, 1), "earlier this year"),
    ("since yesterday", date(2026, 3, 17), "since yesterday"),
    ("what changed since last week?", date(2026, 3, 9), "since last week"),
    ("since Monday", date(2026, 3, 16), "since Monday"),
    ("ever since March", date(2026, 3, 1), "since March"),
    ("since 2025-11-01", date(2025, 11, 1), "since 2025-11-01"),
    ("since 2024", date(2024, 1, 1), "since 2024"),
]


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(("text", "first_day", "expression"), UNTIL_NOW)
def test_phrase_runs_until_now(zone: tzinfo, text: str, first_day: date, expression: str):
    now = wednesday_afternoon(zone)

    result = found(text, now)

    assert (result.start, result.end) == (day_start(first_day, zone), now)
    assert result.expression == expression


# (text, hours back at the start, hours back at the end, the phrase as found)
EXACT_HOURS = [
    ("in the past 24 hours", 24, 0, "past 24 hours"),
    ("the last 3 hours", 3, 0, "last 3 hours"),
    ("in the last hour", 1, 0, "the last hour"),
    ("past 30 minutes", 0.5, 0, "past 30 minutes"),
    ("an hour ago", 2, 0, "an hour ago"),
    ("3 hours ago", 4, 2, "3 hours ago"),
]


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(("text", "hours_from", "hours_to", "expression"), EXACT_HOURS)
def test_hours_and_minutes_are_exact(
    zone: tzinfo, text: str, hours_from: float, hours_to: float, expression: str
):
    now = wednesday_afternoon(zone)

    result = found(text, now)

    assert result.start == now - timedelta(hours=hours_from)
    assert result.end == now - timedelta(hours=hours_to)
    assert result.expression == expression


NOT_TEMPORAL = [
    "",
    "Tell me about the Apollo project",
    "May I ask you something?",
    "Thanks, and May I ask one more thing?",
    "this may be wrong",
    "I will march on",
    "They march through the night",  # "through the night" is no date either
    "We came in second place",
    "Buy a week's worth of groceries",
    "In the past, we used Python",
    "Last but not least, the report",
    "I have 5 days of vacation left",
    "Write it in 2000 words",
    "Jan said hi",
    "call jan 5 times",
    "you may 5 times retry",
    "in Jan",  # abbreviations need a day or a year
    "Let's meet next Monday",
    "We do standups every Friday",
    "this Monday",  # past or coming: ambiguous, so not read
    "what is planned for tomorrow",
    "build version 2025-11-18b",
    "v1.2025-11-18",
    "February 30",
    "2025-13-45",
    "the last 0 days",
    "last 9999 years",
]


@pytest.mark.parametrize("text", NOT_TEMPORAL)
def test_text_without_a_time_gives_none(text: str):
    assert temporal_range(text, now=wednesday_afternoon(UTC)) is None


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        # the last mentioned wins: the newest words carry the question
        ("Yesterday we covered the budget; what about last week?", "last week"),
        ("In March, or was it last Monday?", "last Monday"),
        ("yesterday and last month", "last month"),  # two times, not a range
        # overlapping phrases: the longest wins
        ("the day before yesterday", "the day before yesterday"),
        ("earlier this week", "earlier this week"),
        ("since last week", "since last week"),
    ],
)
def test_which_phrase_wins(text: str, expression: str):
    assert found(text, wednesday_afternoon(UTC)).expression == expression


def test_days_start_at_midnight_in_the_zone_of_now():
    late_evening_in_new_york = datetime(
        2026, 3, 18, 22, 30, tzinfo=NEW_YORK
    )  # 02:30 UTC on the 19th

    in_new_york = found("today", late_evening_in_new_york)
    in_utc = found("today", late_evening_in_new_york.astimezone(UTC))

    assert in_new_york.start == datetime(2026, 3, 18, tzinfo=NEW_YORK)
    assert in_utc.start == datetime(2026, 3, 19, tzinfo=UTC)
    assert in_new_york.start.tzinfo is NEW_YORK


def test_hours_across_a_dst_change_are_real_hours():
    # Clocks in New York jumped from 02:00 to 03:00 on 2026-03-08.
    noon_after_the_change = datetime(2026, 3, 8, 12, tzinfo=NEW_YORK)

    result = found("past 24 hours", noon_after_the_change)

    assert result.end.astimezone(UTC) - result.start.astimezone(UTC) == timedelta(hours=24)
    assert result.start == datetime(2026, 3, 7, 11, tzinfo=NEW_YORK)


def test_days_across_a_dst_change_start_at_local_midnight():
    result = found("last 12 days", wednesday_afternoon(NEW_YORK))

    assert result.start == datetime(2026, 3, 7, tzinfo=NEW_YORK)
    assert result.start.utcoffset() == timedelta(hours=-5)
    assert result.end.utcoffset() == timedelta(hours=-4)


@pytest.mark.parametrize(
    ("text", "first_day", "last_day"),
    [
        ("in March", date(2025, 3, 1), date(2025, 3, 31)),  # March 2026 has not begun
        ("in February", date(2026, 2, 1), date(2026, 2, 28)),  # the current month counts
        ("on March 5", date(2025, 3, 5), date(2025, 3, 5)),
        ("last February", date(2025, 2, 1), date(2025, 2, 28)),  # the last one that has ended
        ("on Tuesday", date(2026, 2, 3), date(2026, 2, 3)),  # today is a Tuesday: a week ago
        ("over the weekend", date(2026, 2, 7), date(2026, 2, 8)),
    ],
)
def test_phrases_without_a_year_read_backwards_from_today(
    text: str, first_day: date, last_day: date
):
    tuesday = datetime(2026, 2, 10, 9, tzinfo=UTC)

    result = found(text, tuesday)

    assert (result.start, result.end) == (day_start(first_day, UTC), day_end(last_day, UTC))


def test_this_weekend_on_a_sunday_is_the_one_under_way():
    sunday = datetime(2026, 3, 22, 10, tzinfo=UTC)

    assert found("this weekend", sunday).start == datetime(2026, 3, 21, tzinfo=UTC)
    assert found("over the weekend", sunday).start == datetime(2026, 3, 21, tzinfo=UTC)
    assert found("last weekend", sunday).start == datetime(2026, 3, 14, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("What did I do a week ago?", "a week ago"),
        ("the concert last Sunday", "last Sunday"),
        ("the call on Monday", "Monday"),
        ("what did I buy this week", "this week"),
        ("I've felt stuck lately; what did we plan yesterday?", "yesterday"),
    ],
)
def test_precise_reading_keeps_phrases_that_pin_a_past_time(text: str, expression: str):
    now = wednesday_afternoon(UTC)
    assert temporal_range(text, now=now, precise=True).expression == expression


@pytest.mark.parametrize(
    "text",
    [
        "I've been feeling a bit stuck with my paintings lately",  # a state, not a time
        "Anything new with the garden recently?",
        "I ran into Ana the other day",
        "my bike is faster during my Sunday group rides",  # a habit
        "rearranging the furniture this weekend",  # said on a Wednesday: a plan
    ],
)
def test_precise_reading_leaves_vague_habitual_and_future_phrases(text: str):
    now = wednesday_afternoon(UTC)
    assert temporal_range(text, now=now) is not None  # read as times in a conversation
    assert temporal_range(text, now=now, precise=True) is None


def test_precise_reading_ends_a_period_at_now():
    now = wednesday_afternoon(UTC)
    this_week = temporal_range("what did I buy this week", now=now, precise=True)
    assert (this_week.start, this_week.end) == (datetime(2026, 3, 16, tzinfo=UTC), now)


def test_a_naive_now_is_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        temporal_range("yesterday", now=datetime(2026, 3, 18, 15))


def test_spans_locate_every_phrase():
    text = "What did we say yesterday about the trip in March?"

    spans = temporal_spans(text)

    assert [text[first:last] for first, last in spans] == ["yesterday", "March"]
