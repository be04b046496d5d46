"""Figures on a phone: every figure of the chapters that draw them keeps its own size at 390 px, so its text reads as
on the desktop (at least 11 px: tests/test_figures.py measures the figures at their own size), and scrolls sideways
inside a frame that says so, a keyboard stop with a name; at 1366 px the same figures fit the column with no cue and
no extra stop. The page itself never scrolls sideways."""

from __future__ import annotations

import pytest
from browser import DESKTOP, PHONE, horizontal_overflow, site_page, toc_files

PAGES = [f"{name}.html" for name in toc_files()]  # every page; those without figures have nothing to check

MEASURE = """() => [...document.querySelectorAll('.bd-article .cell_output img, .bd-article figure img')]
  .filter((img) => !img.closest("a, [class^='mp-'], [class*=' mp-']"))
  .map((img) => {
    const frame = img.closest('.site-scroll');
    const box = img.closest('.site-scroll__box');
    const hint = frame && frame.querySelector('.site-scroll__hint');
    return {
      shown: img.getBoundingClientRect().width, natural: img.naturalWidth,
      column: box ? box.clientWidth : null, framed: !!frame && frame.classList.contains('site-figure'),
      overflows: !!frame && frame.classList.contains('site-overflows'),
      hint: hint ? (getComputedStyle(hint).display !== 'none' ? hint.textContent : '') : null,
      tab: box && box.getAttribute('tabindex'), label: box && box.getAttribute('aria-label'),
      role: box && box.getAttribute('role'),
    };
  })"""


def _figures(page) -> list[dict]:
    page.wait_for_function("document.documentElement.dataset.site === 'ready'")
    page.wait_for_function(
        "[...document.querySelectorAll('.bd-article .cell_output img')].every((i) => i.complete && i.naturalWidth)"
    )
    return page.evaluate(MEASURE)


@pytest.mark.parametrize("relpath", PAGES)
def test_a_figure_keeps_its_size_on_a_phone_and_scrolls_in_a_frame(relpath):
    with site_page(relpath, viewport=PHONE) as page:
        figures = _figures(page)
        for f in figures:
            assert f["framed"], f
            assert abs(f["shown"] - f["natural"]) <= 1, f  # its own size: the desktop's text sizes
            if f["natural"] > f["column"] + 1:
                assert f["overflows"] and f["hint"] == "Scroll sideways for the whole figure \u2192", f
                assert (f["tab"], f["role"]) == ("0", "region") and f["label"].startswith("Figure, scrolls"), f
        assert not figures or any(f["overflows"] for f in figures)
        assert horizontal_overflow(page) == 0


@pytest.mark.parametrize("relpath", PAGES)
def test_on_the_desktop_a_figure_fits_the_column_with_no_cue(relpath):
    with site_page(relpath, viewport=DESKTOP) as page:
        for f in _figures(page):
            assert f["shown"] <= f["column"] + 1, f
            if f["natural"] <= f["column"]:
                assert not f["overflows"] and f["hint"] == "" and f["tab"] is None, f
        assert horizontal_overflow(page) == 0
