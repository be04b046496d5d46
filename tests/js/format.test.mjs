// The runtime's number formats (fmtFixed, fmtSig): the twins of predict.fmt_fixed and predict.fmt_sig. Rounding is
// half away from zero on the exact binary value (toFixed, toExponential), thousands are grouped with commas, the
// minus sign is U+2212, and from 1e15 on (or below 1e-6) a number is written with an exponent.

import assert from "node:assert/strict";
import { test } from "node:test";
import { runtime } from "./page.mjs";

const MP = runtime();
const M = "\u2212";

// x, then fmtFixed(x, 0), fmtFixed(x, 1), fmtFixed(x, 3), fmtSig(x, 1), fmtSig(x, 2), fmtSig(x, 4): predict.py's
const CASES = [
  [2.25, "2", "2.3", "2.250", "2", "2.3", "2.25"], // 2.25 is exact: half away from zero (Python's format gives 2.2)
  [2.675, "3", "2.7", "2.675", "3", "2.7", "2.675"],
  [0.125, "0", "0.1", "0.125", "0.1", "0.13", "0.125"],
  [-0.04, "0", "0.0", `${M}0.040`, `${M}0.04`, `${M}0.04`, `${M}0.04`], // no minus once rounded to zero
  [-0, "0", "0.0", "0.000", "0", "0", "0"],
  [0, "0", "0.0", "0.000", "0", "0", "0"],
  [1234567.891, "1,234,568", "1,234,567.9", "1,234,567.891", "1,000,000", "1,200,000", "1,235,000"],
  [999.5, "1,000", "999.5", "999.500", "1,000", "1,000", "999.5"],
  [1e15, "1e15", "1e15", "1e15", "1e15", "1e15", "1e15"],
  [999999999999999.9, "1,000,000,000,000,000", "999,999,999,999,999.9", "999,999,999,999,999.875", "1e15", "1e15", "1e15"],
  [-1.5e20, `${M}1.5e20`, `${M}1.5e20`, `${M}1.5e20`, `${M}2e20`, `${M}1.5e20`, `${M}1.5e20`],
  [1.234e-7, "0", "0.0", "0.000", `1e${M}7`, `1.2e${M}7`, `1.234e${M}7`],
  [1e-6, "0", "0.0", "0.000", "0.000001", "0.000001", "0.000001"],
  [5e-324, "0", "0.0", "0.000", `5e${M}324`, `4.9e${M}324`, `4.941e${M}324`], // the exact value of the subnormal
  [1 / 3, "0", "0.3", "0.333", "0.3", "0.33", "0.3333"],
  [1e21, "1e21", "1e21", "1e21", "1e21", "1e21", "1e21"],
];

for (const [x, ...want] of CASES) {
  test(`formats ${x}`, () => {
    const got = [MP.fmtFixed(x, 0), MP.fmtFixed(x, 1), MP.fmtFixed(x, 3), MP.fmtSig(x, 1), MP.fmtSig(x, 2), MP.fmtSig(x, 4)];
    assert.deepEqual(got, want);
  });
}
