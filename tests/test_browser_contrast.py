"""Every text of the site is legible in the light and the dark theme, and in "auto" (the reader's system setting):
WCAG 2.x contrast of at least 4.5:1 between a text's colour and what lies behind it, 3:1 for large text (24 px, or
18.66 px bold).

Every page of _toc.yml, and Sphinx's index and search pages, is opened once at 1366 px; every exercise shows its
answer and every plan checker its report first (``REVEAL_JS``), so that answers, explanations and pass/fail lines
are measured too. The measure runs in the page (``CONTRAST_JS``) in the light theme, then again after switching the
page to the dark theme as the theme's switch does (``data-mode`` and ``data-theme`` on ``<html>``, nothing
reloaded). For each visible text (every text node's element, the text of form fields and their placeholders, the
labels of the widgets' SVG drawings) it takes the computed colour and composites what is behind it: the
backgrounds of its ancestors, the opacity of every ancestor, and inside an SVG the shapes drawn under the text (a
shape filled with a pattern, such as the pipeline explorer's hatching, must read both with and without the
pattern's marks). Text over a picture or a gradient has no single background: such texts are counted as unresolved
and their number is kept small (``MAX_UNRESOLVED``; none today). Texts of disabled controls are left out (WCAG
exempts inactive components). "auto" follows the system's colour scheme: a context whose system is dark
(Playwright's ``color_scheme``) gets the dark theme. A phone, scrolled, shows the theme's "Back to top" as well.
Text inside the figures' pictures (matplotlib PNGs) is not text to the browser: site.css keeps those on white paper
in dark mode (tests/test_site_layout.py checks).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import CHROMIUM, SITE_DIR, offline_context, require_site, shared_chromium, toc_files

REPO_ROOT = Path(__file__).resolve().parents[1]
VIEWPORT = {"width": 1366, "height": 900}
MAX_UNRESOLVED = 5  # texts per page and theme over a picture or gradient
AUTO_PAGE = "notebooks/05_pipeline_parallel.html"  # the pipeline explorer: SVG labels over coloured bars
SPHINX_PAGES = ("genindex.html", "search.html")
PHONE = {"width": 390, "height": 844}
PHONE_PAGE = "notebooks/08_4d_lab.html"  # the plan checkers and the device grids

# Runs in the page; returns {failures: [...], unresolved: [...], measured: n}. A failure is one element's text with
# its colours, the ratio and the threshold that applies.
CONTRAST_JS = r"""() => {
  // The theme's colours fade (CSS transitions) after a switch, and after the first paint in "auto": measure where
  // they end.
  for (const a of document.getAnimations()) if (a instanceof CSSTransition) a.finish();
  const canvas = document.createElement('canvas');
  canvas.width = canvas.height = 1;
  const ctx = canvas.getContext('2d', {willReadFrequently: true});
  const parsed = new Map();
  // A CSS colour as [r, g, b, a] (0-255, alpha 0-1); null when it is not a plain colour (url(), none).
  const colour = (text) => {
    if (parsed.has(text)) return parsed.get(text);
    let out = null;
    const m = /^rgba?\(([\d.]+),\s*([\d.]+),\s*([\d.]+)(?:,\s*([\d.]+))?\)$/.exec(text);
    if (m) out = [+m[1], +m[2], +m[3], m[4] === undefined ? 1 : +m[4]];
    else if (text && text !== 'none' && !text.startsWith('url(')) {
      ctx.clearRect(0, 0, 1, 1);
      ctx.fillStyle = 'rgba(0, 0, 0, 0)';
      ctx.fillStyle = text;
      ctx.fillRect(0, 0, 1, 1);
      const d = ctx.getImageData(0, 0, 1, 1).data;
      out = [d[0], d[1], d[2], d[3] / 255];
    }
    parsed.set(text, out);
    return out;
  };
  const over = (top, below, alpha = 1) => {  // source-over of a colour on an opaque one
    const a = top[3] * alpha;
    return [0, 1, 2].map((i) => top[i] * a + below[i] * (1 - a));
  };
  const lum = (c) => {
    const [r, g, b] = c.map((v) => { v /= 255; return v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const canvasColour = colour(getComputedStyle(document.documentElement).colorScheme.includes('dark')
    ? 'rgb(18, 18, 18)' : 'rgb(255, 255, 255)');

  // What lies behind `el`'s text: the layers of its ancestors (root first), each a background colour and the
  // element's opacity; SVG shapes under an SVG text join as layers of the <svg>. null: a picture or gradient.
  const layers = (el, svgUnder) => {
    const chain = [];
    for (let e = el; e; e = e.parentElement) chain.push(e);
    chain.reverse();
    const out = [];
    for (const e of chain) {
      const cs = getComputedStyle(e);
      const layer = {opacity: parseFloat(cs.opacity), fills: []};
      if (!(e instanceof SVGElement)) {
        const bg = colour(cs.backgroundColor);
        if (cs.backgroundImage !== 'none') layer.image = true;
        if (bg && bg[3] > 0) layer.fills.push(bg);
        if (e.tagName === 'IMG' || e.tagName === 'VIDEO' || e.tagName === 'CANVAS') layer.image = true;
      }
      if (e.tagName.toLowerCase() === 'svg' && svgUnder) {
        for (const f of svgUnder) { if (f === null) layer.image = true; else layer.fills.push(f); }
      }
      out.push(layer);
    }
    // a picture or gradient counts only where no opaque fill above it hides it
    let hidden = false;
    for (let i = out.length - 1; i >= 0; i--) {
      if (out[i].image && !hidden) return null;
      if (out[i].fills.some((f) => !f.alts && f[3] >= 1)) hidden = true;
    }
    return out;
  };
  // Paint one pixel through the layers: with the text on top (`text`), or without (the background).
  const paint = (ls, text) => {
    let c = canvasColour.slice(0, 3);
    const groups = [];
    for (const l of ls) {
      if (l.opacity < 1) { groups.push([c, l.opacity]); }
      for (const f of l.fills) c = over(f, c);
    }
    if (text) c = over(text, c);
    for (let i = groups.length - 1; i >= 0; i--) {
      const [below, o] = groups[i];
      c = c.map((v, k) => v * o + below[k] * (1 - o));
    }
    return c;
  };
  // The shapes of an SVG drawn under one of its texts (before it, covering its centre), as fills; a shape filled
  // with a pattern gives the alternatives [nothing, each of the pattern's fills] (the text must read on each).
  const fillOf = (shape) => {
    const cs = getComputedStyle(shape);
    if (cs.fill === 'none') return undefined;
    const alpha = parseFloat(cs.fillOpacity) * parseFloat(cs.opacity);
    const url = /^url\("?#([^")]+)"?\)/.exec(cs.fill);
    if (url) {
      const pattern = document.getElementById(url[1]);
      if (!pattern || pattern.tagName !== 'pattern') return null;
      const alts = [null];
      for (const part of pattern.querySelectorAll('rect, circle, ellipse, polygon, path')) {
        const f = fillOf(part);
        if (f === null || (f && f.alts)) return null;
        if (f) alts.push([f[0], f[1], f[2], f[3] * alpha]);
      }
      return {alts};
    }
    const f = colour(cs.fill);
    return f && [f[0], f[1], f[2], f[3] * alpha];
  };
  const drawings = new Map();  // svg -> its shapes in drawing order: {rect, fill}, and the order of its elements
  const svgUnder = (text) => {
    const svg = text.ownerSVGElement;
    if (!svg) return [];
    if (!drawings.has(svg)) {
      const order = new Map(), shapes = [];
      for (const e of svg.querySelectorAll('*')) {
        order.set(e, order.size);
        if (!e.matches('rect, circle, ellipse, polygon, path') || e.closest('defs, pattern, clipPath, mask, marker')) {
          continue;
        }
        const fill = fillOf(e);
        if (fill !== undefined) shapes.push({at: order.get(e), rect: e.getBoundingClientRect(), fill});
      }
      drawings.set(svg, {order, shapes});
    }
    const {order, shapes} = drawings.get(svg), at = order.get(text);
    const r = text.getBoundingClientRect(), x = r.left + r.width / 2, y = r.top + r.height / 2;
    return shapes.filter((s) => s.at < at && x >= s.rect.left && x <= s.rect.right && y >= s.rect.top
      && y <= s.rect.bottom).map((s) => s.fill);
  };
  // Every way the layers can be painted (one per choice among a pattern's alternatives).
  const variants = (ls) => {
    let out = [[]];
    for (const l of ls) {
      let fillSets = [[]];
      for (const f of l.fills) {
        const options = f.alts || [f];
        fillSets = fillSets.flatMap((set) => options.map((o) => (o ? [...set, o] : set)));
      }
      out = out.flatMap((prefix) => fillSets.map((fills) => [...prefix, {opacity: l.opacity, fills}]));
    }
    return out;
  };
  const inactive = (el) => Boolean(el.closest(':disabled, [aria-disabled="true"], [inert]'));
  const visibleBox = (rects) => [...rects].some((r) => r.width > 2 && r.height > 2 && r.right > 0 && r.bottom > 0
    && r.left < document.documentElement.scrollWidth);
  const seen = new Set(), failures = [], unresolved = [];
  let measured = 0;
  const measure = (el, fg, label, rects) => {
    const cs = getComputedStyle(el);
    const size = parseFloat(cs.fontSize), bold = parseInt(cs.fontWeight, 10) >= 700;
    const min = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
    const ls = layers(el, el instanceof SVGElement ? svgUnder(el) : null);
    const where = `${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}${el.getAttribute('class')
      ? '.' + el.getAttribute('class').trim().split(/\s+/).join('.') : ''}`;
    const top = rects[0] ? Math.round(rects[0].top + window.scrollY) : 0;
    if (!ls || !fg) { unresolved.push({where, text: label, top}); return; }
    measured++;
    let text, back, r = Infinity;
    for (const v of variants(ls)) {
      const t = paint(v, fg), b = paint(v, null), q = ratio(t, b);
      if (q < r) [text, back, r] = [t, b, q];
    }
    if (r < min) {
      const hex = (c) => '#' + c.map((v) => Math.round(v).toString(16).padStart(2, '0')).join('');
      failures.push({where, text: label, ratio: Math.round(r * 100) / 100, min, fg: hex(text), bg: hex(back),
                     size, top, widget: Boolean(el.closest('.mp-widget, .mp-evomap'))});
    }
  };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!el || seen.has(el) || !node.textContent.trim()) continue;
    if (el.closest('script, style, noscript, template, option, optgroup, title')) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    const rects = range.getClientRects();
    if (!visibleBox(rects)) continue;
    if (!el.checkVisibility({opacityProperty: true, visibilityProperty: true})) continue;
    seen.add(el);
    if (inactive(el)) continue;
    const cs = getComputedStyle(el);
    const fg = colour(el instanceof SVGElement ? cs.fill : cs.color);
    const alpha = el instanceof SVGElement ? parseFloat(cs.fillOpacity) : 1;
    measure(el, fg && [fg[0], fg[1], fg[2], fg[3] * alpha], node.textContent.trim().slice(0, 60), rects);
  }
  // Form fields: their value's text (a select shows its chosen option) or, when empty, the placeholder.
  for (const el of document.querySelectorAll('input, select, textarea')) {
    if (['range', 'checkbox', 'radio', 'hidden', 'color', 'file', 'image'].includes(el.type)) continue;
    const rects = el.getClientRects();
    if (!visibleBox(rects) || !el.checkVisibility({opacityProperty: true, visibilityProperty: true})) continue;
    if (inactive(el)) continue;
    const empty = el.tagName !== 'SELECT' && !el.value;
    if (empty && !el.placeholder) continue;
    const cs = empty ? getComputedStyle(el, '::placeholder') : getComputedStyle(el);
    const label = empty ? `placeholder: ${el.placeholder}` : (el.tagName === 'SELECT'
      ? (el.selectedOptions[0] || {}).textContent || '' : el.value);
    measure(el, colour(cs.color), label.trim().slice(0, 60), rects);
  }
  return {failures, unresolved, measured};
}"""

# Before measuring, every exercise shows its answer ("Show me") and every checklist its report (its Check), so that the
# answers, explanations and pass/fail lines are measured too; the first widget of a page also gets one line of each
# state a control can put it in (pass, fail, invalid), as the widgets write them.
REVEAL_JS = """() => {
  let shown = 0;
  for (const widget of document.querySelectorAll('.mp-widget')) {
    const show = widget.querySelector('.mp-show'), check = widget.querySelector('.mp-check');
    if (show) { if (!show.disabled) { show.click(); shown++; } }
    else if (check && !check.disabled) { check.click(); shown++; }
  }
  const answer = document.querySelector('.mp-widget .mp-answer');
  if (answer) {
    for (const [cls, text] of [['mp-pass', '\u2713 a check that passes'], ['mp-fail', '\u2717 a check that fails'],
                               ['mp-invalid', 'Not a valid combination: a sample']]) {
      const line = document.createElement('div');
      line.className = cls;
      line.textContent = text;
      answer.append(line);
    }
  }
  return shown;
}"""
SET_THEME_JS = """mode => { const html = document.documentElement;
  localStorage.setItem('mode', mode); localStorage.setItem('theme', mode);
  html.dataset.mode = mode; html.dataset.theme = mode; return getComputedStyle(document.body).backgroundColor; }"""
READY_JS = "document.documentElement.dataset.site === 'ready' && document.documentElement.dataset.siteMath === 'ready'"


def _toc_pages() -> list[str]:
    """The pages of _toc.yml, as built HTML paths."""
    return [f"{name}.html" for name in toc_files()]


def _site_pages() -> list[str]:
    """Every page a reader can open: the toc's, then Sphinx's index and search pages."""
    return [*_toc_pages(), *(name for name in SPHINX_PAGES if (SITE_DIR / name).is_file())]


def _stored_mode(mode: str) -> str:
    """An init script that stores the reader's choice of theme before the page's own script reads it."""
    return f"try {{ localStorage.setItem('mode', '{mode}'); localStorage.setItem('theme', '{mode}'); }} catch (e) {{}}"


def _describe(page: str, theme: str, report: dict) -> list[str]:
    return [
        f"{page} [{theme}] {f['ratio']}:1 < {f['min']}:1 {f['fg']} on {f['bg']} {f['size']}px {f['where']}: "
        f"{f['text']!r}"
        for f in report["failures"]
    ]


@pytest.fixture(scope="module")
def chromium():
    require_site(_toc_pages()[0])
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: run `make chromium`")
    return shared_chromium()


def _open(context, relpath: str, errors: list[str]):
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(f"{relpath}: {exc}"))
    page.goto((SITE_DIR / relpath).as_uri(), wait_until="load")
    page.wait_for_function(READY_JS, timeout=20_000)
    return page


def measure_site(pages: list[str]) -> dict[tuple[str, str], dict]:
    """{(page, theme): report} for ``pages`` in the light and the dark theme, in one context of the shared Chromium."""
    context, blocked = offline_context(viewport=VIEWPORT, color_scheme="light")
    context.add_init_script(_stored_mode("light"))
    errors: list[str] = []
    out = {}
    try:
        for relpath in pages:
            page = _open(context, relpath, errors)
            assert page.evaluate("document.documentElement.dataset.theme") == "light"
            page.evaluate(REVEAL_JS)
            out[relpath, "light"] = page.evaluate(CONTRAST_JS)
            page.evaluate(SET_THEME_JS, "dark")
            out[relpath, "dark"] = page.evaluate(CONTRAST_JS)
            page.close()
    finally:
        context.close()
    assert blocked == [], f"requests outside the site: {blocked}"
    assert errors == [], errors
    return out


@pytest.fixture(scope="module")
def reports(chromium) -> dict[tuple[str, str], dict]:
    pages = _site_pages()
    for relpath in _toc_pages():
        require_site(relpath)
    return measure_site(pages)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_text_meets_wcag_contrast(reports, theme):
    problems = [line for (page, t), report in reports.items() if t == theme for line in _describe(page, t, report)]
    pages = {line.split(" ", 1)[0] for line in problems}
    assert not problems, (
        f"{len(problems)} texts below WCAG AA contrast on {len(pages)} pages in the {theme} theme:\n"
        + "\n".join(problems[:60])
    )


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_page_is_measured_and_few_texts_are_unresolved(reports, theme):
    for (page, t), report in reports.items():
        if t != theme:
            continue
        assert report["measured"] > 10, (page, report["measured"])
        assert len(report["unresolved"]) <= MAX_UNRESOLVED, (page, theme, report["unresolved"])


@pytest.mark.parametrize("system", ["light", "dark"])
def test_auto_follows_the_system_and_stays_legible(chromium, system):
    """No stored choice (the theme's default mode is "auto"): the page takes the system's scheme and meets the
    contrast in it."""
    require_site(AUTO_PAGE)
    context, blocked = offline_context(viewport=VIEWPORT, color_scheme=system)
    errors: list[str] = []
    try:
        page = _open(context, AUTO_PAGE, errors)
        html = page.evaluate("[document.documentElement.dataset.mode, document.documentElement.dataset.theme]")
        assert html == ["auto", system]
        page.evaluate(REVEAL_JS)
        report = page.evaluate(CONTRAST_JS)
    finally:
        context.close()
    assert blocked == [] and errors == [], (blocked, errors)
    assert report["measured"] > 50
    assert not report["failures"], "\n".join(_describe(AUTO_PAGE, f"auto, system {system}", report))


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_phone_scrolled_up_stays_legible(chromium, theme):
    """At 390 px, after scrolling down and back up a little, the theme shows what the desktop does not ("Back to
    top" over the text); a chapter with the plan checkers and the device grids meets the contrast there too."""
    require_site(PHONE_PAGE)
    context, blocked = offline_context(viewport=PHONE, color_scheme="light")
    context.add_init_script(_stored_mode(theme))
    errors: list[str] = []
    try:
        page = _open(context, PHONE_PAGE, errors)
        page.evaluate(REVEAL_JS)
        page.evaluate("window.scrollTo(0, 3000)")
        page.wait_for_timeout(50)
        page.evaluate("window.scrollTo(0, 2900)")  # the theme shows "Back to top" on scrolling up
        page.wait_for_function("getComputedStyle(document.getElementById('pst-back-to-top')).display !== 'none'")
        assert page.evaluate("document.documentElement.dataset.theme") == theme
        report = page.evaluate(CONTRAST_JS)
    finally:
        context.close()
    assert blocked == [] and errors == [], (blocked, errors)
    assert report["measured"] > 50 and len(report["unresolved"]) <= MAX_UNRESOLVED, report["unresolved"]
    assert not report["failures"], "\n".join(_describe(PHONE_PAGE, f"{theme}, 390 px", report))


def test_the_measure_sees_low_contrast(chromium, tmp_path):
    """The measure itself: on a page made for it, it finds the texts that fail (grey on grey, a faded group, an SVG
    label on a bar of its own colour, white on black under white hatching, a placeholder) and passes the ones that
    do not (large text at 3:1, a disabled button), and counts text on a gradient as unresolved."""
    path = tmp_path / "probe.html"
    path.write_text(
        "<!doctype html><html><body style='background:#fff;color:#000;font:16px sans-serif'>"
        "<p id=ok>black on white</p>"
        "<div style='background:#777'><p id=grey style='color:#888'>grey on grey</p></div>"
        "<div style='opacity:.3'><p id=faded>faded</p></div>"
        "<p id=large style='font-size:24px;color:#949494'>large grey</p>"
        "<p id=small style='font-size:16px;color:#949494'>small grey</p>"
        "<button disabled style='color:#ccc'>disabled</button>"
        "<div style='background:linear-gradient(#000,#fff)'><p id=gradient>on a gradient</p></div>"
        "<svg width=200 height=40 fill=currentColor><rect width=200 height=40 fill='#000'/>"
        "<text id=svg x=10 y=25>label</text></svg>"
        "<svg width=200 height=40><defs><pattern id=hatch width=6 height=6 patternUnits=userSpaceOnUse>"
        "<rect width=3 height=6 fill='#fff' fill-opacity=.9 /></pattern></defs>"
        "<rect width=200 height=40 fill='#000'/><rect width=200 height=40 fill='url(#hatch)'/>"
        "<text x=10 y=25 fill='#fff'>hatched</text></svg>"
        "<input placeholder='type here' style='color:#000'>"
        "<style>input::placeholder{color:#ddd}</style></body></html>",
        encoding="utf-8",
    )
    context, _ = offline_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.goto(path.as_uri())
        report = page.evaluate(CONTRAST_JS)
    finally:
        context.close()
    failed = sorted(f["text"] for f in report["failures"])
    assert failed == ["faded", "grey on grey", "hatched", "label", "placeholder: type here", "small grey"], report
    assert [u["text"] for u in report["unresolved"]] == ["on a gradient"]
