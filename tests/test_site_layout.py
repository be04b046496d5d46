"""The built site as a reader meets it, on a phone (390 px), a tablet (800 px) and a desktop (1366 px), offline.

- Navigation: on narrow screens ☰ opens the book's table of contents and the list icon opens "On this page"; on
  the desktop ☰ collapses the sidebar and brings it back, and the choice survives a page change.
- No page scrolls sideways; wide tables and display equations scroll inside a frame that shows there is more,
  and a scrolling table keeps its first column in place.
- Figures enlarge on click or Enter; dark mode keeps figures on white paper and table text readable.
- Weight: no Font Awesome script or web font, no search index outside the search page, no MathJax script (the
  build typesets the math: scripts/typeset_math.js) and its fonts only on pages with math; per-page budgets below.
- Search works from file:// (result snippets, which need each page fetched, are turned off and said so).

Runs against the site `make book` builds (_build/html) or the one named by COURSE_SITE_DIR; skips when it is
missing, fails then in CI. Drives Debian's Chromium (tests/browser.py's flags) with every non-file:// request
aborted and recorded.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from browser import CHROMIUM, offline_context, shared_chromium, toc_files, toc_numbers

REPO_ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("COURSE_SITE_DIR", REPO_ROOT / "_build" / "html")).resolve()

PHONE, TABLET, DESKTOP = 390, 800, 1366
HEIGHT = {PHONE: 844, TABLET: 900, DESKTOP: 900}
CHAPTER = "notebooks/01_one_gpu.html"
NEXT_CHAPTER = "notebooks/02_data_parallel.html"  # CHAPTER's "next" link

# Bytes a page may load besides its own HTML and figures (and the search page its index): the theme, Sphinx's
# scripts, site.css/.js (measured 0.66 MB), and MathJax's fonts on a page with math (measured 55-76 kB; MathJax's
# scripts, 0.77 MB, no longer load: the build typesets the math).
CHROME_BUDGET = 700_000
MATHJAX_BUDGET = 150_000
# Math on a page: Sphinx's math elements, TeX that MathJax would typeset, or formulas the build typeset.
MATH_MARKERS = ("math notranslate", "\\(", "\\[", "$$", "<mjx-container")


# ---------------------------------------------------------------------------------------------------- the site


def _require_site() -> None:
    if not (SITE / CHAPTER).is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{SITE / CHAPTER} was not built")
        pytest.skip(f"{SITE / CHAPTER} does not exist: build the site first (`make book`)")


def _pages() -> list[str]:
    """Every HTML page of the site, relative to its root (index.html is a redirect to the intro)."""
    _require_site()
    return sorted(
        p.relative_to(SITE).as_posix()
        for p in SITE.rglob("*.html")
        if p.name != "index.html" and "_static" not in p.parts and "_sources" not in p.parts
    )


def _toc_pages() -> list[str]:
    """The pages of _toc.yml, as built HTML paths."""
    return [f"{name}.html" for name in toc_files()]


def _has_math(relpath: str) -> bool:
    body = (SITE / relpath).read_text(encoding="utf-8")
    article = body[body.find("<article") : body.rfind("</article>")]
    return any(marker in article for marker in MATH_MARKERS)


# ------------------------------------------------------------------------------------------------- the browser


@pytest.fixture(scope="module")
def chromium():
    _require_site()
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: run `make chromium`")
    return shared_chromium()  # the process's one Chromium (browser.py): one sync Playwright per thread


class Visit:
    """One page in a fresh browser context: its JavaScript errors, console errors, and the files it loaded."""

    def __init__(self, context) -> None:
        self.context = context
        self.page = context.new_page()
        self.errors: list[str] = []
        self.console_errors: list[str] = []
        self.blocked: list[str] = []
        self.loaded: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("console", self._on_console)

    def _on_console(self, msg) -> None:
        if msg.type == "error":
            self.console_errors.append(msg.text)

    def open(self, relpath: str, query: str = "") -> None:
        """Go to a page of the site and wait for site.js to finish (framing its equations included)."""
        self.loaded.clear()
        self.console_errors.clear()
        self.page.goto((SITE / relpath).as_uri() + query, wait_until="load")
        if self.page.locator("script[src*='_static/site.js']").count():
            self.page.wait_for_function(
                "document.documentElement.dataset.site === 'ready' && document.documentElement.dataset.siteMath === "
                "'ready'",
                timeout=20_000,
            )

    def loaded_files(self) -> dict[str, int]:
        """Site files the page loaded (path relative to the site root -> bytes on disk)."""
        files = {}
        for url in dict.fromkeys(self.loaded):
            path = Path(unquote(urlsplit(url).path))
            if path.is_file():
                files[path.resolve().relative_to(SITE).as_posix()] = path.stat().st_size
        return files


@contextlib.contextmanager
def visit(chromium, width: int, dark: bool = False) -> Iterator[Visit]:
    """A page in a new offline context of ``chromium`` (the shared one, ``browser.offline_context``) at ``width``."""
    assert chromium is shared_chromium()
    context, blocked = offline_context(
        viewport={"width": width, "height": HEIGHT[width]}, color_scheme="dark" if dark else "light"
    )
    v = Visit(context)
    v.blocked = blocked

    def record(request) -> None:
        if request.url.startswith("file://"):
            v.loaded.append(request.url)

    context.on("request", record)
    try:
        yield v
    finally:
        context.close()
    assert v.blocked == [], f"requests outside the site: {v.blocked}"
    assert v.errors == [], f"JavaScript errors: {v.errors}"


# ------------------------------------------------------------------------------------ one report per page, width

REPORT_JS = r"""async () => {
  const frame = (el) => el.closest('.site-scroll');
  const nextFrame = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const state = (outer) => ({
    overflows: outer.classList.contains('site-overflows'),
    left: outer.classList.contains('site-more-left'),
    right: outer.classList.contains('site-more-right'),
  });
  const tables = [], scrolled = [];
  for (const table of document.querySelectorAll('.bd-article table')) {
    if (table.closest("[class^='mp-'], [class*=' mp-']")) continue;  // the exercise widgets' own layout
    const outer = frame(table), box = outer && outer.querySelector('.site-scroll__box');
    const t = {framed: Boolean(box), text: table.innerText.slice(0, 60)};
    if (box) {
      t.scrollable = ['auto', 'scroll'].includes(getComputedStyle(box).overflowX);
      t.hidden = box.scrollWidth - box.clientWidth;
      t.start = state(outer);
      const hint = outer.querySelector('.site-scroll__hint');
      t.hint = Boolean(hint && hint.offsetHeight > 0);
      t.focusable = box.getAttribute('tabindex') === '0';
      const firsts = [...table.querySelectorAll('tr')].map((row) => row.firstElementChild).filter(Boolean);
      t.sticky = firsts.every((cell) => getComputedStyle(cell).position === 'sticky');
      if (t.hidden > 1) scrolled.push({t, table, outer, box, firsts});
    }
    tables.push(t);
  }
  // Every table that overflows is scrolled to its end at once (each frame's cue follows its own scroll events), read
  // after the next frame, then scrolled back: two frames per page rather than two per table.
  for (const {box} of scrolled) box.scrollLeft = box.scrollWidth;
  if (scrolled.length) await nextFrame();
  for (const {t, table, outer, box, firsts} of scrolled) {
    t.end = state(outer);
    const boxLeft = box.getBoundingClientRect().left;
    t.firstColumnHeld = firsts.every((cell) => Math.abs(cell.getBoundingClientRect().left - boxLeft) <= 1.5);
    const last = [...table.querySelectorAll('tr')].map((row) => row.lastElementChild).filter(Boolean);
    const boxRight = box.getBoundingClientRect().right;
    t.lastColumnReached = last.every((cell) => cell.getBoundingClientRect().right <= boxRight + 1.5);
  }
  for (const {box} of scrolled) box.scrollLeft = 0;
  if (scrolled.length) await nextFrame();
  // The cues fade in and out (site.css: a 0.15 s transition): read the equations' cues once they have settled.
  // (Polled: Chromium leaves the ``finished`` promise of a reversed transition pending.)
  const fading = () => document.getAnimations().some((a) => a instanceof CSSTransition && a.playState === 'running');
  for (let i = 0; i < 120 && fading(); i++) await nextFrame();
  const equations = [...document.querySelectorAll('.bd-article mjx-container[display="true"]')].map((eq) => {
    const outer = frame(eq), box = outer && outer.querySelector('.site-scroll__box');
    const e = {framed: Boolean(box)};
    if (box) {
      e.scrollable = ['auto', 'scroll'].includes(getComputedStyle(box).overflowX);
      e.hidden = box.scrollWidth - box.clientWidth;
      e.start = state(outer);
      e.focusable = box.getAttribute('tabindex') === '0';
      e.cueOpacity = getComputedStyle(outer, '::after').opacity;
      e.clipped = eq.scrollWidth - eq.clientWidth;  // the equation's own box must not cut it
    }
    return e;
  });
  const se = document.scrollingElement;
  const wide = [...document.querySelectorAll('.bd-article *')]
    .filter((el) => el.getBoundingClientRect().right > se.clientWidth + 1)
    .filter((el) => !el.parentElement.closest('.site-scroll__box, pre, .highlight, .mp-view, mjx-container'))
    .slice(0, 5).map((el) => `${el.tagName}.${el.className}: ${(el.textContent || '').slice(0, 50)}`);
  return {scrollWidth: se.scrollWidth, clientWidth: se.clientWidth, wide, tables, equations};
}"""


# Every math element of the text is typeset (math in a table output, $...$ in a DataFrame cell, is typeset too, so
# there may be more typeset elements than text math), and every typeset element carries the hidden MathML.
MATH_JS = """() => ({
  math: document.querySelectorAll('.bd-article .math').length,
  untypeset: [...document.querySelectorAll('.bd-article .math')].filter(e => !e.querySelector('mjx-container')).length,
  typeset: document.querySelectorAll('.bd-article mjx-container').length,
  errors: document.querySelectorAll('mjx-merror').length,
  spoken: document.querySelectorAll('.bd-article mjx-container mjx-assistive-mml').length,
})"""
WIDE_WIDGETS_JS = """w => [...document.querySelectorAll('.mp-widget')]
  .filter(e => e.getBoundingClientRect().right > w + 0.5).map(e => e.id)"""
# What every exercise does before a prediction, in one pass over the page: Check is disabled, Enter on an empty box
# shows a hint and no answer ("Choose a prediction first" where the prediction is one of the choices), "Show me" says
# the prediction was skipped.
WAITS_JS = """() => [...document.querySelectorAll('.mp-exercise')].map(ex => {
    const box = ex.querySelector('.mp-prediction'), check = ex.querySelector('.mp-check'),
          show = ex.querySelector('.mp-show'), ans = ex.querySelector('.mp-answer');
    if (show.disabled) return [ex.id, 'invalid at its defaults', ans.textContent];
    box.value = ''; box.dispatchEvent(new Event('input'));
    const disabled = check.disabled;
    box.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter'}));
    const hint = ans.textContent;
    show.click();
    const shown = ans.firstChild ? ans.firstChild.textContent : '';
    const word = box.getAttribute('role') === 'radiogroup';  // a word answer's choices: "Choose ..."
    return [ex.id, disabled, word ? hint.replace('Choose', 'Type') : hint,
            shown.startsWith('You skipped the prediction. The library says ')];
})"""


@pytest.fixture(scope="module")
def reports(chromium):
    """Layout report of every page at a width, computed once per width: {width: {page: report}}."""
    cache: dict[int, dict[str, dict]] = {}

    def get(width: int) -> dict[str, dict]:
        if width not in cache:
            pages = {}
            with visit(chromium, width) as v:
                for relpath in _pages():
                    v.open(relpath)
                    report = v.page.evaluate(REPORT_JS)
                    report["files"] = v.loaded_files()
                    report["console_errors"] = list(v.console_errors)
                    report["math"] = v.page.evaluate(MATH_JS)
                    report["wide_widgets"] = v.page.evaluate(WIDE_WIDGETS_JS, width)
                    report["waits"] = v.page.evaluate(WAITS_JS)  # last: it presses the exercises' buttons
                    pages[relpath] = report
            assert CHAPTER in pages
            cache[width] = pages
        return cache[width]

    return get


FOCUS_JS = """() => { const e = document.activeElement, c = getComputedStyle(e);
  const ring = c.outlineStyle !== 'none' && parseFloat(c.outlineWidth) >= 2;
  const shadow = c.boxShadow !== 'none' && /[1-9]\\d*px/.test(c.boxShadow);
  return {inArticle: !!e.closest('.bd-article'), what: e.tagName + ' ' + (e.getAttribute('aria-label') ||
          (e.textContent || '').trim().slice(0, 30)), visible: ring || shadow}; }"""


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_every_control_before_the_article_shows_a_focus_ring(chromium, width):
    """Tab from the top of a chapter to its article: each control the keyboard lands on (skip link, search, menu
    links, the sidebar toggle, download, full screen, colour mode) draws a ring of at least 2 px or a shadow."""
    with visit(chromium, width) as v:
        v.open(CHAPTER)
        missing = []
        for _ in range(60):
            v.page.keyboard.press("Tab")
            f = v.page.evaluate(FOCUS_JS)
            if f["inArticle"]:
                break
            if not f["visible"]:
                missing.append(f["what"])
        assert missing == []


def test_every_relative_link_resolves():
    """Every relative link to a page of the site (the menu, the prose's cross-references, the evolution map's cards,
    the planner's) names a page that was built."""
    broken = []
    for relpath in _pages():
        path = SITE / relpath
        for href in re.findall(r'href="([^"#:?]+\.html)(?:#[^"]*)?"', path.read_text(encoding="utf-8")):
            if not (path.parent / unquote(href)).resolve().is_file():
                broken.append(f"{relpath}: {href}")
    assert broken == []


def test_chapters_are_numbered_as_the_prose_counts_them():
    """The prose says "chapter N" for notebooks/0N_...: the menu and each chapter's title carry that number, the map
    before them and the tools after them none."""
    numbers = toc_numbers()
    assert numbers == {f: int(Path(f).name[:2]) for f in toc_files() if re.match(r"notebooks/(0[1-9]|10)_", f)}
    for name in toc_files():
        relpath = f"{name}.html"
        _require_site()
        page = (SITE / relpath).read_text(encoding="utf-8")
        h1 = next((h for h in re.findall(r"<h1>(.*?)</h1>", page, re.S) if 'class="headerlink"' in h), None)
        assert h1, relpath  # the article's title (the page's header repeats it without the number)
        number = re.match(r'<span class="section-number">(\d+)\. </span>', h1)
        assert (int(number.group(1)) if number else None) == numbers.get(name), relpath


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_no_page_scrolls_sideways(reports, width):
    problems = [
        f"{page}: {r['scrollWidth']} px wide in a {r['clientWidth']} px window; sticking out: {r['wide']}"
        for page, r in reports(width).items()
        if r["scrollWidth"] > r["clientWidth"]
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_wide_tables_scroll_in_a_frame_with_a_cue_and_a_fixed_first_column(reports, width):
    problems, scrolling = [], 0
    for page, r in reports(width).items():
        for t in r["tables"]:
            where = f"{page} [{t['text']!r}]"
            if not (t["framed"] and t["scrollable"]):
                problems.append(f"{where}: not in a scrolling frame")
                continue
            if t["hidden"] > 1:
                scrolling += 1
                if not (t["start"] == {"overflows": True, "left": False, "right": True} and t["hint"]):
                    problems.append(f"{where}: {t['hidden']} px hidden but no cue ({t['start']}, hint {t['hint']})")
                if t["end"] != {"overflows": True, "left": True, "right": False}:
                    problems.append(f"{where}: scrolled to the end, cue {t['end']}")
                if not (t["sticky"] and t["firstColumnHeld"]):
                    problems.append(f"{where}: first column not held in place")
                if not t["lastColumnReached"]:
                    problems.append(f"{where}: last column still cut off after scrolling to the end")
                if not t["focusable"]:
                    problems.append(f"{where}: scrolls, but not from the keyboard")
            elif t["start"]["overflows"] or t["start"]["right"] or t["hint"] or t["focusable"]:
                problems.append(f"{where}: fits, yet shows a scroll cue {t['start']} or takes a tab stop")
    assert not problems, "\n".join(problems)
    if width == PHONE:
        assert scrolling > 0, "no table is wider than a phone: the cue and the fixed column went untested"


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_display_equations_scroll_visibly(reports, width):
    problems, scrolling, seen = [], 0, 0
    for page, r in reports(width).items():
        for i, e in enumerate(r["equations"]):
            seen += 1
            where = f"{page} equation {i}"
            if not (e["framed"] and e["scrollable"]):
                problems.append(f"{where}: not in a scrolling frame")
                continue
            if e["clipped"] > 1:
                problems.append(f"{where}: its own box cuts {e['clipped']} px off")
            if e["hidden"] > 1:
                scrolling += 1
                if not (e["start"]["right"] and e["cueOpacity"] == "1" and e["focusable"]):
                    problems.append(f"{where}: {e['hidden']} px to scroll, no visible cue or tab stop ({e})")
            elif e["start"]["right"] or e["focusable"]:
                problems.append(f"{where}: fits, yet shows a scroll cue or takes a tab stop")
    assert seen > 0, "no display equation on any page"
    assert not problems, "\n".join(problems)
    if width == PHONE:
        assert scrolling > 0, "no equation is wider than a phone: the cue went untested"


def test_pages_load_light(reports):
    """Weight per page at 1366 px: the theme's extras are gone and what is left stays within budget."""
    problems = []
    for page, r in reports(DESKTOP).items():
        files = r["files"]
        names = set(files)
        own = {f for f in names if f == page or f.startswith("_images/")}
        if page == "search.html":
            own |= {"searchindex.js", "_static/searchtools.js", "_static/language_data.js"}
        mathjax = {f for f in names if f.startswith("_static/mathjax/")}
        chrome = sum(files[f] for f in names - own - mathjax)
        if any("fontawesome" in f for f in names):
            problems.append(f"{page}: loads Font Awesome: {sorted(f for f in names if 'fontawesome' in f)}")
        if page != "search.html" and names & {"searchindex.js", "_static/searchtools.js"}:
            problems.append(f"{page}: loads the search index outside the search page")
        if any(f.endswith(".js") for f in mathjax):
            problems.append(f"{page}: runs MathJax: {sorted(f for f in mathjax if f.endswith('.js'))}")
        if bool(mathjax) != _has_math(page):
            problems.append(f"{page}: MathJax fonts loaded: {bool(mathjax)}, math on the page: {_has_math(page)}")
        if chrome > CHROME_BUDGET:
            problems.append(f"{page}: {chrome:,} B of theme and scripts (budget {CHROME_BUDGET:,} B)")
        if sum(files[f] for f in mathjax) > MATHJAX_BUDGET:
            problems.append(f"{page}: {sum(files[f] for f in mathjax):,} B of MathJax (budget {MATHJAX_BUDGET:,})")
        if r["console_errors"]:
            problems.append(f"{page}: console errors {r['console_errors']}")
    assert not problems, "\n".join(problems)
    assert any(_has_math(p) for p in reports(DESKTOP)), "no page has math: the MathJax checks went untested"


def test_math_is_typeset_for_screens_and_screen_readers(reports):
    math_pages = [p for p in reports(DESKTOP) if _has_math(p)]
    assert math_pages, "no page has math"
    for page in math_pages:
        counts = reports(DESKTOP)[page]["math"]
        assert counts["math"] > 0 and counts["untypeset"] == 0, (page, counts)
        assert counts["typeset"] >= counts["math"] and counts["spoken"] == counts["typeset"], (page, counts)
        assert counts["errors"] == 0, (page, counts)


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_every_exercise_waits_for_a_prediction_and_no_widget_is_wider_than_the_screen(reports, width):
    problems = []
    for page, r in reports(width).items():
        for ex_id, disabled, hint, *skipped in r["waits"]:
            if (disabled, hint, skipped) != (True, "Type a prediction first, or press Show me.", [True]):
                problems.append(f"{page} #{ex_id}: {disabled!r} {hint!r} {skipped!r}")
        problems += [f"{page} #{w} is wider than {width} px" for w in r["wide_widgets"]]
    assert not problems, problems


# -------------------------------------------------------------------------------------------------- navigation


@pytest.mark.parametrize("width", [PHONE, TABLET])
def test_menu_opens_the_table_of_contents_on_narrow_screens(chromium, width):
    with visit(chromium, width) as v:
        v.open(CHAPTER)
        page = v.page
        assert not page.locator("#pst-primary-sidebar").is_visible(), "the sidebar should start hidden"
        page.locator(".bd-header-article .primary-toggle").click()
        dialog = page.locator("#pst-primary-sidebar-modal")
        dialog.wait_for(state="visible", timeout=3_000)
        hrefs = dialog.locator("nav.bd-docs-nav a").evaluate_all("links => links.map(a => a.href)")
        reached = {Path(unquote(urlsplit(h).path)).resolve().relative_to(SITE).as_posix() for h in hrefs}
        assert set(_toc_pages()) <= reached | {CHAPTER}, f"missing from the menu: {set(_toc_pages()) - reached}"
        last = _toc_pages()[-1]
        dialog.locator(f"nav.bd-docs-nav a[href$='{Path(last).name}']").first.click()
        page.wait_for_url(f"**/{last}", timeout=5_000)


@pytest.mark.parametrize("width", [PHONE, TABLET])
def test_on_this_page_opens_on_narrow_screens(chromium, width):
    with visit(chromium, width) as v:
        v.open(CHAPTER)
        page = v.page
        button = page.locator(".bd-header-article .secondary-toggle")
        assert button.is_visible()
        button.click()
        dialog = page.locator("#pst-secondary-sidebar-modal")
        dialog.wait_for(state="visible", timeout=3_000)
        links = dialog.locator("nav.page-toc a").evaluate_all("links => links.map(a => a.hash)")
        sections = page.locator("article section > h2").evaluate_all("hs => hs.map(h => '#' + h.parentElement.id)")
        assert sections and set(sections) <= set(links), (sections, links)
        page.keyboard.press("Escape")
        dialog.wait_for(state="hidden", timeout=3_000)


def test_menu_collapses_the_sidebar_on_the_desktop(chromium):
    with visit(chromium, DESKTOP) as v:
        other_tab = v.context.new_page()  # another page of the site, open in a second tab
        other_tab.goto((SITE / NEXT_CHAPTER).as_uri(), wait_until="load")
        other_tab.wait_for_function("document.documentElement.dataset.site === 'ready'", timeout=10_000)
        v.open(CHAPTER)
        page = v.page
        sidebar = page.locator("#pst-primary-sidebar")
        button = page.locator(".bd-header-article .primary-toggle")
        article = page.locator(".bd-article-container")
        assert sidebar.is_visible() and button.get_attribute("aria-expanded") == "true"
        assert other_tab.locator("#pst-primary-sidebar").is_visible()
        before = article.bounding_box()["width"]
        button.click()
        assert not sidebar.is_visible(), "☰ did not collapse the sidebar"
        assert not page.locator("#pst-primary-sidebar-modal").is_visible(), "☰ opened a dialog instead"
        assert button.get_attribute("aria-expanded") == "false"
        assert article.bounding_box()["width"] > before + 100, "the text did not get the room"
        # the open tab follows the choice (a "storage" event), as a page does whose first read of the stored choice
        # came before the write: a browser may open the next page in another renderer process, whose read can come
        # before this page's write reaches storage (seen once in CI, with Chrome for Testing, before site.js
        # listened for the event)
        other_tab.locator("#pst-primary-sidebar").wait_for(state="hidden", timeout=5_000)
        assert other_tab.locator(".bd-header-article .primary-toggle").get_attribute("aria-expanded") == "false"
        other_tab.close()
        # the choice is kept across pages: follow the "next" link, as a reader does
        page.locator("a.right-next").click()
        page.wait_for_url(f"**/{NEXT_CHAPTER}")
        page.wait_for_function("document.documentElement.dataset.site === 'ready'", timeout=10_000)
        page.locator("#pst-primary-sidebar").wait_for(state="hidden", timeout=5_000)
        toggle = page.locator(".bd-header-article .primary-toggle")
        assert toggle.get_attribute("aria-expanded") == "false"
        toggle.click()
        assert page.locator("#pst-primary-sidebar").is_visible(), "☰ did not bring the sidebar back"
        assert toggle.get_attribute("aria-expanded") == "true"
        # a page shown again from the back-forward cache shows the choice made since on another page: the stored
        # value changes behind this page's back (a write by this very document fires no "storage" event here), then
        # the browser's restore event (Playwright turns the cache off, and file:// pages never enter it: the event is
        # dispatched as Chromium dispatches it on a restore)
        page.evaluate(
            """() => {
              localStorage.setItem("site-nav-collapsed", "1");
              window.dispatchEvent(new PageTransitionEvent("pageshow", {persisted: true}));
            }"""
        )
        assert not page.locator("#pst-primary-sidebar").is_visible(), "a restored page kept a stale sidebar"
        assert toggle.get_attribute("aria-expanded") == "false"


# ---------------------------------------------------------------------------------------------------- figures


def _figure_page() -> str:
    for page in _pages():
        if 'class="cell_output' in (text := (SITE / page).read_text(encoding="utf-8")) and "<img" in text:
            return page
    pytest.fail("no page has a figure in a cell output")


@pytest.mark.parametrize("width", [PHONE, DESKTOP])
def test_figures_enlarge_on_click(chromium, width):
    page_path = _figure_page()
    with visit(chromium, width) as v:
        v.open(page_path)
        page = v.page
        figures = page.locator(".bd-article .cell_output img")
        zoomable = page.locator(".bd-article .cell_output img.site-zoomable")
        assert zoomable.count() == figures.count() > 0
        figure = zoomable.first
        figure.scroll_into_view_if_needed()
        small = figure.bounding_box()["width"]
        figure.click()
        dialog = page.locator("dialog.site-lightbox")
        dialog.wait_for(state="visible", timeout=3_000)
        big = dialog.locator("img")
        natural = big.evaluate("img => img.naturalWidth")
        assert big.get_attribute("src").split("/")[-1] == figure.get_attribute("src").split("/")[-1]
        fitted = big.bounding_box()["width"]
        assert fitted <= width, (small, fitted, natural)
        if width == PHONE:
            # on a phone the text shows the figure at its own size, scrolling sideways (test_browser_figures.py);
            # the dialog first shows all of it at once, then its own size
            assert abs(small - natural) <= 1 and fitted < small, (small, fitted, natural)
        else:
            assert fitted >= min(small, natural) - 1, (small, fitted, natural)
        big.click()  # actual size
        assert abs(big.bounding_box()["width"] - natural) <= 1
        page.keyboard.press("Escape")
        dialog.wait_for(state="hidden", timeout=3_000)
        figure.focus()
        page.keyboard.press("Enter")
        dialog.wait_for(state="visible", timeout=3_000)


# -------------------------------------------------------------------------------------------------- dark mode


def _luminance(rgb: tuple[float, float, float]) -> float:
    def channel(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


CELL_COLOURS_JS = r"""() => {
  const rgb = (s) => (s.match(/[\d.]+/g) || []).map(Number);
  const background = (el) => {
    for (; el; el = el.parentElement) {
      const c = rgb(getComputedStyle(el).backgroundColor);
      if (c.length === 3 || c[3] > 0.99) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  return [...document.querySelectorAll('.bd-article table td, .bd-article table th')]
    .filter((cell) => cell.innerText.trim() && !cell.closest("[class^='mp-'], [class*=' mp-']"))
    .slice(0, 60)
    .map((cell) => ({text: cell.innerText.trim().slice(0, 30), fg: rgb(getComputedStyle(cell).color).slice(0, 3),
                     bg: background(cell)}));
}"""


def _first_page_with(marker: str) -> str:
    for page in _pages():
        if marker in (SITE / page).read_text(encoding="utf-8"):
            return page
    pytest.fail(f"no page has {marker!r}")


def test_dark_mode_keeps_figures_and_tables_readable(chromium):
    # One page of each kind: a figure, a notebook's DataFrame, a Markdown table (each kind is styled alike).
    pages = dict.fromkeys([_figure_page(), _first_page_with('class="dataframe'), _first_page_with('class="table')])
    with visit(chromium, DESKTOP, dark=True) as v:
        for page_path in pages:
            v.open(page_path)
            page = v.page
            assert page.evaluate("document.documentElement.dataset.theme") == "dark"
            for img in page.locator(".bd-article .cell_output img").all():
                style = img.evaluate("i => [getComputedStyle(i).backgroundColor, getComputedStyle(i).filter]")
                assert style == ["rgb(255, 255, 255)", "brightness(0.9)"], (page_path, style)
            low = [
                (c["text"], round(_contrast(c["fg"], c["bg"]), 1))
                for c in page.evaluate(CELL_COLOURS_JS)
                if _contrast(c["fg"], c["bg"]) < 4.5
            ]
            assert not low, f"{page_path}: table text below WCAG AA contrast in dark mode: {low[:5]}"


# ----------------------------------------------------------------------------------------------------- search


def test_search_works_offline(chromium):
    with visit(chromium, DESKTOP) as v:
        v.open("search.html", "?q=pipeline")
        page = v.page
        page.wait_for_function(
            "() => /Search finished/.test((document.querySelector('#search-results .search-summary') || {}).innerText)",
            timeout=15_000,
        )
        results = page.locator("#search-results ul.search li a").evaluate_all("links => links.map(a => a.href)")
        assert any(r.split("#")[0].endswith("notebooks/05_pipeline_parallel.html") for r in results), results
        assert page.locator(".site-search-note").is_visible(), "the page does not say why there are no snippets"
        fetched_pages = [u for u in v.loaded if u.split("?")[0].endswith(".html") and "search.html" not in u]
        assert fetched_pages == [], f"snippets were fetched under file://: {fetched_pages[:3]}"
        assert v.console_errors == [], v.console_errors


def test_pages_have_no_dead_toggle_buttons():
    """pydata-sphinx-theme wires only the first .primary-toggle / .secondary-toggle of a page (its issue #2451):
    each page must carry exactly one of each, the visible one in the article header."""
    problems = []
    for page in _pages():
        text = (SITE / page).read_text(encoding="utf-8")
        for kind in ("primary-toggle", "secondary-toggle"):
            n = len(re.findall(rf'class="[^"]*\b{kind}\b', text))
            if n > 1 or (kind == "primary-toggle" and n == 0):
                problems.append(f"{page}: {n} .{kind} buttons")
    assert not problems, "\n".join(problems)
