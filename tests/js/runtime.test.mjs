// The runtime's page logic: defined once per page and version, the controls' state with dependent ranges (the
// lookup key of the library's tables), mount, and the renderers' registration (once per page, under their kind).

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { fire, h } from "./dom.mjs";
import { newPage, pageScripts, run, runtimePage } from "./page.mjs";

const RENDERERS = { "exercise.js": "exercise", "checklist.js": "checklist", "grid.js": "grid", "timeline.js": "explorer" };

describe("the runtime is defined once per page", () => {
  test("a second copy of the same version keeps the first", () => {
    const { window, MP } = runtimePage();
    MP.kinds.mine = () => {};
    run({ window, document: window.document }, pageScripts()["runtime.js"]);
    assert.equal(window.__meshplan, MP);
    assert.ok(window.__meshplan.kinds.mine);
  });

  test("another version is replaced", () => {
    const page = newPage();
    page.window.__meshplan = { version: "0", kinds: { old: () => {} } };
    run(page, pageScripts()["runtime.js"]);
    assert.notEqual(page.window.__meshplan.version, "0");
    assert.deepEqual(Object.keys(page.window.__meshplan.kinds), []);
  });

  test("it offers what the renderers and the tests call", () => {
    const { MP } = runtimePage();
    for (const name of ["read", "compare", "reveal", "sentence", "grade", "fmtSig", "fmtFixed", "squash", "controls", "mount"])
      assert.equal(typeof MP[name], "function", name);
  });
});

describe("each renderer registers itself under its kind, once per page", () => {
  for (const [file, kind] of Object.entries(RENDERERS)) {
    test(file, () => {
      const page = runtimePage();
      run(page, pageScripts()[file]);
      assert.deepEqual(Object.keys(page.MP.kinds), [kind]);
      const first = page.MP.kinds[kind];
      assert.equal(typeof first, "function");
      run(page, pageScripts()[file]);
      assert.equal(page.MP.kinds[kind], first);
    });
  }

  test("without the runtime a renderer does nothing", () => {
    const page = newPage();
    for (const file of Object.keys(RENDERERS)) run(page, pageScripts()[file]);
    assert.equal(page.window.__meshplan, undefined);
  });
});

// The controls of one widget as base.control_html writes them, at the given value indices.
function sliderRow(doc, c, i, allowed) {
  const positions = allowed || c.texts.map((_, j) => j);
  return h(
    doc,
    "div",
    { class: "mp-row" },
    h(doc, "label", { class: "mp-label" }, c.name),
    h(doc, "input", {
      type: "range",
      class: "mp-control mp-slider",
      "data-name": c.name,
      min: 0,
      max: positions.length - 1,
      value: positions.indexOf(i),
      disabled: positions.length < 2,
    }),
    h(doc, "output", { class: "mp-value" }, c.texts[i]),
  );
}

function selectRow(doc, c, i) {
  const options = c.texts.map((t, j) => h(doc, "option", { value: j, selected: j === i }, t));
  return h(doc, "div", { class: "mp-row" }, h(doc, "select", { class: "mp-control mp-select", "data-name": c.name }, ...options));
}

function radioRow(doc, c, i) {
  const options = c.texts.map((t, j) =>
    h(doc, "label", { class: "mp-option" }, h(doc, "input", { type: "radio", name: c.name, value: j, checked: j === i }), t),
  );
  return h(
    doc,
    "div",
    { class: "mp-row mp-control mp-radio", "data-name": c.name },
    h(doc, "span", { class: "mp-label" }, c.name),
    h(doc, "div", { class: "mp-options" }, ...options),
  );
}

// n: GPUs (slider); rank: 0 .. n-1 (a slider whose range depends on n); order: radio buttons, the second allowed
// only from 4 GPUs on; gpn: GPUs per node (a drop-down). Each allow table is keyed by the parents' indices.
const CONTROLS = [
  { name: "n", input: "slider", texts: ["2", "4", "8"], parents: [] },
  {
    name: "rank",
    input: "slider",
    texts: ["0", "1", "2", "3", "4", "5", "6", "7"],
    parents: ["n"],
    allow: { 0: [0, 1], 1: [0, 1, 2, 3], 2: [0, 1, 2, 3, 4, 5, 6, 7] },
  },
  { name: "order", input: "radio", texts: ["tp-dp", "dp-tp"], parents: ["n"], allow: { 0: [0], 1: [0, 1], 2: [0, 1] } },
  { name: "gpn", input: "select", texts: ["8", "4"], parents: [] },
];

function controlsPage(start = { n: 0, rank: 1, order: 0, gpn: 0 }) {
  const page = runtimePage();
  const doc = page.document;
  const rows = CONTROLS.map((c) => {
    const i = start[c.name];
    const allowed = c.parents.length ? c.allow[start[c.parents[0]]] : null;
    return c.input === "slider" ? sliderRow(doc, c, i, allowed) : c.input === "radio" ? radioRow(doc, c, i) : selectRow(doc, c, i);
  });
  const root = doc.body.appendChild(h(doc, "div", { id: "w" }, ...rows));
  const data = { controls: CONTROLS, order: ["n", "rank", "order", "gpn"], position: { n: 0, rank: 1, order: 2, gpn: 3 } };
  const changed = [];
  const ui = page.MP.controls(root, data);
  ui.onChange((name) => changed.push([name, ui.key()]));
  const el = (name) => root.querySelector(`.mp-control[data-name="${name}"]`);
  const slide = (name, position) => {
    el(name).value = position;
    fire(el(name), "input");
  };
  return { root, ui, el, slide, changed };
}

describe("controls", () => {
  test("the key is each control's value index, in the controls' order", () => {
    const { ui } = controlsPage();
    assert.equal(ui.key(), "0,1,0,0");
    assert.equal(ui.key(["gpn", "n"]), "0,0");
    assert.deepEqual([ui.index("rank"), ui.text("n"), ui.text("gpn")], [1, "2", "8"]);
  });

  test("a slider over a dependent range moves through the allowed values only", () => {
    const { ui, el, slide, changed } = controlsPage();
    slide("n", 2);
    assert.equal(el("rank").max, 7);
    assert.equal(el("rank").value, "1"); // rank 1 is still allowed: it stays
    slide("rank", 6);
    assert.deepEqual([ui.index("rank"), ui.text("rank"), el("rank").parentNode.querySelector(".mp-value").textContent], [6, "6", "6"]);
    assert.deepEqual(changed, [
      ["n", "2,1,0,0"],
      ["rank", "2,6,0,0"],
    ]);
  });

  test("when a range shrinks, the control moves to the nearest allowed value", () => {
    const { ui, el, slide } = controlsPage({ n: 2, rank: 6, order: 1, gpn: 1 });
    assert.equal(ui.key(), "2,6,1,1");
    slide("n", 1);
    assert.deepEqual([ui.index("rank"), el("rank").max, el("rank").value, ui.index("order")], [3, 3, "3", 1]);
    slide("n", 0);
    assert.deepEqual([ui.index("rank"), el("rank").max, ui.index("order")], [1, 1, 0]);
    assert.equal(el("rank").disabled, false);
    assert.equal(ui.key(), "0,1,0,1");
  });

  test("options outside the allowed values are disabled", () => {
    const { el, slide } = controlsPage();
    const second = el("order").querySelectorAll("input")[1];
    assert.equal(second.disabled, true);
    assert.ok(second.parentNode.classList.contains("mp-disabled"));
    slide("n", 1);
    assert.equal(second.disabled, false);
    assert.ok(!second.parentNode.classList.contains("mp-disabled"));
  });

  test("radio buttons and drop-downs report their choice", () => {
    const { ui, el, slide, changed } = controlsPage();
    slide("n", 1);
    const [first, second] = el("order").querySelectorAll("input");
    first.checked = false;
    second.checked = true;
    fire(el("order"), "change");
    const [eight, four] = el("gpn").querySelectorAll("option");
    eight.selected = false;
    four.selected = true;
    fire(el("gpn"), "change");
    assert.deepEqual([ui.text("order"), ui.text("gpn")], ["dp-tp", "4"]);
    assert.deepEqual(changed.map((c) => c[0]), ["n", "order", "gpn"]);
    assert.equal(ui.key(), "1,1,1,1");
  });
});

describe("mount", () => {
  function widgetPage(payload) {
    const page = runtimePage();
    const calls = [];
    page.MP.kinds.probe = (root, data, ui) => calls.push({ root, data, key: ui.key() });
    const data = page.document.createElement("script");
    data.className = "mp-data";
    data.setAttribute("type", "application/json");
    data.textContent = JSON.stringify(payload);
    const c = payload.controls[0];
    page.document.body.appendChild(
      h(page.document, "div", { class: "mp-widget", id: "mp-w-demo", "data-kind": "probe" }, sliderRow(page.document, c, 1), data),
    );
    return { page, calls };
  }
  const mountStatement = (id) => pageScripts()["mount.js"].replace("__ID__", id);

  test("hands the payload and the controls to the renderer of the widget's kind, once", () => {
    const payload = { controls: [{ name: "m", input: "slider", texts: ["1", "2", "4"], parents: [] }], order: ["m"], table: {} };
    const { page, calls } = widgetPage(payload);
    run(page, mountStatement("mp-w-demo"));
    run(page, mountStatement("mp-w-demo"));
    assert.equal(calls.length, 1);
    assert.equal(calls[0].root.id, "mp-w-demo");
    assert.deepEqual(calls[0].data, { ...payload, position: { m: 0 } });
    assert.equal(calls[0].key, "1");
    assert.equal(calls[0].root.getAttribute("data-mounted"), "1");
  });

  test("an id not on the page is ignored", () => {
    const payload = { controls: [{ name: "m", input: "slider", texts: ["1", "2"], parents: [] }], order: ["m"], table: {} };
    const { page, calls } = widgetPage(payload);
    run(page, mountStatement("mp-w-elsewhere"));
    assert.equal(calls.length, 0);
  });
});
