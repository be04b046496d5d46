// Call the runtime's functions under Node for tests/test_widget_js.py, which compares the answers with
// predict.py's, case by case, as it does in Chromium.
//
//   node tests/js/call_runtime.mjs < {"runtime": <core_js()>, "name": "read", "calls": [[args...], ...]}
//
// prints the JSON list of window.__meshplan[name](...args), one answer per call.

import { readFileSync } from "node:fs";
import { newPage, run } from "./page.mjs";

const { runtime, name, calls } = JSON.parse(readFileSync(0, "utf-8"));
const page = newPage();
run(page, runtime);
const MP = page.window.__meshplan;
process.stdout.write(JSON.stringify(calls.map((args) => MP[name](...args))));
