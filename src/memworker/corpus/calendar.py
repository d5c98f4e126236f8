"""Render a world-state date as a time expression said on a given day.

The world state decides *when* something happens (a date, a month or a year); this module picks
words for it as seen from the day the event is said ("next Tuesday", "in March", "two days ago").
The arithmetic here is written independently of `memworker.temporal`: the audit resolves every
gold expression with the real resolver and compares, so a disagreement between the two is caught
instead of being copied into the labels.

The last/next weekday convention is written in one place, the docstring of `memworker.temporal`
(the resolver the audit checks against): "next <weekday>" = the first such day strictly after the
anchor date (1-7 days ahead), "last" = the most recent strictly before, "this" = that day of the
anchor's Monday-Sunday week. The generator only says "next <weekday>" for a weekday on
or before the anchor's and "last <weekday>" for one on or after it: there the convention and the
older "of the following/previous week" reading give the same day, so the rows stay correct under
either resolver. Bare weekdays are only said of the future ("on Friday" = the coming Friday);
"next/last weekend" are never said (their reading differs between conventions). Other forms:
"<Month> <day>" = closest occurrence, "in <Month>" = closest such month, "this weekend" = this
week's Saturday.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven",
          8: "eight", 9: "nine", 10: "ten"}


@dataclass(frozen=True)
class When:
    """A rendered time: the words said, and the date the world state means by them."""

    words: str  # e.g. "next Tuesday" (what the sentence contains)
    date: str  # "2025-10-14" | "2025-11" | "2026"
    precision: str  # "day" | "month" | "year"


def _ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _count(n: int, rng: random.Random) -> str:
    return _WORDS[n] if n in _WORDS and rng.random() < 0.6 else str(n)


def next_gap(anchor_wd: int, target: int) -> int:
    """Days from the anchor to "next <target weekday>": the first such day strictly after."""
    return (target - anchor_wd - 1) % 7 + 1


def last_gap(anchor_wd: int, target: int) -> int:
    """Days back from the anchor to "last <target weekday>": the most recent strictly before."""
    return (anchor_wd - target - 1) % 7 + 1


def _monday(d: date) -> date:
    return d - timedelta(days=d.weekday())


def _month_shift(d: date, months: int) -> tuple[int, int]:
    k = d.year * 12 + d.month - 1 + months
    return k // 12, k % 12 + 1


def _day(words: str, d: date) -> When:
    return When(words, d.isoformat(), "day")


def _month_day(d: date, rng: random.Random) -> str:
    month = MONTHS[d.month - 1]
    return rng.choice([f"{month} {d.day}", f"on {month} {d.day}", f"{d.day} {month}",
                       f"on {month} {_ordinal(d.day)}"])


def future_day(anchor: date, rng: random.Random) -> When:
    """A day after `anchor` (1 to ~120 days ahead) in one of many phrasings."""
    wd = anchor.weekday()
    options = ["tomorrow", "day_after", "next_wd", "in_days", "in_weeks", "month_day",
               "month_day", "ordinal"]
    if wd < 4:
        options += ["this_wd", "this_wd", "on_wd"]
    if wd < 5:
        options.append("this_weekend")
    pick = rng.choice(options)
    if pick == "tomorrow":
        return _day("tomorrow", anchor + timedelta(days=1))
    if pick == "day_after":
        return _day("the day after tomorrow", anchor + timedelta(days=2))
    if pick == "this_wd":
        target = rng.randrange(wd + 1, 7)
        return _day(f"this {WEEKDAYS[target]}", _monday(anchor) + timedelta(days=target))
    if pick == "on_wd":
        target = rng.randrange(wd + 1, 7)
        words = rng.choice([f"on {WEEKDAYS[target]}", WEEKDAYS[target]])
        return _day(words, anchor + timedelta(days=target - wd))
    if pick == "next_wd":
        target = rng.randrange(wd + 1)  # on or before the anchor's weekday (see the module doc)
        return _day(f"next {WEEKDAYS[target]}", anchor + timedelta(days=next_gap(wd, target)))
    if pick == "in_days":
        n = rng.randrange(2, 11)
        words = rng.choice([f"in {_count(n, rng)} days", f"{_count(n, rng)} days from now"])
        return _day(words, anchor + timedelta(days=n))
    if pick == "in_weeks":
        n = rng.randrange(1, 5)
        words = "in a week" if n == 1 else f"in {_count(n, rng)} weeks"
        return _day(words, anchor + timedelta(weeks=n))
    if pick == "this_weekend":
        return _day("this weekend", _monday(anchor) + timedelta(days=5))
    if pick == "ordinal":
        target = anchor + timedelta(days=rng.randrange(1, 26))
        if target.month != anchor.month and target.day >= anchor.day:
            target = anchor + timedelta(days=1)  # the same day number would come this month
        return _day(f"on the {_ordinal(target.day)}", target)
    target = anchor + timedelta(days=rng.randrange(3, 121))
    return _day(_month_day(target, rng), target)


def past_day(anchor: date, rng: random.Random) -> When:
    """A day before `anchor` (1 to ~100 days back)."""
    pick = rng.choice(["yesterday", "yesterday", "day_before", "last_wd", "days_ago",
                       "weeks_ago", "month_day"])
    if pick == "yesterday":
        return _day("yesterday", anchor - timedelta(days=1))
    if pick == "day_before":
        return _day("the day before yesterday", anchor - timedelta(days=2))
    if pick == "last_wd":
        target = rng.randrange(anchor.weekday(), 7)  # on or after the anchor's weekday
        return _day(f"last {WEEKDAYS[target]}",
                    anchor - timedelta(days=last_gap(anchor.weekday(), target)))
    if pick == "days_ago":
        n = rng.randrange(2, 10)
        return _day(f"{_count(n, rng)} days ago", anchor - timedelta(days=n))
    if pick == "weeks_ago":
        n = rng.randrange(1, 4)
        words = "a week ago" if n == 1 else f"{_count(n, rng)} weeks ago"
        return _day(words, anchor - timedelta(weeks=n))
    target = anchor - timedelta(days=rng.randrange(2, 101))
    return _day(_month_day(target, rng), target)


def future_month(anchor: date, rng: random.Random) -> When:
    """A month 1-5 months ahead ("in March", "next month")."""
    if rng.random() < 0.3:
        y, m = _month_shift(anchor, 1)
        return When("next month", f"{y:04d}-{m:02d}", "month")
    y, m = _month_shift(anchor, rng.randrange(1, 6))
    return When(f"in {MONTHS[m - 1]}", f"{y:04d}-{m:02d}", "month")


def past_month(anchor: date, rng: random.Random) -> When:
    if rng.random() < 0.5:
        y, m = _month_shift(anchor, -1)
        return When("last month", f"{y:04d}-{m:02d}", "month")
    y, m = _month_shift(anchor, -rng.randrange(1, 6))
    return When(f"in {MONTHS[m - 1]}", f"{y:04d}-{m:02d}", "month")


def future(anchor: date, rng: random.Random) -> When:
    """Mostly day precision, sometimes a month or next year."""
    r = rng.random()
    if r < 0.8:
        return future_day(anchor, rng)
    if r < 0.95:
        return future_month(anchor, rng)
    return When("next year", f"{anchor.year + 1:04d}", "year")


def past(anchor: date, rng: random.Random) -> When:
    return past_day(anchor, rng) if rng.random() < 0.85 else past_month(anchor, rng)
