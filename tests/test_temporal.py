"""Tests for memworker.temporal. Every expected value below was worked out by hand from a calendar.

Anchor weekdays: 2025-10-08 Wed, 2025-06-01 Sun, 2025-12-31 Wed, 2024-02-29 Thu, 2025-01-31 Fri,
2026-01-01 Thu, 2025-03-15 Sat.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from memworker.temporal import (
    PRECISIONS,
    Resolved,
    UnresolvableExpression,
    find_expressions,
    is_date_only,
    parse_anchor,
    resolve,
)

WED = "2025-10-08T10:00:00+02:00"  # week Mon 10-06 .. Sun 10-12
SUN = "2025-06-01T09:30:00+02:00"  # week Mon 05-26 .. Sun 06-01
NYE = "2025-12-31T18:00:00+00:00"  # week Mon 12-29 .. Sun 2026-01-04
LEAP = "2024-02-29T12:00:00Z"  # Thursday
JAN31 = "2025-01-31T08:00:00+01:00"  # Friday
LATE_WEST = "2025-06-01T23:30:00-05:00"  # June 1 locally, June 2 in UTC
KIRI = "2026-01-01T00:30:00+14:00"  # Jan 1 2026 locally, Dec 31 2025 in UTC
SAT_Z = "2025-03-15T12:00:00Z"

CASES = [
    # weekdays
    ("this Friday", WED, "2025-10-10", "day"),
    ("this Monday", WED, "2025-10-06", "day"),
    ("this Sunday", WED, "2025-10-12", "day"),
    ("next Tuesday", WED, "2025-10-14", "day"),
    ("last Friday", WED, "2025-10-03", "day"),
    ("on Wednesday", WED, "2025-10-08", "day"),
    ("Wednesday", WED, "2025-10-08", "day"),
    ("Tuesday", WED, "2025-10-14", "day"),
    ("on Thursday", WED, "2025-10-09", "day"),
    ("next Tuesday", SUN, "2025-06-03", "day"),
    ("last Sunday", SUN, "2025-05-25", "day"),
    ("this Friday", SUN, "2025-05-30", "day"),
    ("Monday", SUN, "2025-06-02", "day"),
    ("next Monday", NYE, "2026-01-05", "day"),
    ("Friday", NYE, "2026-01-02", "day"),
    ("NEXT FRIDAY", WED, "2025-10-10", "day"),  # next = first strictly after
    ("  next friday. ", WED, "2025-10-10", "day"),
    ("(Next  Friday)!", WED, "2025-10-10", "day"),
    # weeks and weekends (the Monday / Saturday of that week)
    ("this week", WED, "2025-10-06", "day"),
    ("next week", WED, "2025-10-13", "day"),
    ("last week", WED, "2025-09-29", "day"),
    ("next week", NYE, "2026-01-05", "day"),
    ("this week", NYE, "2025-12-29", "day"),
    ("this weekend", WED, "2025-10-11", "day"),
    ("next weekend", WED, "2025-10-18", "day"),
    ("last weekend", WED, "2025-10-04", "day"),
    ("this weekend", SUN, "2025-05-31", "day"),
    # months and years
    ("this month", WED, "2025-10", "month"),
    ("next month", NYE, "2026-01", "month"),
    ("last month", JAN31, "2024-12", "month"),
    ("next year", NYE, "2026", "year"),
    ("last year", WED, "2024", "year"),
    ("this year", KIRI, "2026", "year"),
    # day words, time zones
    ("today", WED, "2025-10-08", "day"),
    ("tonight", WED, "2025-10-08", "day"),
    ("this morning", WED, "2025-10-08", "day"),
    ("this evening", SUN, "2025-06-01", "day"),
    ("tomorrow", NYE, "2026-01-01", "day"),
    ("yesterday", KIRI, "2025-12-31", "day"),
    ("today", KIRI, "2026-01-01", "day"),
    ("today", LATE_WEST, "2025-06-01", "day"),
    ("tomorrow", LATE_WEST, "2025-06-02", "day"),
    ("the day after tomorrow", NYE, "2026-01-02", "day"),
    ("the day before yesterday", "2025-03-01T07:00:00+09:00", "2025-02-27", "day"),
    ("yesterday", LEAP, "2024-02-28", "day"),
    ("tomorrow", LEAP, "2024-03-01", "day"),
    ("Tomorrow Morning", WED, "2025-10-09", "day"),
    ("last night", WED, "2025-10-07", "day"),
    # relative offsets (calendar arithmetic)
    ("in 1 month", JAN31, "2025-02-28", "day"),
    ("in a month", "2024-01-31T10:00:00-08:00", "2024-02-29", "day"),
    ("in 1 year", LEAP, "2025-02-28", "day"),
    ("a year ago", LEAP, "2023-02-28", "day"),
    ("in 4 years", LEAP, "2028-02-29", "day"),
    ("in 3 days", NYE, "2026-01-03", "day"),
    ("in two weeks", WED, "2025-10-22", "day"),
    ("3 days ago", WED, "2025-10-05", "day"),
    ("in a couple of days", WED, "2025-10-10", "day"),
    ("2 months ago", NYE, "2025-10-31", "day"),
    ("in 1 month", NYE, "2026-01-31", "day"),
    ("in 2 months", NYE, "2026-02-28", "day"),
    ("a week from now", WED, "2025-10-15", "day"),
    ("in 10 days", SAT_Z, "2025-03-25", "day"),
    ("one day ago", SAT_Z, "2025-03-14", "day"),
    # month + day (closest occurrence without a year; ties -> future)
    ("March 3", "2025-12-20T12:00:00+00:00", "2026-03-03", "day"),
    ("December 28", "2026-01-02T10:00:00+00:00", "2025-12-28", "day"),
    ("March 3, 2025", WED, "2025-03-03", "day"),
    ("3rd of March 2026", WED, "2026-03-03", "day"),
    ("21 Sept 2025", WED, "2025-09-21", "day"),
    ("Jan 5th", WED, "2026-01-05", "day"),
    ("the 5th of January", WED, "2026-01-05", "day"),
    ("Feb 29", SUN, "2024-02-29", "day"),
    ("February 29", LEAP, "2024-02-29", "day"),
    ("June 15", "2025-12-15T12:00:00+00:00", "2026-06-15", "day"),  # 182 ahead vs 183 back
    ("August 31", "2024-03-01T12:00:00+00:00", "2024-08-31", "day"),  # 183 each way: tie
    ("Friday, October 10", WED, "2025-10-10", "day"),
    ("on may 5th", WED, "2025-05-05", "day"),  # 156 days back vs 209 ahead
    # clock times -> datetime in the anchor's offset
    ("next Tuesday at 3pm", SUN, "2025-06-03T15:00:00+02:00", "datetime"),
    ("tomorrow at 9am", NYE, "2026-01-01T09:00:00+00:00", "datetime"),
    ("at 3pm", WED, "2025-10-08T15:00:00+02:00", "datetime"),
    ("at 3:30 pm", LATE_WEST, "2025-06-01T15:30:00-05:00", "datetime"),
    ("at 15:30", KIRI, "2026-01-01T15:30:00+14:00", "datetime"),
    ("at noon", SAT_Z, "2025-03-15T12:00:00+00:00", "datetime"),
    ("at midnight", WED, "2025-10-08T00:00:00+02:00", "datetime"),
    ("at 12am", WED, "2025-10-08T00:00:00+02:00", "datetime"),
    ("Friday at 5pm", WED, "2025-10-10T17:00:00+02:00", "datetime"),
    ("at 9am tomorrow", WED, "2025-10-09T09:00:00+02:00", "datetime"),
    ("tonight at 8 p.m.", WED, "2025-10-08T20:00:00+02:00", "datetime"),
    ("on March 3 at 10:00", WED, "2026-03-03T10:00:00+02:00", "datetime"),
    ("on the 1st at 3:30 pm", WED, "2025-11-01T15:30:00+02:00", "datetime"),
    # ordinals: next date on or after the anchor with that day of month
    ("the 3rd", "2025-09-28T12:00:00+00:00", "2025-10-03", "day"),
    ("the 31st", "2025-09-05T12:00:00+00:00", "2025-10-31", "day"),
    ("on the 1st", NYE, "2026-01-01", "day"),
    ("the 8th", WED, "2025-10-08", "day"),
    ("the 30th", JAN31, "2025-03-30", "day"),
    ("the 29th", "2024-02-01T12:00:00+00:00", "2024-02-29", "day"),
    # ISO
    ("2025-10-08", SUN, "2025-10-08", "day"),
    ("2025-10", SUN, "2025-10", "month"),
    ("2025-10-08T15:00", SUN, "2025-10-08T15:00:00+02:00", "datetime"),
    ("2025-10-08 15:00", SAT_Z, "2025-10-08T15:00:00+00:00", "datetime"),
    ("2025-10-08T15:00:00Z", WED, "2025-10-08T17:00:00+02:00", "datetime"),
    ("2025-10-08T23:30:00-05:00", WED, "2025-10-09T06:30:00+02:00", "datetime"),
    # months and years
    ("in March", WED, "2026-03", "month"),
    ("in March", SAT_Z, "2025-03", "month"),
    ("in September", WED, "2025-09", "month"),
    ("in October", WED, "2025-10", "month"),  # the anchor's own month
    ("in April", WED, "2026-04", "month"),  # -6 vs +6 months: tie -> future
    ("May 2026", WED, "2026-05", "month"),
    ("in Dec 2024", WED, "2024-12", "month"),
    ("in 2030", WED, "2030", "year"),
    ("in 1999", WED, "1999", "year"),
]


@pytest.mark.parametrize(("expression", "anchor", "date", "precision"), CASES)
def test_resolve(expression: str, anchor: str, date: str, precision: str) -> None:
    assert resolve(expression, anchor) == Resolved(date, precision)


#: anchors at calendar edges: leap day, year end, month end, extreme and fractional offsets
EDGE_ANCHORS = ["2024-02-29T23:59:00+14:00", "2025-12-31T00:00:00-12:00", "2025-01-31T12:00:00Z",
                "2026-03-01T05:00:00+05:30", "2000-01-01T00:00:00Z"]


@pytest.mark.parametrize("anchor", EDGE_ANCHORS)
def test_every_case_resolves_to_a_real_date_at_calendar_edges(anchor) -> None:
    """Each expression of the table, resolved against edge anchors: a real date at its
    precision, a clock time exactly when the precision is datetime (then in the anchor's
    offset unless the expression names its own)."""
    offset = parse_anchor(anchor).utcoffset()
    for expression, *_ in CASES:
        got = resolve(expression, anchor)
        assert ("T" in got.date) == (not is_date_only(got.precision)), (expression, got)
        if got.precision == "datetime":
            stamp = datetime.fromisoformat(got.date)
            assert stamp.utcoffset() == offset or any(c in expression for c in "Z+-"), expression
        elif got.precision == "day":
            date.fromisoformat(got.date)
        elif got.precision == "month":
            date.fromisoformat(got.date + "-01")
        else:
            assert len(got.date) == 4 and got.date.isdigit()


UNRESOLVABLE = [
    "soon", "later", "recently", "a few days ago", "in a few days", "in several weeks",
    "February 30", "Feb 30, 2025", "February 29, 2025", "2025-13", "2025-02-30",
    "at 25:00", "at 13pm", "next month at 3pm", "the 32nd", "", "   ", "10/08/2025", "next",
    "in 2 hours", "someday", "Mondays",
]


@pytest.mark.parametrize("expression", UNRESOLVABLE)
def test_unresolvable(expression: str) -> None:
    with pytest.raises(UnresolvableExpression) as info:
        resolve(expression, WED)
    assert repr(expression) in str(info.value)


def test_vague_message_says_why() -> None:
    with pytest.raises(UnresolvableExpression, match="vague"):
        resolve("a few days ago", WED)


def test_unresolvable_is_picklable_and_names_the_reason() -> None:
    with pytest.raises(UnresolvableExpression) as info:
        resolve("February 30", WED)
    again = pickle.loads(pickle.dumps(info.value))
    assert (again.expression, again.reason, str(again)) == (
        "February 30", info.value.reason, str(info.value))
    assert "month 2 has no day 30" in str(again)


@pytest.mark.parametrize("anchor", ["2025-06-01T09:30:00", "2025-06-01", datetime(2025, 6, 1)])
def test_naive_anchor_rejected(anchor) -> None:
    with pytest.raises(ValueError, match="offset"):
        resolve("today", anchor)


def test_garbage_anchor_rejected() -> None:
    with pytest.raises(ValueError, match="anchor"):
        parse_anchor("not a date")


def test_parse_anchor_keeps_wall_time_and_offset() -> None:
    a = parse_anchor("2025-06-01T23:30:00-05:00")
    assert a.date().isoformat() == "2025-06-01"
    assert a.utcoffset() == timedelta(hours=-5)
    aware = datetime(2025, 6, 1, 9, 30, tzinfo=timezone(timedelta(hours=2)))
    assert resolve("next Tuesday", aware) == Resolved("2025-06-03", "day")
    assert resolve("at 9am", "2025-06-01T09:30:00Z").date == "2025-06-01T09:00:00+00:00"


def test_resolved_api() -> None:
    assert PRECISIONS == ("day", "month", "year", "datetime")
    assert Resolved("2025", "year").to_dict() == {"date": "2025", "precision": "year"}
    assert list(Resolved("2025-06", "month").to_dict()) == ["date", "precision"]
    assert [is_date_only(p) for p in PRECISIONS] == [True, True, True, False]
    with pytest.raises(ValueError):
        Resolved("2025", "week")
    assert issubclass(UnresolvableExpression, ValueError)


FIND_CASES = [
    ("See you next Tuesday at 3pm, or maybe Friday.", ["next Tuesday at 3pm", "Friday"]),
    ("We meet on Mondays. Monday works.", ["Monday"]),
    ("You may come in May. It may rain on May 5th.", ["in May", "on May 5th"]),
    ("I think 5 may be enough; we march 3 miles.", []),
    ("I was born on 3 March 1990 and moved in 2005.", ["on 3 March 1990", "in 2005"]),
    ("The 2nd floor, on the 3rd, the 21st.", ["on the 3rd", "the 21st"]),
    ("the last Friday of the month; the last week was rough; last week was fine",
     ["last week"]),
    ("Monday-Friday 9-5, 3.5 days ago, 2 days ago", ["2 days ago"]),
    ("2025-10-08T15:00:00+02:00 and 2025-10-08 and 2025-10 and 2025-10-08 15:00",
     ["2025-10-08T15:00:00+02:00", "2025-10-08", "2025-10", "2025-10-08 15:00"]),
    ("in a few days, soon, later, recently, in a week or two", []),
    ("tomorrow, Tomorrow, tomorrow!", ["tomorrow", "Tomorrow"]),
    ("the day after tomorrow at noon", ["the day after tomorrow at noon"]),
    ("Friday, October 10 at 5pm, Mondays", ["Friday, October 10 at 5pm"]),
    ("at 3pm tomorrow; at 10:30:45; at 25:00", ["at 3pm tomorrow"]),
    ("in March 2026 and in March 3rd? in march, then", ["in March 2026", "March 3rd", "in march"]),
    ("every Monday and each Friday we meet; this Sunday too", ["this Sunday"]),
    ("We did it a couple of days ago and will again in 2 weeks.",
     ["a couple of days ago", "in 2 weeks"]),
    ("version 2019-20 and 2010-2012", []),
    ("At 7 p.m. tonight. Call at 7 p.m.", ["At 7 p.m. tonight", "at 7 p.m."]),
    ('(tomorrow)  "next week"', ["tomorrow", "next week"]),
    ("Todays Sundays tomorrows yesterdayish", []),
    ("Let's do next month, not this year; maybe Jan. 5 or 12 Dec.",
     ["next month", "this year", "Jan. 5", "12 Dec"]),
    ("", []),
]


@pytest.mark.parametrize(("text", "expected"), FIND_CASES)
def test_find_expressions(text: str, expected: list[str]) -> None:
    assert find_expressions(text) == expected


ROUND_TRIP_ANCHORS = [WED, SUN, NYE, LEAP, JAN31, LATE_WEST, KIRI, SAT_Z,
                      "1990-07-04T03:00:00-10:00", "2099-12-31T23:59:59+05:45"]
ROUND_TRIP_TEXTS = [text for text, _ in FIND_CASES] + [
    "Call me on the 31st at 9:15am, or the 30th of February, or February 29.",
    "Last Monday we agreed: next Thursday at noon, then in 3 months, then in March.",
    "2024-02-29 was fun, 2025-02-29 was not; 2025-10-08T15:00Z is a time.",
    "in 12 years, twelve days ago, an hour ago, a day from today, in eleven weeks",
    "Meet Sept 9, 2030 at 18:45; also 1 Jan; the 1st of April 2020; on the 31st.",
    "This Morning, tomorrow evening, yesterday afternoon, last night, TONIGHT at 11 PM.",
]


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_every_found_expression_resolves(text: str) -> None:
    found = find_expressions(text)
    assert len(found) == len(set(found))
    position = 0
    for expr in found:  # exact substrings, left to right
        index = text.find(expr, position)
        assert index >= 0, expr
        position = index + len(expr)
        for anchor in ROUND_TRIP_ANCHORS:
            resolve(expr, anchor)


def test_invalid_date_is_not_found_but_neighbours_are() -> None:
    assert find_expressions(ROUND_TRIP_TEXTS[-6]) == ["on the 31st at 9:15am", "February 29"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "memworker.temporal", *args],
                          capture_output=True, text=True, env=env, check=False)


def test_cli_prints_json() -> None:
    proc = _cli("next Tuesday", "--anchor", "2025-06-01T09:30:00+02:00")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == '{"date": "2025-06-03", "precision": "day"}\n'
    assert json.loads(proc.stdout) == {"date": "2025-06-03", "precision": "day"}


@pytest.mark.parametrize(("expression", "anchor"), [
    ("soon", "2025-06-01T09:30:00+02:00"),
    ("today", "2025-06-01T09:30:00"),
])
def test_cli_errors(expression: str, anchor: str) -> None:
    proc = _cli(expression, "--anchor", anchor)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: ")
    assert len(proc.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------- weekday convention (all 7 x 7)
WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONDAY = date(2025, 10, 6)  # a Monday; anchors Mon 10-06 .. Sun 10-12


def _brute(anchor_day: date, target: int, mod: str) -> date:
    """The convention by walking the calendar one day at a time (no modular arithmetic)."""
    if mod == "this":
        start = anchor_day
        while start.weekday() != 0:
            start -= timedelta(days=1)
        return start + timedelta(days=target)
    step = -1 if mod == "last" else 1
    day = anchor_day if mod == "" else anchor_day + timedelta(days=step)
    while day.weekday() != target:
        day += timedelta(days=step)
    return day


@pytest.mark.parametrize("anchor_wd", range(7))
@pytest.mark.parametrize("target", range(7))
@pytest.mark.parametrize("mod", ["next", "last", "this", ""])
def test_weekday_convention_every_combination(anchor_wd: int, target: int, mod: str) -> None:
    anchor_day = MONDAY + timedelta(days=anchor_wd)
    anchor = f"{anchor_day.isoformat()}T10:00:00+02:00"
    expression = f"{mod} {WEEKDAY_NAMES[target]}".strip()
    got = date.fromisoformat(resolve(expression, anchor).date)
    assert got == _brute(anchor_day, target, mod)
    delta = (got - anchor_day).days
    expected_range = {"next": range(1, 8), "last": range(-7, 0), "": range(0, 7)}.get(mod)
    if expected_range is not None:
        assert delta in expected_range, (expression, anchor_day, delta)
    else:
        assert got.isocalendar()[:2] == anchor_day.isocalendar()[:2]  # same Mon-Sun week


# ------------------------------------------------------------- the finder declines misreadings
DECLINE_CASES = [
    ("It was the first time in 5 years.", []),
    ("For the first time in two weeks I slept well.", []),
    ("I haven't seen him in three months.", []),
    ("I will see him in two weeks.", ["in two weeks"]),
    ("Open 08:00-12:00 on weekdays.", []),
    ("The slot on 2024-05-01 08:00-12:00 is taken.", ["on 2024-05-01"]),
    ("I moved here in March.", []),
    ("I'm moving in March.", ["in March"]),
    ("We are flying out in March, I think.", ["in March"]),
    ("I paid the rent on the 16th.", []),
    ("I'll pay the rent on the 16th.", ["on the 16th"]),
    ("I saw her Friday.", []),
    ("See you Friday.", ["Friday"]),
    ("I booked a table for Friday.", ["Friday"]),
    ("I went there Friday and will go back next week.", ["next week"]),
    ("We met last Friday.", ["last Friday"]),
    ("I was born on 3 March 1990.", ["on 3 March 1990"]),
]


@pytest.mark.parametrize(("text", "expected"), DECLINE_CASES)
def test_finder_declines_rather_than_misreads(text: str, expected: list[str]) -> None:
    assert find_expressions(text) == expected


def test_time_range_is_not_an_offset() -> None:
    with pytest.raises(UnresolvableExpression):
        resolve("2024-05-01 08:00-12:00", WED)
    assert resolve("2024-05-01T08:00-05:00", "2024-05-01T00:00:00+00:00") == \
        Resolved("2024-05-01T13:00:00+00:00", "datetime")
    with pytest.raises(UnresolvableExpression):
        resolve("08:00-12:00", WED)


ANCHORED_CASES = [  # said on Monday 2025-11-10
    ("We found out in October.", [], ["in October"]),  # past clause, reading 2025-10: kept
    ("I moved here in March.", [], []),  # the closest March is 2026-03: after the anchor
    ("I'm moving in October.", ["in October"], []),  # future clause, reading 2025-10: before
    ("I'm moving in March.", ["in March"], ["in March"]),
    ("I saw her Monday.", [], ["Monday"]),  # a bare weekday said that day is that day
    ("I saw her Friday.", [], []),
    ("I paid it on the 10th.", [], ["on the 10th"]),
    ("See you Friday.", ["Friday"], ["Friday"]),
]


@pytest.mark.parametrize(("text", "plain", "anchored"), ANCHORED_CASES)
def test_finder_with_anchor_declines_only_wrong_side_readings(text, plain, anchored) -> None:
    assert find_expressions(text) == plain
    assert find_expressions(text, "2025-11-10T20:30:00+01:00") == anchored


def test_a_past_plan_verb_and_a_previous_sentence_do_not_decline_an_expression():
    from memworker import temporal

    # "planned" is past tense, not a future marker; "at last." ends the sentence before "In 3 weeks"
    said = "2026-09-14T12:15:29+02:00"
    assert temporal.find_expressions("Finally planned the surprise party in April!", said) \
        == ["in April"]
    assert temporal.find_expressions(
        "So I open-sourced the parser, at last. In 3 weeks I'll set up backups.", said) \
        == ["In 3 weeks"]
    assert temporal.find_expressions("It was the last time in 3 weeks that I ran.", said) == []
