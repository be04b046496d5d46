// The renderers of the four widget kinds on the stand-in DOM, mounted as a page mounts them: the exercise's Check,
// Enter and Show me; the checklist's report; the device grid's groups from the library's strides; the timeline
// explorer's drawing of the encoded events. The markup mirrors each class's body_html; the payloads are small
// hand-made ones of the shape the classes' payload() gives.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { fire, h } from "./dom.mjs";
import { pageScripts, run, runtimePage } from "./page.mjs";

/** A slider control as base.control_html writes it (every value allowed), at value index i. */
function slider(doc, name, texts, i = 0) {
  return h(
    doc,
    "div",
    { class: "mp-row" },
    h(doc, "input", { type: "range", class: "mp-control mp-slider", "data-name": name, min: 0, max: texts.length - 1, value: i }),
    h(doc, "output", { class: "mp-value" }, texts[i]),
  );
}

/** Mount one widget of `kind` (its renderer from `file`): the controls (name -> texts, all sliders at 0), the
 * body (markup, or elements), and the payload, which gets the controls' part. Returns the root and a slide(). */
function mount(file, kind, controls, body, payload) {
  const page = runtimePage([file]);
  const doc = page.document;
  const root = h(doc, "div", { class: `mp-widget mp-${kind}`, id: `mp-${kind}-t`, "data-kind": kind });
  for (const [name, texts] of Object.entries(controls)) root.appendChild(slider(doc, name, texts));
  const holder = h(doc, "div");
  if (typeof body === "string") holder.innerHTML = body;
  else body(doc).forEach((el) => holder.appendChild(el));
  [...holder.childNodes].forEach((n) => root.appendChild(n));
  const data = h(doc, "script", { type: "application/json", class: "mp-data" });
  const names = Object.keys(controls);
  data.textContent = JSON.stringify({
    controls: names.map((name) => ({ name, input: "slider", texts: controls[name], parents: [] })),
    order: names,
    ...payload,
  });
  root.appendChild(data);
  doc.body.appendChild(root);
  run(page, pageScripts()["mount.js"].replace("__ID__", root.id));
  const slide = (name, i) => {
    const el = root.querySelector(`.mp-control[data-name="${name}"]`);
    el.value = i;
    fire(el, "input");
  };
  return { root, slide, q: (s) => root.querySelector(s), qa: (s) => root.querySelectorAll(s) };
}

describe("exercise", () => {
  const body = (doc) => [
    h(
      doc,
      "div",
      { class: "mp-row mp-predict" },
      h(doc, "input", { type: "text", class: "mp-prediction" }),
      h(
        doc,
        "span",
        { class: "mp-buttons" },
        h(doc, "button", { type: "button", class: "mp-check mp-primary", disabled: true }, "Check"),
        h(doc, "button", { type: "button", class: "mp-show" }, "Show me"),
      ),
    ),
    h(doc, "div", { class: "mp-answer" }),
  ];
  const table = {
    0: { value: 6, text: "6.0 GB", explanation: "2 \u00d7 3 = 6", error: null },
    1: { value: null, text: "", explanation: "", error: "n must be even" },
    2: { value: "NVLink", text: "NVLink", explanation: "inside one node", error: null },
  };
  const exercise = () =>
    mount("exercise.js", "exercise", { n: ["3", "5", "link"] }, body, { table, unit: "GB", digits: 1, tolerance: 0.05 });
  const type = (ex, text) => {
    ex.q(".mp-prediction").value = text;
    fire(ex.q(".mp-prediction"), "input");
  };
  const answer = (ex) => [ex.q(".mp-answer").firstChild?.textContent || "", ex.q(".mp-explanation")?.textContent || ""];

  test("Check stays disabled until something is typed, then grades the prediction", () => {
    const ex = exercise();
    assert.equal(ex.q(".mp-check").disabled, true);
    fire(ex.q(".mp-check"), "click");
    assert.equal(ex.q(".mp-answer").textContent, "");
    type(ex, "   ");
    assert.equal(ex.q(".mp-check").disabled, true);
    type(ex, "5,5");
    assert.equal(ex.q(".mp-check").disabled, false);
    fire(ex.q(".mp-check"), "click");
    assert.deepEqual(answer(ex), [
      "Read as 5.5 GB. The library says 6.0 GB. Your prediction is off by \u22120.5 GB (\u22128 %): \u2248 within 25 %.",
      "2 \u00d7 3 = 6",
    ]);
  });

  test("Enter checks; an unreadable prediction gets its message and not the worked answer", () => {
    const ex = exercise();
    type(ex, "lots");
    const enter = { key: "Enter" };
    fire(ex.q(".mp-prediction"), "keydown", enter);
    assert.deepEqual(answer(ex), ["Could not read \u201clots\u201d: not a number.", ""]);
    fire(ex.q(".mp-prediction"), "keydown", { key: "a" });
    assert.equal(answer(ex)[0], "Could not read \u201clots\u201d: not a number.");
  });

  test("Show me reveals the answer and says the prediction was skipped", () => {
    const ex = exercise();
    fire(ex.q(".mp-show"), "click");
    assert.deepEqual(answer(ex), ["You skipped the prediction. The library says 6.0 GB.", "2 \u00d7 3 = 6"]);
  });

  test("an invalid combination is flagged where the answer goes, and nothing can be checked", () => {
    const ex = exercise();
    type(ex, "6");
    ex.slide("n", 1);
    assert.equal(ex.q(".mp-answer").textContent, "Not a valid combination: n must be even");
    assert.ok(ex.q(".mp-answer").classList.contains("mp-invalid"));
    assert.deepEqual([ex.q(".mp-check").disabled, ex.q(".mp-show").disabled], [true, true]);
    ex.slide("n", 0);
    assert.equal(ex.q(".mp-answer").textContent, "");
    assert.equal(ex.q(".mp-answer").className, "mp-answer");
    assert.deepEqual([ex.q(".mp-check").disabled, ex.q(".mp-show").disabled], [false, false]);
  });

  test("a word answer shows the worked answer whether or not it matched", () => {
    const ex = exercise();
    ex.slide("n", 2);
    type(ex, "pcie");
    fire(ex.q(".mp-check"), "click");
    assert.deepEqual(answer(ex), [
      "You predicted \u201cpcie\u201d. The library says NVLink. \u2717 No match.",
      "inside one node",
    ]);
  });
});

describe("checklist", () => {
  const body = '<div class="mp-row"><button type="button" class="mp-check mp-primary">Check my plan</button></div>' +
    '<div class="mp-answer" aria-live="polite"></div>';
  const checks = [
    { name: "TP divides 4 heads", uses: ["tp"], table: { 0: [true, "4 heads \u00f7 2"], 1: [false, "4 heads \u00f7 3"] } },
    { name: "fits", uses: [], table: { "": [true, "60 GB of 80 GB"] } },
  ];
  const checklist = () => mount("checklist.js", "checklist", { tp: ["2", "3"] }, body, { checks });

  test("the button reports every line from its own table, the failing ones named", () => {
    const ck = checklist();
    ck.slide("tp", 1);
    fire(ck.q(".mp-check"), "click");
    const summary = ck.q(".mp-summary");
    assert.equal(summary.textContent, "1 of 2 checks pass; failing: TP divides 4 heads.");
    assert.ok(summary.classList.contains("mp-fail"));
    assert.deepEqual(
      ck.qa("ul.mp-lines li").map((li) => [li.getAttribute("data-check"), li.className, li.textContent]),
      [
        ["TP divides 4 heads", "mp-fail", "\u2717 TP divides 4 heads: 4 heads \u00f7 3"],
        ["fits", "mp-pass", "\u2713 fits: 60 GB of 80 GB"],
      ],
    );
  });

  test("all passing, and a moved control clears the report", () => {
    const ck = checklist();
    fire(ck.q(".mp-check"), "click");
    assert.equal(ck.q(".mp-summary").textContent, "2 of 2 checks pass.");
    assert.ok(ck.q(".mp-summary").classList.contains("mp-pass"));
    ck.slide("tp", 1);
    assert.equal(ck.q(".mp-answer").textContent, "");
  });
});

describe("device grid", () => {
  const AXES = ["tp", "cp", "pp", "dp"];
  const body =
    '<div class="mp-status" aria-live="polite"></div><div class="mp-grid-summary"></div><div class="mp-grid-selected"></div>' +
    '<div class="mp-grid-legend">' +
    AXES.map(
      (a) =>
        `<div class="mp-legend-row" data-axis="${a}"><span class="mp-swatch"></span><b>${a}</b> <span class="mp-size"></span> ` +
        '<span class="mp-link"></span> <span class="mp-members"></span></div>',
    ).join("") +
    '</div><div class="mp-grid-nodes"></div>';
  const colours = { tp: "#1f77b4", cp: "#2ca02c", pp: "#ff7f0e", dp: "#9467bd" };
  // 16 GPUs, 8 per node, TP 2 (stride 1), PP 2 (stride 2), DP 4 (stride 4); then 64 GPUs with DP 32; then invalid
  const table = {
    "0,0": {
      sizes: { tp: 2, cp: 1, pp: 2, dp: 4 },
      strides: { tp: 1, cp: 2, pp: 2, dp: 4 },
      links: { tp: "nvlink", cp: null, pp: "nvlink", dp: "infiniband" },
      gpn: 8,
      summary: "a plan",
    },
    "1,0": {
      sizes: { tp: 2, cp: 1, pp: 1, dp: 32 },
      strides: { tp: 1, cp: 2, pp: 2, dp: 2 },
      links: { tp: "nvlink", cp: null, pp: null, dp: "infiniband" },
      gpn: 8,
    },
    "0,1": { error: "tp \u00d7 cp \u00d7 pp = 3 does not divide 16 GPUs" },
  };
  const payload = (gpus) => ({
    table,
    gpus,
    rank: 5,
    colours,
    textColours: { tp: "#fff", cp: "#fff", pp: "#000", dp: "#fff" },
    linkNames: { nvlink: "NVLink", infiniband: "InfiniBand" },
  });
  const grid = (gpus = 16) => mount("grid.js", "grid", { shape: ["a", "b"], bad: ["no", "yes"] }, body, payload(gpus));
  const groups = (g) => {
    const out = {};
    g.qa(".mp-gpu[data-group]").forEach((c) => (out[c.getAttribute("data-group")] ||= []).push(+c.getAttribute("data-rank")));
    return out;
  };
  const legend = (g, a, part) => g.q(`.mp-legend-row[data-axis="${a}"] .mp-${part}`).textContent;

  test("one button per GPU, grouped by node", () => {
    const g = grid();
    assert.deepEqual(g.qa(".mp-node").map((n) => n.children.length), [8, 8]);
    assert.deepEqual(g.qa(".mp-gpu").map((c) => c.textContent), [...Array(16).keys()].map(String));
    assert.equal(g.qa(".mp-gpu")[9].title, "GPU 9, node 1");
    assert.equal(g.q(".mp-grid-summary").textContent, "a plan");
  });

  test("the selected GPU's groups come from the strides: floor(r / stride) mod size", () => {
    const g = grid();
    assert.deepEqual(groups(g), { tp: [4], pp: [7], dp: [1, 9, 13] });
    assert.equal(g.q(".mp-gpu[data-selected]").getAttribute("data-rank"), "5");
    assert.equal(g.q(".mp-grid-selected").textContent, "GPU 5 on node 0");
    assert.deepEqual(
      AXES.map((a) => [legend(g, a, "size"), legend(g, a, "link"), legend(g, a, "members")]),
      [
        ["size 2", "NVLink", "4, 5"],
        ["size 1", "no traffic", "5"],
        ["size 2", "NVLink", "5, 7"],
        ["size 4", "InfiniBand", "1, 5, 9, 13"],
      ],
    );
    fire(g.qa(".mp-gpu")[10], "click");
    assert.deepEqual(groups(g), { tp: [11], pp: [8], dp: [2, 6, 14] });
    assert.equal(g.qa(".mp-gpu")[10].style.background, "");
    assert.equal(g.qa(".mp-gpu")[11].style.background, colours.tp);
    assert.equal(g.q(".mp-grid-selected").textContent, "GPU 10 on node 1");
  });

  test("a long group is listed by its first 16 members", () => {
    const g = grid(64);
    g.slide("shape", 1);
    assert.equal(
      legend(g, "dp", "members"),
      "1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31, \u2026 (32 GPUs)",
    );
  });

  test("an invalid mesh is flagged and the last drawing stays, dimmed", () => {
    const g = grid();
    g.slide("bad", 1);
    assert.equal(g.q(".mp-status").textContent, "Not a valid mesh: tp \u00d7 cp \u00d7 pp = 3 does not divide 16 GPUs");
    assert.ok(g.q(".mp-status").classList.contains("mp-invalid"));
    assert.ok(g.q(".mp-grid-nodes").classList.contains("mp-stale"));
    assert.equal(g.qa(".mp-gpu").length, 16);
    g.slide("bad", 0);
    assert.equal(g.q(".mp-status").textContent, "");
    assert.ok(!g.q(".mp-grid-nodes").classList.contains("mp-stale"));
  });
});

describe("timeline explorer", () => {
  const body = '<div class="mp-legend"></div><div class="mp-tl-view mp-view mp-scroll"></div><div class="mp-caption"></div>';
  const layout = { left: 50, right: 10, row: 20, axis: 24 };
  // one (p, m, v): GPipe on two GPUs; 1F1B with an F&B box (F of micro-batch 1 overlapped with BW of micro-batch 0,
  // chunk 1); a third schedule that cannot run here
  const payload = {
    rows: {
      "0,0,0": [
        { kind: "gpipe", name: "GPipe", t: "gpipe|2|2|1", label: "makespan 6" },
        { kind: "zb", name: "ZB-H1", t: "zb|2|2|1", label: "makespan 4" },
        { kind: "dualpipe", name: "DualPipe", error: "needs an even number of micro-batches per direction" },
      ],
    },
    timelines: {
      "gpipe|2|2|1": { pp: 2, makespan: 6, ev: ["F0@0-1 F1@1-2 B1@3-5", "F0@1-2 B0@2-4.5"] },
      "zb|2|2|1": { pp: 2, makespan: 4, ev: ["F&B1|0.1@0-3", ""] },
    },
    legend: [["F", "forward", "#1f77b4"], ["F&B", "forward and backward overlapped", "#d62728"]],
    chunked: true,
    colours: { F: "#1f77b4", B: "#ff7f0e", W: "#2ca02c", BW: "#9467bd", "F&B": "#d62728" },
    textColours: { F: "#fff", B: "#000", W: "#fff", BW: "#fff", "F&B": "#fff" },
    minScale: 20,
    times: [1, 1, 1],
    layout,
    table: {
      "0,0,0,0": { error: null, caption: "GPipe: p = 2, m = 2" },
      "1,0,0,0": { error: "not here", caption: "" },
    },
  };
  const explorer = () =>
    mount("timeline.js", "explorer", { schedule: ["GPipe", "ZB-H1"], p: ["2"], m: ["2"], v: ["1"] }, body, payload);
  const rects = (svg) =>
    svg.querySelectorAll("rect[data-kind]").map((r) => [r.getAttribute("data-kind"), r.getAttribute("data-mb"), r.getAttribute("x"), r.getAttribute("width")]);

  test("every schedule on one axis, at the fewest pixels per time unit when the box has no width", () => {
    const ex = explorer();
    const rows = ex.qa(".mp-tl-row");
    assert.deepEqual(rows.map((r) => [r.getAttribute("data-kind"), r.className]), [
      ["gpipe", "mp-tl-row mp-current"],
      ["zb", "mp-tl-row"],
      ["dualpipe", "mp-tl-row"],
    ]);
    assert.deepEqual(rows.map((r) => r.querySelector(".mp-tl-label").textContent), ["\u2014 makespan 6", "\u2014 makespan 4", ""]);
    const svg = rows[0].querySelector("svg");
    assert.equal(svg.getAttribute("width"), String(50 + 6 * 20 + 10));
    assert.equal(svg.getAttribute("height"), String(2 * 20 + 24));
    assert.equal(svg.getAttribute("data-makespan"), "6");
    assert.deepEqual(rects(svg), [
      ["F", "0", "50.0", "19.0"],
      ["F", "1", "70.0", "19.0"],
      ["B", "1", "110.0", "39.0"],
      ["F", "0", "70.0", "19.0"],
      ["B", "0", "90.0", "49.0"],
    ]);
    assert.deepEqual(svg.querySelectorAll("text.mp-tick").map((t) => t.textContent), ["0", "2", "4", "6"]);
    assert.equal(rows[2].querySelector(".mp-invalid").textContent, "Not valid here: needs an even number of micro-batches per direction");
    assert.equal(ex.q(".mp-caption").textContent, "GPipe: p = 2, m = 2");
  });

  test("an F&B box is split in the ratio of the times, its second chunk hatched, and framed", () => {
    const ex = explorer();
    const svg = ex.qa(".mp-tl-row")[1].querySelector("svg");
    assert.deepEqual(rects(svg), [
      ["F", "1", "50.0", "19.0"],
      ["BW", "0", "70.0", "39.0"],
    ]);
    const hatched = svg.querySelectorAll("rect").filter((r) => (r.getAttribute("fill") || "").startsWith("url(#"));
    assert.deepEqual(hatched.map((r) => r.getAttribute("x")), ["70.0"]);
    const frame = svg.querySelectorAll("rect").find((r) => r.getAttribute("stroke") === payload.colours["F&B"]);
    assert.deepEqual([frame.getAttribute("x"), frame.getAttribute("width")], ["50.0", "59.0"]);
  });

  test("the legend, and the chosen schedule's caption or error", () => {
    const ex = explorer();
    assert.deepEqual(ex.q(".mp-legend").children.map((s) => s.textContent), [
      "forward",
      "forward and backward overlapped",
      "hatched: second chunk",
    ]);
    ex.slide("schedule", 1);
    assert.equal(ex.q(".mp-caption").textContent, "Not a valid schedule: not here");
    assert.ok(ex.q(".mp-caption").classList.contains("mp-invalid"));
    assert.equal(ex.q(".mp-tl-row.mp-current").getAttribute("data-kind"), "zb");
  });
});
