// The widgets' page scripts exactly as the pages carry them, run under Node on a stand-in DOM (dom.mjs).
//
// The scripts come from the library itself (meshplan.widgets.runtime: core_js() for the runtime, with the reader's
// tables filled in from predict.py, and script_js(name) for the others), through the Python that tests/
// test_widget_js.py passes in MESHPLAN_PYTHON (else the repository's .venv/bin/python, else python3), so that what is
// tested here is byte for byte what a page runs.

import { execFileSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Document } from "./dom.mjs";

export const ROOT = fileURLToPath(new URL("../..", import.meta.url));
export const STATIC = fileURLToPath(new URL("../../lib/meshplan/widgets/static/", import.meta.url));

function python() {
  if (process.env.MESHPLAN_PYTHON) return process.env.MESHPLAN_PYTHON;
  const venv = `${ROOT}.venv/bin/python`;
  return existsSync(venv) ? venv : "python3";
}

const PROGRAM = [
  "import json, sys",
  "from meshplan.widgets import runtime",
  "json.dump({n: runtime.core_js() if n == 'runtime.js' else runtime.script_js(n) for n in sys.argv[1:]}, sys.stdout)",
].join("\n");

let scripts = null;

/** Every page script (file name -> the text a page carries), read once per test file. */
export function pageScripts() {
  if (scripts === null) {
    const names = readdirSync(STATIC).filter((n) => n.endsWith(".js"));
    const out = execFileSync(python(), ["-c", PROGRAM, ...names], { cwd: ROOT, encoding: "utf-8" });
    scripts = JSON.parse(out);
  }
  return scripts;
}

/** A fresh page: a window (its listeners recorded, no ResizeObserver) and its document, nothing run yet. */
export function newPage() {
  const document = new Document();
  const listeners = [];
  const window = {
    document,
    getComputedStyle: () => ({ paddingLeft: "0px", paddingRight: "0px" }),
    addEventListener: (type, fn) => listeners.push([type, fn]),
    listeners,
  };
  return { window, document };
}

/** Run a script on the page as a browser runs a classic <script>: its free names window and document (and
 * getComputedStyle, which the timeline calls) are the page's. */
export function run(page, source) {
  new Function("window", "document", "getComputedStyle", source)(page.window, page.document, page.window.getComputedStyle);
}

/** A page with the runtime loaded; returns the page and window.__meshplan. */
export function runtimePage(extra = []) {
  const page = newPage();
  run(page, pageScripts()["runtime.js"]);
  extra.forEach((name) => run(page, pageScripts()[name]));
  return { ...page, MP: page.window.__meshplan };
}

/** The runtime alone (read, compare, fmtSig, ...), on a page of its own. */
export function runtime() {
  return runtimePage().MP;
}
