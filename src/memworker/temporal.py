"""The one deterministic resolver of time expressions against an anchor timestamp.

Used by the corpus generator (gold dates) and by the codec (to fill a date from the time expression
the model chose), so both sides agree by construction. Standard library + python-dateutil only.

Conventions
-----------
- The anchor is the timestamp of the event in which the expression was said. It must be ISO 8601
  with a UTC offset (or ``Z``); naive anchors are rejected. The local calendar date is the anchor's
  date in its *own* offset: ``2025-06-01T23:30:00-05:00`` is June 1st (June 2nd in UTC).
- Output: ``YYYY-MM-DD`` (day), ``YYYY-MM`` (month), ``YYYY`` (year) or
  ``YYYY-MM-DDTHH:MM:SS+HH:MM`` (datetime, always in the anchor's offset, ``+00:00`` never ``Z``;
  seconds are 00 unless an ISO datetime gives them; fractions are dropped).
  A date-only expression never yields a clock time; only an explicit clock time ("at 3pm",
  "15:30", "noon", an ISO datetime) makes a datetime.
- Weeks run Monday-Sunday. **Weekday convention** (the one place it is written down; the corpus
  generator's calendar, the audit and the codec all follow it):

  - "next <weekday>" is the first such day strictly after the anchor date (1-7 days ahead: said
    on a Wednesday, "next Friday" is two days later, "next Wednesday" a week later);
  - "last <weekday>" is the most recent such day strictly before the anchor date (1-7 days
    back: said on a Wednesday, "last Monday" is two days earlier, "last Wednesday" a week
    earlier);
  - "this <weekday>" is that weekday of the anchor's Monday-Sunday week (may be past: said on a
    Wednesday, "this Monday" is two days earlier);
  - a bare "<weekday>" / "on <weekday>" is the nearest occurrence on or after the anchor date
    (0-6 days ahead; said on a Wednesday, "Wednesday" is that same day).

- "this/next/last week" is the Monday that starts that week, precision "day" (there is no week
  precision); "this/next/last weekend" is that week's Saturday (day).
- "this/next/last month" -> ``YYYY-MM``; "this/next/last year" -> ``YYYY``.
- today, tonight, this morning/afternoon/evening -> anchor date; tomorrow (morning/.../night) +1;
  yesterday (morning/afternoon/evening) and "last night" -1; "the day after tomorrow" +2;
  "the day before yesterday" -2.
- "in N <unit>", "N <unit> from now", "N <unit> ago" with unit day/week/month/year, N = digits,
  one..twelve, "a"/"an" (1) or "a couple (of)" (2); calendar arithmetic by relativedelta, so
  Jan 31 + 1 month = Feb 28/29 and Feb 29 + 1 year = Feb 28. Vague counts ("a few", "several")
  are unresolvable.
- "<Month> <day>[, <year>]", "<day> [of] <Month> [<year>]" (full names, 3-letter abbreviations,
  "Sept"): day precision. Without a year, the occurrence closest to the anchor date (ties: the
  future one); Feb 29 without a year is the closest Feb 29 that exists. A leading weekday
  ("Friday, October 10") is ignored: the explicit date wins. Impossible dates are unresolvable.
- "<Month> <year>" -> month; "in <Month>" -> the closest such month to the anchor month (ties:
  the future one; the anchor's own month if it matches); "in <year>" (1900-2100) -> year.
- "the <ordinal>" ("the 3rd", "on the 21st") -> the next date on or after the anchor date with
  that day of month (the 31st said on Sept 5 is Oct 31).
- ISO "YYYY-MM-DD" (day) and "YYYY-MM" (month); an ISO datetime is read in its own offset (the
  anchor's if it has none) and reported in the anchor's offset. A UTC offset is only read after a
  "T" datetime: "2025-05-01 08:00-12:00" is a date and a time range, not a time at UTC-12.
- Clock times: "at 3pm", "at 3:30 pm", "at 15:30", "at noon", "at midnight" (00:00 at the start
  of the day) -> datetime on the anchor date, or on the day of an attached day expression
  ("tomorrow at 9am", "at 9am tomorrow", "next Tuesday at 3pm", "on March 3 at 10:00").
- Everything else ("soon", "later", "recently", "a few days ago", "10/08/2025") is unresolvable.

`find_expressions` is deliberately conservative: it only reports expressions `resolve` accepts,
requires "in" before a bare month or year, ignores weekdays after "the/every/each" and
"last/next" after "the" ("the last week"), and ignores "the 2nd" when a word follows ("the 2nd
floor"). De-duplication is by exact substring. It declines (reports nothing) rather than let
`resolve` read an expression wrongly:

- "in N <unit>" that measures a span rather than a date: after "first/last/only/once/time/
  ever/never/not/n't/since/best/worst/longest" within the three words before it ("the first
  time in 5 years", "haven't seen her in two weeks");
- the direction-blind forms (a bare weekday and "the <ordinal>", read forward; "in <Month>",
  read as the closest such month) when the clause's tense contradicts the reading. A clause
  reads as past when it has a past-tense verb (a lower-case word ending in -ed, not after
  "the/a/my/very/is/'m/been/..." as in "the advanced class", or one of a fixed list of irregular
  pasts: was, saw, went, met, ...) and no future or modal marker (will, 'll, going to, gonna,
  plan, want, hope, need to, have to, should, could, would, might, may, can, must, let's,
  "am/is/are ...ing"); it reads as future when it has such a marker. Clauses end at . ! ? ; ,
  and before "and/but/then/so"; an expression after "for/by/until/till/before" is a target date
  and never declined ("I booked a table for Friday"). Without an anchor, these forms are
  declined in every past clause. With the event's timestamp as `anchor` (the codec's schema
  and `memworker.verify` pass it), a form is declined only when its reading lands on the wrong
  side of the anchor: after it in a past clause, before it in a future clause. Said on
  2025-11-10: "I saw her Friday" and "I moved here in March" report nothing, "we found out in
  October" reports "in October" (2025-10), "I'm moving in March" reports "in March";
- time ranges: "08:00-12:00" is never a time with a UTC offset.
"""

from __future__ import annotations

import argparse
import json
import re
import string
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

from dateutil.relativedelta import relativedelta

PRECISIONS = ("day", "month", "year", "datetime")


@dataclass(frozen=True)
class Resolved:
    date: str
    precision: str

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; expected one of {PRECISIONS}")

    def to_dict(self) -> dict:
        return {"date": self.date, "precision": self.precision}


class UnresolvableExpression(ValueError):
    """A time expression that cannot be resolved; the message names it and says why."""

    def __init__(self, expression: str, reason: str) -> None:
        self.expression = expression
        self.reason = reason
        super().__init__(f"cannot resolve time expression {expression!r}: {reason}")

    def __reduce__(self):  # picklable across process pools
        return type(self), (self.expression, self.reason)


class _Reject(Exception):
    """Internal: a matched expression that still cannot be resolved (reason in the message)."""


def is_date_only(precision: str) -> bool:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
    return precision != "datetime"


_PARTIAL_DATE = re.compile(r"[0-9]{4}(?:-[0-9]{2}(?:-[0-9]{2})?)?")


def parse_timestamp(value: str | datetime, field: str = "timestamp") -> datetime:
    """The one timestamp validator (input contracts, the codec, the corpus audit, the hmem store
    backend and the resolver's anchor all use it): `value` must be a real date-time (a calendar
    date that exists, a clock time within the day) with a UTC offset. Returns it as an aware
    datetime with a fixed offset (same wall time, same instant); raises ValueError naming
    `field` (TypeError for a value that is neither text nor a datetime)."""
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        text = value.strip()
        try:
            dt = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "Zz" else text)
        except ValueError as exc:
            reason = "" if "Invalid isoformat" in str(exc) else \
                " (UTC offset out of range)" if "offset must be" in str(exc) else f" ({exc})"
            raise ValueError(
                f"{field}: {value!r} is not a real date-time{reason}; expected an ISO 8601 "
                "timestamp with a UTC offset, e.g. 2025-06-01T09:30:00+02:00"
            ) from None
    else:
        raise TypeError(f"{field} must be a str or datetime, not {type(value).__name__}")
    offset = dt.utcoffset()
    if offset is None:
        raise ValueError(
            f"{field}: {value!s} is naive: a UTC offset (e.g. +02:00 or Z) is required"
        )
    return dt.replace(tzinfo=timezone(offset))


def check_partial_date(value: str, field: str) -> None:
    """A date at year, month or day precision ("2024", "2024-02", "2024-02-29") that exists, or
    a full timestamp (then as `parse_timestamp`); raises ValueError naming `field`."""
    if not _PARTIAL_DATE.fullmatch(value):
        parse_timestamp(value, field)
        return
    parts = [int(p) for p in value.split("-")] + [1, 1]
    try:
        date(parts[0], parts[1], parts[2])
    except ValueError as exc:
        raise ValueError(f"{field}: {value!r} is not a real date ({exc})") from None


def parse_anchor(anchor: str | datetime) -> datetime:
    """The anchor as an aware datetime with a fixed UTC offset (`parse_timestamp`)."""
    return parse_timestamp(anchor, "anchor")


# --------------------------------------------------------------------------- vocabulary
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_FULL_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
                "september", "october", "november", "december")
_MONTHS = {name: i + 1 for i, name in enumerate(_FULL_MONTHS)}
_MONTHS.update({name[:3]: i + 1 for i, name in enumerate(_FULL_MONTHS) if name != "may"})
_MONTHS["sept"] = 9
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
            "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}

_WD = "(?:" + "|".join(_WEEKDAYS) + ")"
_ABBR = "|".join(sorted((k for k in _MONTHS if k not in _FULL_MONTHS), key=len, reverse=True))
_MONTH = (rf"(?P<mon>(?:{'|'.join(_FULL_MONTHS)})(?!\w)"
          rf"|(?:{_ABBR})(?!\w)(?:\.(?=\s*\d))?)")  # "Jan." only before a number
_DOM = r"(?P<dom>\d{1,2})(?:st|nd|rd|th)?(?!\w)"
_YEAR = r"(?P<yr>19\d\d|20\d\d|2100)(?!\w)"
_NUM = r"(?P<n>(?:a\s+)?couple(?:\s+of)?|\d{1,3}|" + "|".join(_NUMBERS) + ")"
_UNIT = r"(?P<unit>day|week|month|year)s?(?!\w)"
_TIME = (r"(?:(?P<th>\d{1,2})(?::(?P<tm>\d\d))?\s*(?P<tap>[ap])(?:m|\.m\.?)"
         r"|(?P<h24>\d{1,2}):(?P<m24>\d\d)|(?P<tw>noon|midnight))(?!\w)(?!:\d)")
_ON = r"(?:on\s+)?"
_LEAD_WD = rf"(?:{_WD},?\s+)?"  # "Friday, October 10": the weekday is ignored
_NO_WORD_AFTER = r"(?!\s+(?!at\s)[a-z])"  # "the 2nd" but not "the 2nd floor"
_VAGUE = re.compile(r"\b(?:few|several|some|soon|later|recent(?:ly)?|lately|eventually|"
                    r"sometime|someday|while|ages|couple of (?:hours|minutes))\b", re.I)


# --------------------------------------------------------------------------- helpers
def _make_date(y: int, m: int, d: int) -> date:
    try:
        return date(y, m, d)
    except ValueError:
        raise _Reject(f"{y:04d}-{m:02d}-{d:02d} is not a valid calendar date") from None


def _closest_day(today: date, month: int, day: int) -> date:
    """The date with this month/day closest to today (ties: the future one)."""
    cands = []
    for y in range(today.year - 8, today.year + 9):
        try:
            cands.append(date(y, month, day))
        except ValueError:
            continue
    if not cands:
        raise _Reject(f"month {month} has no day {day}")
    return min(cands, key=lambda c: (abs((c - today).days), c < today))


def _month_name(m: re.Match) -> int:
    return _MONTHS[m.group("mon").lower().rstrip(".")]


def _week_monday(today: date) -> date:
    return today - timedelta(days=today.weekday())


_MOD_SHIFT = {"this": 0, "next": 1, "last": -1}


# --------------------------------------------------------------------------- handlers
# Each handler maps (match, anchor) to (precision, value); value is a date (day), a (year, month)
# tuple (month), an int (year) or an aware datetime (datetime).
def _h_iso_datetime(m: re.Match, a: datetime) -> tuple[str, object]:
    tz: timezone = a.tzinfo  # type: ignore[assignment]
    if m.group("itz") and m.group("isep") != "T" and m.group("itz").upper() != "Z":
        raise _Reject("a time followed by -HH:MM after a space is a time range, not a UTC offset")
    if m.group("itz"):
        raw = m.group("itz").upper().replace(":", "")
        if raw == "Z":
            tz = timezone.utc
        else:
            sign = -1 if raw[0] == "-" else 1
            hh, mm = int(raw[1:3]), int(raw[3:5])
            if hh > 23 or mm > 59:
                raise _Reject(f"invalid UTC offset {m.group('itz')!r}")
            tz = timezone(sign * timedelta(hours=hh, minutes=mm))
    day = _make_date(int(m.group("iy")), int(m.group("im")), int(m.group("id")))
    hh, mm, ss = int(m.group("iH")), int(m.group("iM")), int(m.group("iS") or 0)
    if hh > 23 or mm > 59 or ss > 59:
        raise _Reject(f"{hh:02d}:{mm:02d}:{ss:02d} is not a valid time of day")
    return "datetime", datetime.combine(day, time(hh, mm, ss), tzinfo=tz).astimezone(a.tzinfo)


def _h_iso_month(m: re.Match, a: datetime) -> tuple[str, object]:
    if not 1 <= int(m.group("im")) <= 12:
        raise _Reject(f"{m.group('im')} is not a month")
    return "month", (int(m.group("iy")), int(m.group("im")))


def _h_relative_day(m: re.Match, a: datetime) -> tuple[str, object]:
    words = [w for w in m.group("rd").lower().split() if w != "the"]
    shifts = {"tomorrow": 1, "yesterday": -1, "last": -1}  # today/tonight/this ...: 0
    shift = (2 if words[1] == "after" else -2) if words[0] == "day" else shifts.get(words[0], 0)
    return "day", a.date() + timedelta(days=shift)


def _h_weekday(m: re.Match, a: datetime) -> tuple[str, object]:
    today, target = a.date(), _WEEKDAYS.index(m.group("wd").lower())
    mod = (m.group("wmod") or "").lower()
    if not mod:  # on or after the anchor date: 0-6 days ahead
        return "day", today + timedelta(days=(target - today.weekday()) % 7)
    if mod == "next":  # strictly after: 1-7 days ahead
        return "day", today + timedelta(days=(target - today.weekday() - 1) % 7 + 1)
    if mod == "last":  # strictly before: 1-7 days back
        return "day", today - timedelta(days=(today.weekday() - target - 1) % 7 + 1)
    return "day", _week_monday(today) + timedelta(days=target)  # this: the anchor's week


def _h_period(m: re.Match, a: datetime) -> tuple[str, object]:
    today, shift = a.date(), _MOD_SHIFT[m.group("pmod").lower()]
    period = m.group("period").lower()
    if period in ("week", "weekend"):
        saturday = 5 if period == "weekend" else 0
        return "day", _week_monday(today) + timedelta(days=7 * shift + saturday)
    if period == "month":
        d = today + relativedelta(months=shift)
        return "month", (d.year, d.month)
    return "year", today.year + shift


def _offset_handler(sign: int) -> Callable[[re.Match, datetime], tuple[str, object]]:
    def handler(m: re.Match, a: datetime) -> tuple[str, object]:
        raw = " ".join(m.group("n").lower().split())
        n = 2 if "couple" in raw else _NUMBERS[raw] if raw in _NUMBERS else int(raw)
        unit = m.group("unit").lower() + "s"
        return "day", a.date() + relativedelta(**{unit: sign * n})

    return handler


def _h_month_day(m: re.Match, a: datetime) -> tuple[str, object]:
    month, day = _month_name(m), int(m.group("dom"))
    if m.group("yr"):
        return "day", _make_date(int(m.group("yr")), month, day)
    if not 1 <= day <= 31:
        raise _Reject(f"{day} is not a day of the month")
    return "day", _closest_day(a.date(), month, day)


def _h_month(m: re.Match, a: datetime) -> tuple[str, object]:
    here = a.year * 12 + a.month - 1
    cands = [(y * 12 + _month_name(m) - 1) for y in (a.year - 1, a.year, a.year + 1)]
    best = min(cands, key=lambda c: (abs(c - here), c < here))
    return "month", (best // 12, best % 12 + 1)


def _h_ordinal(m: re.Match, a: datetime) -> tuple[str, object]:
    day, today = int(m.group("ord")), a.date()
    if not 1 <= day <= 31:
        raise _Reject(f"{day} is not a day of the month")
    for k in range(13):
        first = date(today.year, today.month, 1) + relativedelta(months=k)
        try:
            cand = first.replace(day=day)
        except ValueError:
            continue
        if cand >= today:
            return "day", cand
    raise _Reject(f"no day {day} found after {today}")  # pragma: no cover - unreachable


def _h_year(m: re.Match, a: datetime) -> tuple[str, object]:
    return "year", int(m.group("yr"))


def _h_time_only(m: re.Match, a: datetime) -> tuple[str, object]:
    return "day", a.date()  # the clock time is applied by resolve()


_h_in_offset = _offset_handler(1)  # "in N <unit>": find_expressions declines it after "first time"


# --------------------------------------------------------------------------- rules
@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    handler: Callable[[re.Match, datetime], tuple[str, object]]
    detect: bool  # False: accepted by resolve() but never reported by find_expressions()


# (pattern, handler, timeable: may carry "at <time>" before/after, detect)
_SPECS: list[tuple[str, Callable[[re.Match, datetime], tuple[str, object]], bool, bool]] = [
    (r"(?:on\s+)?(?P<iy>\d{4})-(?P<im>\d\d)-(?P<id>\d\d)(?P<isep>[T ])(?P<iH>\d\d):(?P<iM>\d\d)"
     r"(?::(?P<iS>\d\d)(?:\.\d+)?)?(?P<itz>Z|[+-]\d\d:?\d\d)?(?![\w:+-])",
     _h_iso_datetime, False, True),
    (r"(?:on\s+)?(?P<iy>\d{4})-(?P<im>\d\d)-(?P<id>\d\d)(?![\w:+]|-\d)",
     lambda m, a: ("day", _make_date(*map(int, m.group("iy", "im", "id")))), True, True),
    (r"(?:in\s+)?(?P<iy>\d{4})-(?P<im>\d\d)(?![\w:]|-\d)", _h_iso_month, False, True),
    (r"(?P<rd>(?:the\s+)?day\s+after\s+tomorrow|(?:the\s+)?day\s+before\s+yesterday|today|tonight"
     r"|tomorrow(?:\s+(?:morning|afternoon|evening|night))?"
     r"|yesterday(?:\s+(?:morning|afternoon|evening))?|this\s+(?:morning|afternoon|evening)"
     r"|last\s+night)(?!\w)", _h_relative_day, True, True),
    (rf"{_ON}(?:(?<!the )(?P<wmod>this|next|last)\s+"
     rf"|(?<!the )(?<!last )(?<!next )(?<!this )(?<!every )(?<!each ))"
     rf"(?P<wd>{_WD})(?!\w)(?!\s+of\b)", _h_weekday, True, True),
    (r"(?<!the )(?P<pmod>this|next|last)\s+(?P<period>weekend|week|month|year)(?!\w)",
     _h_period, False, True),
    (rf"in\s+{_NUM}\s+{_UNIT}(?!\s+or\b)", _h_in_offset, True, True),
    (rf"{_NUM}\s+{_UNIT}\s+from\s+(?:now|today)(?!\w)", _offset_handler(1), True, True),
    (rf"{_NUM}\s+{_UNIT}\s+ago(?!\w)", _offset_handler(-1), True, True),
    (rf"{_ON}{_LEAD_WD}{_MONTH}\s+(?:the\s+)?{_DOM}(?:(?:,\s*|\s+){_YEAR})?",
     _h_month_day, True, True),
    (rf"{_ON}{_LEAD_WD}(?:the\s+)?{_DOM}\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?",
     _h_month_day, True, True),
    (rf"(?:in\s+)?{_MONTH},?\s+{_YEAR}",
     lambda m, a: ("month", (int(m.group("yr")), _month_name(m))), False, True),
    (rf"in\s+{_MONTH}(?!\.?\s*\d)", _h_month, False, True),
    (rf"in\s+{_YEAR}", _h_year, False, True),
    (rf"{_ON}{_LEAD_WD}the\s+(?P<ord>\d{{1,2}})(?:st|nd|rd|th)(?!\w){_NO_WORD_AFTER}",
     _h_ordinal, True, True),
    (rf"at\s+{_TIME}", _h_time_only, False, True),
    # resolve()-only forms (too ambiguous to detect in running text)
    (_TIME, _h_time_only, False, False),
    (_MONTH, _h_month, False, False),
    (_YEAR, _h_year, False, False),
]


def _compile_rules() -> tuple[_Rule, ...]:
    rules = []
    for pattern, handler, timeable, detect in _SPECS:
        if timeable:  # "<day> at <time>" (time optional) and "at <time> <day>"
            forms = [rf"{pattern}(?:\s*,?\s+at\s+{_TIME})?", rf"at\s+{_TIME},?\s+{pattern}"]
        else:
            forms = [pattern]
        rules.extend(_Rule(re.compile(f, re.IGNORECASE), handler, detect) for f in forms)
    return tuple(rules)


_RULES = _compile_rules()
_DETECT_RULES = tuple(r for r in _RULES if r.detect)


def _clock(m: re.Match) -> tuple[int, int] | None:
    g = m.groupdict()
    if g.get("tw"):
        return (12, 0) if g["tw"].lower() == "noon" else (0, 0)
    if g.get("th"):
        hour, minute = int(g["th"]), int(g["tm"] or 0)
        if not 1 <= hour <= 12 or minute > 59:
            raise _Reject(f"{g['th']}:{minute:02d} is not a valid 12-hour time")
        return hour % 12 + (12 if g["tap"].lower() == "p" else 0), minute
    if g.get("h24"):
        hour, minute = int(g["h24"]), int(g["m24"])
        if hour > 23 or minute > 59:
            raise _Reject(f"{hour}:{minute:02d} is not a valid 24-hour time")
        return hour, minute
    return None


def _format(precision: str, value) -> str:
    if precision == "day":
        return value.isoformat()
    if precision == "month":
        return f"{value[0]:04d}-{value[1]:02d}"
    if precision == "year":
        return f"{value:04d}"
    return value.isoformat(timespec="seconds")


def _normalise(expression: str) -> str:
    stripped = expression.strip(string.whitespace + string.punctuation + "\u201c\u201d\u2018\u2019")
    return " ".join(stripped.split())


def resolve(expression: str, anchor: str | datetime) -> Resolved:
    """Resolve one time expression against the anchor (see the module docstring)."""
    a = parse_anchor(anchor)
    if not isinstance(expression, str):
        raise TypeError(f"expression must be a str, not {type(expression).__name__}")
    text = _normalise(expression)
    if not text:
        raise UnresolvableExpression(expression, "it is empty")
    for rule in _RULES:
        m = rule.regex.fullmatch(text)
        if m is None:
            continue
        try:
            precision, value = rule.handler(m, a)
            clock = _clock(m)
            if clock is not None:
                if precision != "day":
                    raise _Reject("a clock time needs a specific day")
                value = datetime.combine(value, time(*clock), tzinfo=a.tzinfo)
                precision = "datetime"
        except _Reject as exc:
            raise UnresolvableExpression(expression, str(exc)) from None
        except (ValueError, OverflowError) as exc:
            raise UnresolvableExpression(expression, f"out of range ({exc})") from None
        return Resolved(_format(precision, value), precision)
    reason = "it is vague" if _VAGUE.search(text) else "it is not a supported time expression"
    raise UnresolvableExpression(expression, reason)


# --------------------------------------------------------------------------- detection
_PROBE_ANCHOR = parse_anchor("2000-01-01T12:00:00+00:00")
_WORD_START = re.compile(r"(?<!\w)[^\W_]")
# lower-case "may"/"march" may be verbs: "5 may be", "we march 3 miles" (case-sensitive on purpose)
_VERB_MONTH = re.compile(r"\b(?:may|march)\b")
_WORD_FOLLOWS = re.compile(r"\s+(?!at\s)[A-Za-z]")
_HAS_YEAR = re.compile(r"\d{4}")


def _boundary_ok(text: str, start: int, end: int) -> bool:
    """Reject matches glued to neighbouring tokens ("Monday-Friday", "3.5 days", "10:30:45")."""
    before = text[start - 1] if start else ""
    if before in ("-", "/", ":", "+", "@", "#", "$", "_"):
        return False
    if before in (".", ",") and start >= 2 and text[start - 2].isdigit():
        return False
    after, after2 = text[end:end + 1], text[end + 1:end + 2]
    if after.isalnum() or after == "_" or (after == "-" and after2.isalnum()):
        return False
    return not (text[end - 1].isdigit() and after in "/:.,-" and after and after2.isdigit())


# "in N <unit>" after one of these (within three words) measures a span, not a date
_SPAN_BEFORE = re.compile(
    r"(?:\b(?:first|last|only|once|twice|time|times|ever|never|not|no|since|best|worst|"
    r"longest)|n't)(?:[^\w.!?;]+\w+){0,3}[^\w.!?;]*$", re.I)  # within the sentence
# forward-only forms in a clause that reads as past are declined
_CLAUSE_END = re.compile(r"[.!?;,\n]|\s(?:and|but|then|so)\s", re.I)
_IRREGULAR_PAST = (
    "was", "were", "had", "did", "saw", "went", "met", "took", "made", "told", "said",
    "came", "left", "bought", "paid", "ran", "found", "gave", "sent", "spent", "felt", "kept",
    "lost", "won", "wrote", "ate", "drove", "flew", "began", "broke", "brought", "built", "caught",
    "chose", "drank", "fell", "forgot", "heard", "held", "knew", "led", "meant", "rode", "sang",
    "sat", "slept", "sold", "spoke", "stood", "swam", "taught", "thought", "threw", "woke", "wore",
    "wasn't", "weren't", "didn't", "hadn't", "couldn't")
_NOT_PAST_ED = ("need", "bed", "red", "shed", "seed", "feed", "speed", "weed", "breed", "indeed",
                "hundred", "proceed", "succeed", "exceed", "sled", "embed", "wed", "shred")
# an -ed word after one of these is an adjective or a passive ("the advanced class", "I'm
# excited"), not a past-tense verb
_ED_ADJECTIVE_AFTER = (
    "the", "a", "an", "my", "your", "his", "her", "our", "their", "its", "this", "that", "very",
    "so", "too", "more", "most", "really", "quite", "be", "been", "being", "is", "are", "am", "m",
    "re", "get", "gets", "getting", "feel", "feels", "look", "looks", "seem", "seems", "not")
_PAST = re.compile(
    r"(?<![\w'\u2019])(?:"
    + "".join(rf"(?<!\b{w}\s)" for w in _ED_ADJECTIVE_AFTER)
    + r"(?!(?:" + "|".join(_NOT_PAST_ED) + r")\b)[a-z]{2,}ed|"
    + "|".join(p.replace("'", "['\u2019]") for p in _IRREGULAR_PAST) + r")(?![\w'])")
_FUTURE = re.compile(
    r"\b(?:will|shall|gonna|going\s+to|plan(?:s|ning)?|want(?:s|ing)?|hop(?:e|es|ing)|intend(?:s|ing)?|need\s+to|"
    r"have\s+to|has\s+to|should|could|would|might|may|can|must|let['\u2019]s|"
    r"(?:am|is|are)\s+\w+ing)\b|['\u2019](?:ll|m\s+\w+ing|re\s+\w+ing)\b", re.I)
_TARGET_BEFORE = re.compile(r"\b(?:for|by|until|till|before)\s+$", re.I)


def _direction_blind(m: re.Match, handler: Callable) -> bool:
    """A bare weekday, "the <ordinal>" or "in <Month>": forms read without regard to tense."""
    if handler is _h_weekday:
        return not m.group("wmod")
    return handler in (_h_ordinal, _h_month)


def _tense(text: str, start: int, end: int) -> str:
    """"past", "future" or "" for the clause around text[start:end] (module docstring)."""
    if _TARGET_BEFORE.search(text, 0, start):
        return ""
    left = max((b.end() for b in _CLAUSE_END.finditer(text, 0, start)), default=0)
    after = _CLAUSE_END.search(text, end)
    clause = text[left:start] + " " + text[end:after.start() if after else len(text)]
    if _FUTURE.search(clause):
        return "future"
    return "past" if _PAST.search(clause) else ""


def _declined(text: str, start: int, end: int, handlers: list[Callable],
              matches: list[re.Match], anchor: datetime | None) -> bool:
    if _h_in_offset in handlers and _SPAN_BEFORE.search(text, 0, start):
        return True
    if not any(_direction_blind(m, h) for m, h in zip(matches, handlers, strict=True)):
        return False
    tense = _tense(text, start, end)
    if not tense:
        return False
    if anchor is None:
        return tense == "past"
    resolved = resolve(text[start:end], anchor).date
    here = anchor.date().isoformat()[:len(resolved[:10])]
    return resolved[:10] > here if tense == "past" else resolved[:10] < here


def _longest_at(text: str, start: int, anchor: datetime | None) -> int | None:
    matches = [(m, r.handler) for r in _DETECT_RULES if (m := r.regex.match(text, start))]
    for end in sorted({m.end() for m, _ in matches}, reverse=True):
        if not _boundary_ok(text, start, end):
            continue
        cand = text[start:end]
        if (_VERB_MONTH.search(cand) and not _HAS_YEAR.search(cand)
                and _WORD_FOLLOWS.match(text, end)):
            continue
        try:
            resolve(cand, _PROBE_ANCHOR)
        except UnresolvableExpression:
            continue
        at_end = [(m, h) for m, h in matches if m.end() == end]
        if _declined(text, start, end, [h for _, h in at_end], [m for m, _ in at_end], anchor):
            return None
        return end
    return None


def find_expressions(text: str, anchor: str | datetime | None = None) -> list[str]:
    """Every resolvable time expression in text: exact substrings, left to right, non-overlapping,
    longest match first, de-duplicated (first occurrence kept); forms `resolve` would read wrongly
    in their context are declined (module docstring). `anchor`: the timestamp of the event the
    text was said in (optional; with it fewer forms are declined)."""
    a = parse_anchor(anchor) if anchor is not None else None
    found: list[str] = []
    pos = 0
    while (w := _WORD_START.search(text, pos)) is not None:
        end = _longest_at(text, w.start(), a)
        if end is None:
            pos = w.start() + 1
            continue
        expr = text[w.start():end]
        if expr not in found:
            found.append(expr)
        pos = end
    return found


# --------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m memworker.temporal",
        description="Resolve a time expression against an anchor timestamp; prints JSON.",
    )
    parser.add_argument("expression", help='e.g. "next Tuesday at 3pm"')
    parser.add_argument("--anchor", required=True,
                        help="ISO 8601 timestamp with UTC offset, e.g. 2025-06-01T09:30:00+02:00")
    args = parser.parse_args(argv)
    try:
        result = resolve(args.expression, args.anchor)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
