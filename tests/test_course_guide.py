"""The course guide's twelve-week plan: loads recomputed from its own tables.

The guide states each chapter's time in its "chapters at a glance" tables and
each week's hours in the syllabus. These tests recompute the weekly hours from
the chapter times, check the stated figures against them, check that every week
lies within 30 % of the mean (the balance the guide promises), that every
chapter of the table of contents is taught in exactly one week, and that every
week maps its outcomes to graded exercises.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
GUIDE = (ROOT / "book" / "course_guide.md").read_text(encoding="utf-8")
DOC = re.compile(r"\{doc\}`[^<`]*<([^>]+)>`")
EXTRA_HOURS = re.compile(r"\((\d+(?:\.\d+)?) h\)")
#: Pages the syllabus assigns that are not in the chapter tables, with their hours as the guide states them.
PAGE_HOURS = {"notation": 1.0}
BAND = 0.30


def _rows(section: str) -> list[list[str]]:
    """The table rows (cells stripped) of the guide's section whose heading is ``section``."""
    start = GUIDE.index(f"## {section}")
    end = GUIDE.find("\n## ", start + 1)
    text = GUIDE[start : end if end > 0 else None]
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("| ---"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _chapter_hours() -> dict[str, float]:
    hours: dict[str, float] = {}
    for row in _rows("The chapters at a glance"):
        m = DOC.search(row[0])
        if m is None:
            continue  # a header row
        t = re.fullmatch(r"(\d+(?:\.\d+)?) h", row[3])
        assert t, f"time column of {row[0]!r} is not 'N h': {row[3]!r}"
        hours[Path(m.group(1)).name] = float(t.group(1))
    return hours


def _weeks() -> list[tuple[int, list[str], float, float, list[str]]]:
    """(week, pages, stated hours, recomputed hours, row) for each syllabus row."""
    chapter_hours = {**_chapter_hours(), **PAGE_HOURS}
    weeks = []
    for row in _rows("A twelve-week syllabus"):
        if not row[0].isdigit():
            continue
        pages = [Path(p).name for p in DOC.findall(row[1])]
        computed = sum(chapter_hours[p] for p in pages) + sum(float(h) for h in EXTRA_HOURS.findall(row[1]))
        weeks.append((int(row[0]), pages, float(row[2]), computed, row))
    return weeks


def test_the_chapter_tables_give_every_chapter_a_time():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    chapters = {
        Path(c["file"]).name for part in toc["parts"] for c in part["chapters"] if c["file"].startswith("chapters/")
    }
    assert set(_chapter_hours()) == chapters


def test_every_chapter_is_taught_in_exactly_one_week():
    taught = [p for _, pages, *_ in _weeks() for p in pages if p not in PAGE_HOURS]
    assert sorted(taught) == sorted(_chapter_hours()), "each chapter once"
    assert [w for w, *_ in _weeks()] == list(range(1, 13))


@pytest.mark.parametrize("week", range(1, 13))
def test_stated_hours_are_the_sum_of_the_chapter_times(week):
    _, pages, stated, computed, _ = _weeks()[week - 1]
    assert stated == pytest.approx(computed), f"week {week} ({pages}): states {stated} h, the tables give {computed} h"


def test_weekly_load_is_balanced_and_the_stated_figures_hold():
    loads = [computed for *_, computed, _ in _weeks()]
    mean = sum(loads) / len(loads)
    for week, load in enumerate(loads, 1):
        assert abs(load - mean) <= BAND * mean, f"week {week}: {load} h, mean {mean:.2f} h"
    assert f"the load is {sum(loads):g} h, a mean of {mean:.1f} h" in GUIDE
    low, high = min(loads), max(loads)
    assert f"between {low:g} h and {high:g} h" in GUIDE
    assert f"within {round(100 * (mean - low) / mean)} % below and {round(100 * (high - mean) / mean)} % above" in GUIDE


def test_every_week_maps_outcomes_to_graded_exercises():
    for week, _, _, _, row in _weeks():
        outcomes, exercises = row[3], row[4]
        assert len(outcomes) > 40, f"week {week}: outcomes missing"
        if week < 12:
            assert len(re.findall(r"\(\d\)", exercises)) >= 6, f"week {week}: name each chapter's three exercises"
        else:
            assert "rubric" in exercises


def test_the_project_has_a_brief_and_a_rubric_of_twenty_points():
    rubric = _rows("The week-12 project")
    criteria = [r for r in rubric if r[0] != "criterion"]
    assert [len(r) for r in criteria] == [4] * 5, "five criteria, each scored 0, 2 or 4"
    assert "**Rubric** (20 points)" in GUIDE and "**Brief.**" in GUIDE
