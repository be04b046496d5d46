/* The course site's small behaviours, on top of sphinx-book-theme 1.3.0 / pydata-sphinx-theme 0.17.1.
 * Plain JavaScript, no dependencies, nothing from the network; classes it adds start with "site-" (site.css).
 *
 *  1. ☰ collapses the primary sidebar on wide screens (the theme only opens it as a dialog, which is right for
 *     narrow screens and is left to the theme there); the choice is kept across pages and open tabs.
 *  2. Wide tables and display equations scroll inside a frame that shows, by a shadow at each edge, that there is
 *     more to see; a table that scrolls keeps its first column in place and says so above it.
 *  3. Figures open enlarged on click or Enter; in the enlarged view a click toggles actual size. On a narrow screen
 *     a figure keeps its own size (its text as on the desktop, at least 11 px) and scrolls sideways in a frame.
 *  4. Search under file://: result snippets are turned off (they fetch each page, which browsers refuse for local
 *     files), and the search page says so.
 *
 * This file runs in <head>, before the page is parsed: step 1 restores the sidebar state before the first paint
 * and step 4 runs before Sphinx's search starts; the rest waits for the DOM.
 */
(() => {
  "use strict";

  const root = document.documentElement;
  const WIDE = window.matchMedia("(min-width: 960px)");
  const NAV_KEY = "site-nav-collapsed";
  const onReady = (callback) => {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", callback);
    else callback();
  };
  const storage = {
    get(key) {
      try { return window.localStorage.getItem(key); } catch { return null; }
    },
    set(key, value) {
      try {
        if (value === null) window.localStorage.removeItem(key);
        else window.localStorage.setItem(key, value);
      } catch { /* storage disabled: the state lasts for this page only */ }
    },
  };

  /* ---- 1. Primary sidebar ---------------------------------------------------------------------------------- */
  // On wide screens the button shows or hides the sidebar (aria-expanded says which); on narrow ones it opens the
  // theme's dialog, which announces itself.
  const syncNavButtons = () => {
    const expanded = String(!root.classList.contains("site-nav-collapsed"));
    document.querySelectorAll(".primary-toggle").forEach((button) => {
      if (WIDE.matches) {
        button.setAttribute("aria-controls", "pst-primary-sidebar");
        button.setAttribute("aria-expanded", expanded);
      } else {
        button.removeAttribute("aria-controls");
        button.removeAttribute("aria-expanded");
      }
    });
  };
  const applyStoredNav = () => {
    root.classList.toggle("site-nav-collapsed", storage.get(NAV_KEY) === "1");
    syncNavButtons();
  };
  // The stored choice is read here, before the first paint, and again whenever this document may hold a stale copy
  // of it: when it is shown again from the back-forward cache (the reader changed the choice on a later page), and
  // when the stored value changes under it (a "storage" event): the reader changed it in another tab, or the write
  // from the page just left landed after this page read it (a browser may open the next page in another process,
  // whose first read can come before that write reaches storage; the write then arrives as a "storage" event).
  applyStoredNav();
  window.addEventListener("pageshow", (event) => { if (event.persisted) applyStoredNav(); });
  window.addEventListener("storage", (event) => { if (event.key === NAV_KEY || event.key === null) applyStoredNav(); });
  // Capture phase on the document: runs before the theme's own listener on the button, which opens the dialog.
  document.addEventListener("click", (event) => {
    const button = event.target instanceof Element ? event.target.closest(".primary-toggle") : null;
    if (!button || !WIDE.matches) return;
    event.preventDefault();
    event.stopImmediatePropagation();
    const collapsed = root.classList.toggle("site-nav-collapsed");
    storage.set(NAV_KEY, collapsed ? "1" : null);
    syncNavButtons();
  }, true);
  WIDE.addEventListener("change", syncNavButtons);

  /* ---- 2. Scroll frames ------------------------------------------------------------------------------------ */
  // A frame that scrolls is also a keyboard stop (arrow keys scroll it) with a name; one that fits is neither.
  const updateCue = (frame, box) => {
    const hidden = box.scrollWidth - box.clientWidth;
    const overflows = hidden > 1;
    if (overflows && !box.hasAttribute("tabindex")) {
      box.setAttribute("tabindex", "0");
      box.setAttribute("role", "region");
      box.setAttribute("aria-label", box.siteLabel);
    } else if (!overflows && box.hasAttribute("tabindex")) {
      ["tabindex", "role", "aria-label"].forEach((name) => box.removeAttribute(name));
    }
    frame.classList.toggle("site-overflows", overflows);
    frame.classList.toggle("site-more-left", overflows && box.scrollLeft > 1);
    frame.classList.toggle("site-more-right", overflows && box.scrollLeft < hidden - 1);
    const sticky = frame.querySelector(".site-sticky");
    frame.style.setProperty("--site-sticky-width", overflows && sticky ? `${sticky.offsetWidth}px` : "0px");
  };
  const resizes = "ResizeObserver" in window
    ? new ResizeObserver((entries) => entries.forEach((entry) => entry.target.siteUpdateCue()))
    : null;

  // Wrap `content` in <div class="site-scroll {kind}"><p hint/>?<div class="site-scroll__box">content</div></div>.
  const frame = (content, kind, hint, label) => {
    const outer = document.createElement("div");
    outer.className = `site-scroll ${kind}`;
    const box = document.createElement("div");
    box.className = "site-scroll__box";
    box.siteLabel = label;
    content.parentNode.insertBefore(outer, content);
    if (hint) {
      const note = document.createElement("p");
      note.className = "site-scroll__hint";
      note.setAttribute("aria-hidden", "true");
      note.textContent = hint;
      outer.append(note);
    }
    outer.append(box);
    box.append(content);
    box.siteUpdateCue = () => updateCue(outer, box);
    box.addEventListener("scroll", box.siteUpdateCue, { passive: true });
    if (resizes) {
      resizes.observe(box);
      resizes.observe(content);
      content.siteUpdateCue = box.siteUpdateCue;
    } else {
      window.addEventListener("resize", box.siteUpdateCue);
    }
    box.siteUpdateCue();
    return box;
  };

  const LONG_CELL = 40; // characters: a cell with more is prose and gets a readable minimum width
  const frameTables = () => {
    const tables = document.querySelectorAll(
      ".bd-article table.dataframe, .bd-article table.table, .bd-article table.docutils",
    );
    tables.forEach((table) => {
      // The exercise widgets (class names "mp-...") lay out their own tables.
      if (table.closest(".site-scroll, [class^='mp-'], [class*=' mp-']")) return;
      table.querySelectorAll("tr").forEach((row) => {
        const first = row.firstElementChild;
        if (first) first.classList.add("site-sticky");
      });
      table.querySelectorAll("td, th").forEach((cell) => {
        if (cell.textContent.trim().length > LONG_CELL) cell.classList.add("site-long");
      });
      const caption = table.querySelector("caption");
      frame(table, "site-table", "Scroll sideways for more columns \u2192",
        caption ? caption.textContent.trim() : "Table, scrolls sideways");
    });
  };

  const frameEquations = () => {
    document.querySelectorAll(".bd-article mjx-container[display='true']").forEach((equation) => {
      if (!equation.closest(".site-scroll")) frame(equation, "site-equation", "", "Equation, scrolls sideways");
    });
  };
  // The build typesets the math (scripts/typeset_math.js): the page then carries no MathJax and its math is
  // already there. A page that still loads MathJax (a build without that step) waits for it.
  const whenMathTypeset = (callback) => {
    const startup = window.MathJax && window.MathJax.startup;
    if (startup && startup.promise) startup.promise.then(callback);
    else if (window.MathJax) window.addEventListener("load", () => whenMathTypeset(callback), { once: true });
    else callback();
  };

  /* ---- 3. Figures ------------------------------------------------------------------------------------------ */
  let lightbox = null;
  const openLightbox = (img) => {
    if (!lightbox) {
      lightbox = document.createElement("dialog");
      lightbox.className = "site-lightbox";
      lightbox.setAttribute("aria-label", "Enlarged figure");
      lightbox.innerHTML =
        '<button type="button" class="site-lightbox__close" aria-label="Close">\u00d7</button>' +
        '<p class="site-lightbox__caption"></p><div class="site-lightbox__stage"><img alt=""></div>';
      document.body.append(lightbox);
      const big = lightbox.querySelector("img");
      lightbox.querySelector(".site-lightbox__close").addEventListener("click", () => lightbox.close());
      big.addEventListener("click", (event) => {
        event.stopPropagation();
        lightbox.classList.toggle("site-actual");
      });
      lightbox.addEventListener("click", () => lightbox.close()); // outside the picture
      // Sphinx's sphinx_highlight.js swallows Escape on the document, so the dialog handles it itself.
      lightbox.addEventListener("keydown", (event) => {
        if (event.key === "Escape") {
          event.preventDefault();
          event.stopPropagation();
          lightbox.close();
        }
      });
      lightbox.addEventListener("close", () => {
        lightbox.classList.remove("site-actual");
        if (lightbox.siteOpener) lightbox.siteOpener.focus();
      });
    }
    const big = lightbox.querySelector("img");
    big.src = img.currentSrc || img.src;
    big.alt = img.alt || "";
    lightbox.querySelector(".site-lightbox__caption").textContent =
      "Click the picture for actual size; Esc or \u00d7 to close.";
    lightbox.siteOpener = img;
    lightbox.showModal();
    lightbox.querySelector(".site-lightbox__close").focus();
  };
  const zoomableFigures = () => {
    document.querySelectorAll(".bd-article .cell_output img, .bd-article figure img").forEach((img) => {
      if (img.closest("a, [class^='mp-'], [class*=' mp-']")) return;
      img.classList.add("site-zoomable");
      img.tabIndex = 0;
      img.setAttribute("role", "button");
      img.setAttribute("aria-label", `Enlarge figure${img.alt ? `: ${img.alt}` : ""}`);
      img.addEventListener("click", () => openLightbox(img));
      // a frame to scroll it in where it keeps its own size (site.css: narrow screens); a figure that fits has no cue
      if (!img.closest(".site-scroll")) {
        frame(img, "site-figure", "Scroll sideways for the whole figure \u2192",
          img.alt ? `Figure, scrolls sideways: ${img.alt}` : "Figure, scrolls sideways");
      }
      img.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          openLightbox(img);
        }
      });
    });
  };

  /* ---- 4. Search under file:// ----------------------------------------------------------------------------- */
  /* global DOCUMENTATION_OPTIONS */ // Sphinx's, set by documentation_options.js on every page
  const LOCAL = window.location.protocol === "file:";
  if (LOCAL && typeof DOCUMENTATION_OPTIONS !== "undefined") DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = false;
  const noteSearch = () => {
    const results = document.getElementById("search-results");
    if (!LOCAL || !results) return;
    const note = document.createElement("p");
    note.className = "site-search-note";
    note.textContent =
      "Opened from local files, so results list page titles without text snippets; " +
      "serve the site (python -m http.server -d _build/html) to see snippets.";
    results.parentNode.insertBefore(note, results);
  };

  // data-site="ready" and data-site-math="ready" on <html> tell tests (and anyone curious) that the work is done.
  onReady(() => {
    syncNavButtons();
    frameTables();
    zoomableFigures();
    noteSearch();
    root.dataset.site = "ready";
    whenMathTypeset(() => {
      frameEquations();
      root.dataset.siteMath = "ready";
    });
  });
})();
