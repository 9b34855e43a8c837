"""Temporal phrases in chat text ("yesterday", "in the last 4 days", "in March") as date ranges.

``POST /memory/retrieve/conversation`` reads the last user turns of a conversation; when they say
*when* something happened, ``temporal_range`` turns the phrase into a range of ``occurred_at``
values: the episodic memories dated in it rank higher (never a filter: what is said about an event
is often said on another day). Pure Python: a table of regular expressions, each with a
resolver that turns a match into a range, plus two combinators ("since X", "between X and Y").

The rules where English is ambiguous, each one a decision pinned by tests/memory/test_temporal.py:

- Days start at local midnight in ``now``'s time zone; ``end`` is the last microsecond of the last
  day covered.
- Calendar periods ("today", "this week", "last month", "in March", "2025-11-18") cover the whole
  period, even the part still ahead of ``now``. Weeks are ISO weeks, Monday to Sunday.
- "last week / month / year" is the previous calendar period; "past week / month / year" and
  "last/past N days / weeks / months / years" are rolling windows of whole days ending today:
  "last N days" starts at the start of today - (N - 1) days, "past N months" on the day after the
  same date N months ago. "Last/past N hours / minutes" is exact: [now - N hours, now].
- "N days / weeks / months / years ago" is the single calendar day / week / month / year N units
  back; a vague count ("a few" = 3, "a couple of" = 2) spans from 2N units back to 1 unit back.
  "N hours / minutes ago" is [now - (N + 1) units, now - (N - 1) units].
- "recently", "lately" = the last 7 days; "the other day" = 7 days ago through yesterday;
  "last night" = yesterday.
- "earlier today / this week / this month / this year" and "since X" end at ``now``.
- A month, or a date without a year, means its most recent occurrence that has begun: "in March"
  said on 2026-02-10 is March 2025. "last March" is the most recent March that has ended.
- "Monday", "on Monday", "last Monday": the most recent Monday before today (a week ago when today
  is a Monday). "this Monday", "next Monday" and "every Monday" are not read as dates.
- When several phrases are found, overlapping ones resolve to the longest ("the day before
  yesterday" over "yesterday", "earlier this week" over "this week"); among the rest the last one
  mentioned wins, because in a conversation the newest words carry the question being asked.
- Precision over recall. A month name alone counts only after "in", "during", "since", "from",
  "until", "through", "between" or "of", with a qualifier ("early", "mid", "late", "last", "this"),
  or capitalized after "and" / "to" / a dash ("from March to May"). "may", "march" and the month
  abbreviations are ordinary words when written in lower case unless such a preposition (or "on" /
  "by" before a day) precedes them; abbreviations need a day or a year; "May" followed by a pronoun
  ("May I ask") is the verb. A year alone needs the same prepositions and must not be followed by
  a plural noun ("in 2000 words"). Future phrases ("tomorrow", "next week") are not read: memories
  have not happened yet.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

__all__ = ["DateRange", "temporal_range", "temporal_spans"]


@dataclass(frozen=True)
class DateRange:
    """The dates a temporal phrase covers, both ends inclusive and timezone-aware."""

    start: datetime
    end: datetime
    expression: str


Span = tuple[datetime, datetime]
_Resolver = Callable[[re.Match[str], "_Context"], Span | None]


@dataclass(frozen=True)
class _Found:
    """One phrase found in the text: its character offsets and the range it covers."""

    first: int
    last: int
    span: Span
    # Kept to read the phrase again relative to another moment (see ``_join_ranges``).
    match: re.Match[str] | None = None
    resolver: _Resolver | None = None


@dataclass(frozen=True)
class _Context:
    text: str
    now: datetime

    @property
    def today(self) -> date:
        return self.now.date()

    def days(self, first: date, last: date) -> Span:
        return (
            datetime.combine(first, time.min, tzinfo=self.now.tzinfo),
            datetime.combine(last, time.max, tzinfo=self.now.tzinfo),
        )

    def hours_back(self, hours: float) -> datetime:
        # Through UTC, so that "past 24 hours" across a DST change is 24 real hours, not wall hours.
        return (self.now.astimezone(UTC) - timedelta(hours=hours)).astimezone(self.now.tzinfo)

    def before(self, position: int) -> str:
        """The few words before ``position``: enough to see the preposition leading a phrase."""
        start = max(0, position - 60)
        window = self.text[start:position]
        # Drop a word cut in half, so that "within " never reads as "in ".
        return re.sub(r"^\S*", "", window) if start > 0 else window


_NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_VAGUE_COUNTS = {"couple": 2, "couple of": 2, "few": 3}
_EXACT_COUNT = r"\d{1,4}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
_VAGUE_COUNT = r"(?:a\s+)?(?:couple(?:\s+of)?|few)"
_UNIT = r"(?P<unit>minute|hour|day|week|month|year)s?"

_MONTHS = {
    "january": 1,
    "february": 2,
    "march": 3,
    "april": 4,
    "may": 5,
    "june": 6,
    "july": 7,
    "august": 8,
    "september": 9,
    "october": 10,
    "november": 11,
    "december": 12,
    "jan": 1,
    "feb": 2,
    "mar": 3,
    "apr": 4,
    "jun": 6,
    "jul": 7,
    "aug": 8,
    "sep": 9,
    "sept": 9,
    "oct": 10,
    "nov": 11,
    "dec": 12,
}
_MONTH = "(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\b\.?"
_ABBREVIATIONS = frozenset(
    name for name in _MONTHS if len(name) <= 4 and name not in {"may", "june", "july"}
)
# Month names that are also everyday English words when written in lower case.
_ORDINARY_WORDS = frozenset({"may", "march"}) | _ABBREVIATIONS
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_YEAR = r"(?P<year>(?:19|20)\d\d)(?!\d)"

# A month or a year alone is a date only right after one of these.
_PREPOSITION_BEFORE = re.compile(
    r"\b(?:in|during|since|from|until|till|through|throughout|between|of)\s+$", re.IGNORECASE
)
# ... and a date with its day also after these.
_DAY_PREPOSITION_BEFORE = re.compile(
    r"\b(?:in|during|since|from|until|till|through|throughout|between|of|on|by|and|to)\s+$",
    re.IGNORECASE,
)
# The second half of "from March to May": a capitalized month after a connector.
_CONNECTOR_BEFORE = re.compile(r"(?:\band|\bto|[-\u2013\u2014])\s*$", re.IGNORECASE)
_MAY_THE_VERB = re.compile(r"\s+(?:i|we|you|he|she|they|it|be|have|not|also)\b", re.IGNORECASE)
# "in 2000 words": a number followed by a plural noun is a quantity, not a year.
_QUANTITY_AFTER = re.compile(
    r"\s+(?!(?:this|thus|plus|always|across|versus|unless|towards|afterwards|besides|whereas|perhaps)\b)"
    r"[a-z]{2,}s\b"
)
_SINCE_BEFORE = re.compile(r"\bsince\s+$", re.IGNORECASE)
_RANGE_GAP = re.compile(
    r"\s*(?P<word>and|to|through|thru|until|till|[-\u2013\u2014]|\.\.|/)\s*", re.IGNORECASE
)
_BETWEEN_BEFORE = re.compile(r"\bbetween\s+$", re.IGNORECASE)
_FROM_BEFORE = re.compile(r"\bfrom\s+$", re.IGNORECASE)


def _count(word: str) -> int:
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else _NUMBER_WORDS[word]


def _vague_count(word: str) -> int | None:
    word = " ".join(word.lower().split()).removeprefix("a ")
    return _VAGUE_COUNTS.get(word)


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    return date(year, month + 1, min(day.day, calendar.monthrange(year, month + 1)[1]))


def _shift(day: date, unit: str, amount: int) -> date:
    """``day`` moved by ``amount`` units (negative: back), months and years clamped to month end."""
    if unit == "day":
        return day + timedelta(days=amount)
    if unit == "week":
        return day + timedelta(weeks=amount)
    return _add_months(day, amount * (12 if unit == "year" else 1))


def _period(unit: str, day: date) -> tuple[date, date]:
    """The calendar day, ISO week, month or year that contains ``day``."""
    if unit == "day":
        return day, day
    if unit == "week":
        monday = day - timedelta(days=day.weekday())
        return monday, monday + timedelta(days=6)
    if unit == "month":
        return day.replace(day=1), day.replace(day=calendar.monthrange(day.year, day.month)[1])
    return date(day.year, 1, 1), date(day.year, 12, 31)


def _is_lowercase_word(match: re.Match[str], group: str) -> bool:
    return match.group(group).islower()


def _month_number(match: re.Match[str]) -> int:
    return _MONTHS[match.group("month").lower().rstrip(".")]


def _month_word_is_ordinary(match: re.Match[str], context: _Context, *, with_day: bool) -> bool:
    """True when "may", "march" or an abbreviation reads as a plain word, not as a month."""
    word = match.group("month").lower().rstrip(".")
    if word not in _ORDINARY_WORDS or not _is_lowercase_word(match, "month"):
        return False
    preposition = _DAY_PREPOSITION_BEFORE if with_day else _PREPOSITION_BEFORE
    return not preposition.search(context.before(match.start()))


def _most_recent_date(month: int, day: int, today: date) -> date | None:
    """The latest ``month``/``day`` on or before ``today`` (far enough back for 29 February)."""
    for year in range(today.year, today.year - 9, -1):
        try:
            candidate = date(year, month, day)
        except ValueError:
            continue
        if candidate <= today:
            return candidate
    return None


# Resolvers: each turns a match into the range it covers, or None when the match is not a date.


def _today(match: re.Match[str], context: _Context) -> Span:
    return context.days(context.today, context.today)


def _earlier_today(match: re.Match[str], context: _Context) -> Span:
    return context.days(context.today, context.today)[0], context.now


def _days_back(days: int) -> _Resolver:
    def resolve(match: re.Match[str], context: _Context) -> Span:
        day = context.today - timedelta(days=days)
        return context.days(day, day)

    return resolve


def _the_other_day(match: re.Match[str], context: _Context) -> Span:
    return context.days(context.today - timedelta(days=7), context.today - timedelta(days=1))


def _recently(match: re.Match[str], context: _Context) -> Span:
    return context.days(context.today - timedelta(days=6), context.today)


def _ago(match: re.Match[str], context: _Context) -> Span | None:
    unit = match.group("unit").lower()
    vague = _vague_count(match.group("count"))
    if unit in {"hour", "minute"}:
        hours = 1 if unit == "hour" else 1 / 60
        amount = vague if vague is not None else _count(match.group("count"))
        # A vague count keeps the same ±N spread as the calendar units below.
        spread = amount if vague is not None else 1
        start = context.hours_back((amount + spread) * hours)
        end = context.hours_back(max(amount - spread, 0) * hours)
        return start, end
    if vague is not None:
        first = _period(unit, _shift(context.today, unit, -2 * vague))[0]
        last = _period(unit, _shift(context.today, unit, -1))[1]
        return context.days(first, last)
    first, last = _period(unit, _shift(context.today, unit, -_count(match.group("count"))))
    return context.days(first, last)


def _rolling(match: re.Match[str], context: _Context) -> Span | None:
    unit = match.group("unit").lower()
    count_word = match.groupdict().get("count")
    amount = 1 if count_word is None else _vague_count(count_word) or _count(count_word)
    if amount < 1:
        return None
    if unit in {"hour", "minute"}:
        return context.hours_back(amount * (1 if unit == "hour" else 1 / 60)), context.now
    first = _shift(context.today, unit, -amount) + timedelta(days=1)
    return context.days(first, context.today)


def _calendar(match: re.Match[str], context: _Context) -> Span:
    unit = match.group("unit").lower()
    which = (match.groupdict().get("which") or "").lower()
    back = {"last": 1, "previous": 1, "this": 0, "current": 0}.get(which, 2)
    first, last = _period(unit, _shift(context.today, unit, -back))
    return context.days(first, last)


def _earlier_this(match: re.Match[str], context: _Context) -> Span:
    first, _ = _period(match.group("unit").lower(), context.today)
    return context.days(first, first)[0], context.now


def _weekend(match: re.Match[str], context: _Context) -> Span:
    which = " ".join(match.group("which").lower().split())
    today = context.today
    monday = today - timedelta(days=today.weekday())
    this_saturday = monday + timedelta(days=5)
    if which == "this" or (which != "last" and today >= this_saturday):
        saturday = this_saturday
    else:
        saturday = this_saturday - timedelta(days=7)
    return context.days(saturday, saturday + timedelta(days=1))


def _weekday(match: re.Match[str], context: _Context) -> Span | None:
    if not match.group("prefix") and re.search(
        r"\b(?:next|coming|every|each|this|following)\s+$",
        context.before(match.start()),
        re.IGNORECASE,
    ):
        return None
    wanted = _WEEKDAYS.index(match.group("weekday").lower())
    days_back = (context.today.weekday() - wanted) % 7 or 7
    day = context.today - timedelta(days=days_back)
    return context.days(day, day)


def _month_day(match: re.Match[str], context: _Context) -> Span | None:
    if _month_word_is_ordinary(match, context, with_day=True):
        return None
    month, day = _month_number(match), int(match.group("day"))
    if match.group("year"):
        try:
            found = date(int(match.group("year")), month, day)
        except ValueError:
            return None
    else:
        found = _most_recent_date(month, day, context.today)
        if found is None:
            return None
    return context.days(found, found)


def _month(match: re.Match[str], context: _Context) -> Span | None:
    word = match.group("month").lower().rstrip(".")
    qualifier = (match.group("qualifier") or "").lower()
    year_text = match.group("year")
    before = context.before(match.start())
    after_preposition = bool(_PREPOSITION_BEFORE.search(before))
    if word in _ABBREVIATIONS and not year_text:
        return None
    if word in _ORDINARY_WORDS and _is_lowercase_word(match, "month"):
        if not after_preposition:
            return None
    elif not after_preposition:
        capitalized_after_connector = match.group("month")[0].isupper() and bool(
            _CONNECTOR_BEFORE.search(before)
        )
        if not (year_text or qualifier or capitalized_after_connector):
            return None
        # "May I ask", "This May be": with no preposition to vouch for it, "May" is the verb.
        if word == "may" and not year_text and _MAY_THE_VERB.match(context.text, match.end()):
            return None

    month, today = _month_number(match), context.today
    if year_text:
        year = int(year_text)
    elif qualifier == "last":
        year = today.year if month < today.month else today.year - 1
    elif qualifier == "this":
        year = today.year
    else:
        year = today.year if month <= today.month else today.year - 1
    month_end = calendar.monthrange(year, month)[1]
    first, last = {
        "early": (1, 10),
        "mid": (11, 20),
        "late": (21, month_end),
    }.get(qualifier, (1, month_end))
    return context.days(date(year, month, first), date(year, month, last))


def _year(match: re.Match[str], context: _Context) -> Span | None:
    before = context.before(match.start())
    if not (
        _PREPOSITION_BEFORE.search(before)
        or re.search(
            r"\b(?:between|from)\s+(?:19|20)\d\d\s*(?:and|to|through|until|[-\u2013])\s*$",
            before,
            re.IGNORECASE,
        )
    ):
        return None
    if _QUANTITY_AFTER.match(context.text, match.end()):
        return None
    year = int(match.group("year"))
    return context.days(date(year, 1, 1), date(year, 12, 31))


def _iso_date(match: re.Match[str], context: _Context) -> Span | None:
    try:
        found = date(int(match.group("year")), int(match.group("month")), int(match.group("day")))
    except ValueError:
        return None
    return context.days(found, found)


_RULES: tuple[tuple[re.Pattern[str], _Resolver], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), resolver)
    for pattern, resolver in (
        (r"\b(?:today|tonight|this\s+(?:morning|afternoon|evening))\b", _today),
        (r"\b(?:earlier|so\s+far)\s+today\b", _earlier_today),
        (r"\b(?:yesterday|last\s+night)\b", _days_back(1)),
        (r"\b(?:the\s+)?day\s+before\s+yesterday\b", _days_back(2)),
        (r"\bthe\s+other\s+day\b", _the_other_day),
        (r"\b(?:recently|lately)\b", _recently),
        (rf"\b(?P<count>{_VAGUE_COUNT}|{_EXACT_COUNT}|an?)\s+{_UNIT}\s+ago\b", _ago),
        (
            rf"\b(?:last|past|previous)\s+(?P<count>{_VAGUE_COUNT}|{_EXACT_COUNT})\s+{_UNIT}\b",
            _rolling,
        ),
        (r"\bpast\s+(?P<unit>minute|hour|week|month|year)\b", _rolling),
        (r"\bthe\s+last\s+(?P<unit>minute|hour)\b", _rolling),
        (r"\b(?P<which>last|previous|this|current)\s+(?P<unit>week|month|year)\b", _calendar),
        (r"\bthe\s+(?P<unit>week|month|year)\s+before\s+last\b", _calendar),
        (r"\bearlier\s+this\s+(?P<unit>week|month|year)\b", _earlier_this),
        (r"\b(?P<which>last|this|past|over\s+the)\s+weekend\b", _weekend),
        (
            r"\b(?:(?P<prefix>last|this\s+past|past)\s+)?(?P<weekday>"
            + "|".join(_WEEKDAYS)
            + r")\b",
            _weekday,
        ),
        (
            rf"\b{_MONTH}\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?(?![\d:])\b(?:,?\s+{_YEAR})?",
            _month_day,
        ),
        (
            r"(?:\bthe\s+)?(?<![\w.,:/-])(?P<day>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?"
            rf"{_MONTH}(?:,?\s+{_YEAR})?",
            _month_day,
        ),
        (rf"\b(?:(?P<qualifier>early|mid|late|last|this)[\s-]+)?{_MONTH}(?:,?\s+{_YEAR})?", _month),
        (rf"(?<![\w.:-]){_YEAR}(?![\w-]|[.:]\d)", _year),
        (
            # The second look-behind lets "2025-11-01..2025-11-18" through but not "v1.2025-11-18".
            r"(?<![\w:-])(?<!\w\.)(?P<year>\d{4})(?P<separator>[-/])(?P<month>\d{1,2})(?P=separator)"
            r"(?P<day>\d{1,2})(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
            r"(?![\w-]|[.:]\d)",
            _iso_date,
        ),
    )
)


def _find_all(text: str, now: datetime) -> list[_Found]:
    """Every phrase the rules recognize, overlaps resolved to the longest, in text order."""
    context = _Context(text=text, now=now)
    candidates = []
    for pattern, resolver in _RULES:
        for match in pattern.finditer(text):
            try:
                span = resolver(match, context)
            except (OverflowError, ValueError):  # "last 9999 years" runs out of calendar
                continue
            if span is not None:
                candidates.append(
                    _Found(
                        first=match.start(),
                        last=match.end(),
                        span=span,
                        match=match,
                        resolver=resolver,
                    )
                )

    kept: list[_Found] = []
    for found in sorted(candidates, key=lambda item: (item.first, item.first - item.last)):
        if kept and found.first < kept[-1].last:
            if found.last - found.first > kept[-1].last - kept[-1].first:
                kept[-1] = found
            continue
        kept.append(found)
    return _join_ranges([_apply_since(found, context) for found in kept], context)


def _apply_since(found: _Found, context: _Context) -> _Found:
    before = context.before(found.first)
    since = _SINCE_BEFORE.search(before)
    if since is None or found.span[0] > context.now:
        return found
    first = found.first - len(before) + since.start()
    return _Found(first=first, last=found.last, span=(found.span[0], context.now))


def _join_ranges(found: list[_Found], context: _Context) -> list[_Found]:
    """Merge "between X and Y", "from X to Y" and "X..Y" into one phrase covering both."""
    joined: list[_Found] = []
    index = 0
    while index < len(found):
        current = found[index]
        following = found[index + 1] if index + 1 < len(found) else None
        if following is None or not _reads_as_range(current, following, context):
            joined.append(current)
            index += 1
            continue
        before = context.before(current.first)
        opener = _BETWEEN_BEFORE.search(before) or _FROM_BEFORE.search(before)
        joined.append(
            _Found(
                first=current.first - len(before) + opener.start() if opener else current.first,
                last=following.last,
                span=_range_between(current, following, context),
            )
        )
        index += 2
    return joined


def _reads_as_range(current: _Found, following: _Found, context: _Context) -> bool:
    gap = _RANGE_GAP.fullmatch(context.text, current.last, following.first)
    if gap is None:
        return False
    # "yesterday and last month" names two times; only "between ... and ..." names a range.
    return gap.group("word").lower() != "and" or bool(
        _BETWEEN_BEFORE.search(context.before(current.first))
    )


def _range_between(earlier: _Found, later: _Found, context: _Context) -> Span:
    """From the start of ``earlier`` to the end of ``later``.

    A phrase without a year reads as its latest occurrence, so "from March to May" said in April
    finds May of last year after March of this year; then "March" is read again as of the end of
    that May, giving March to May of last year.
    """
    earlier_span = earlier.span
    if earlier_span[0] > later.span[0] and earlier.match is not None and earlier.resolver:
        again = earlier.resolver(earlier.match, _Context(text=context.text, now=later.span[1]))
        earlier_span = again or earlier_span
    return min(earlier_span[0], later.span[0]), max(earlier_span[1], later.span[1])


_VAGUE = (_recently, _the_other_day)


def _names_a_past_time(found: _Found, context: _Context) -> bool:
    """Whether a phrase pins a time something happened, as a search must read it: not a vague
    one ("lately", "recently", "the other day": how things stand, not when), not a bare
    weekday ("my Sunday rides": a habit; "on Sunday", "last Sunday" are dates), not one wholly
    ahead ("this weekend" said on a Thursday: a plan)."""
    if found.resolver in _VAGUE:
        return False
    if found.resolver is _weekday and found.match is not None and not found.match["prefix"]:
        return bool(re.search(r"\bon\s+$", context.before(found.first), re.IGNORECASE))
    return True


def temporal_range(text: str, *, now: datetime, precise: bool = False) -> DateRange | None:
    """The date range of the last temporal phrase in ``text``, or None when it names no time.

    ``precise``, for a search query (where a wrong range hides every answer): only phrases that
    pin a past time count (see ``_names_a_past_time``), and a range is cut off at ``now``."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("temporal_range needs a timezone-aware `now`")
    found = _find_all(text, now)
    if precise:
        context = _Context(text, now)
        found = [
            item for item in found if item.span[0] <= now and _names_a_past_time(item, context)
        ]
    if not found:
        return None
    last = found[-1]
    end = min(last.span[1], now) if precise else last.span[1]
    return DateRange(start=last.span[0], end=end, expression=text[last.first : last.last])


# Where a phrase is does not depend on the day it is read on, so any fixed moment will do.
_ANY_MOMENT = datetime(2000, 6, 15, 12, tzinfo=UTC)


def temporal_spans(text: str) -> list[tuple[int, int]]:
    """Character offsets of every temporal phrase in ``text`` (for removing them from a query)."""
    return [(found.first, found.last) for found in _find_all(text, _ANY_MOMENT)]
