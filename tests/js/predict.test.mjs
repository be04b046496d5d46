// The runtime's reader and grader (read, sentence, grade, compare, reveal, squash): the JavaScript twin of
// meshplan/widgets/predict.py. The expected texts are predict.py's; tests/test_widget_js.py also runs both over
// the same cases, here and in Chromium.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { runtime } from "./page.mjs";

const MP = runtime();

function reading(typed, unit) {
  const r = MP.read(typed, unit);
  return [r.value, r.echo, r.note, r.error];
}

describe("read", () => {
  // typed, the exercise's unit, then the value, echo, note and refusal
  const readable = [
    ["1,5", "GB", 1.5, "1.5 GB", ""],
    ["1,500", "GB", 1500, "1,500 GB", "the comma read as a thousands separator"],
    ["1.234,5", "", 1234.5, "1,234.5", ""],
    ["1 234 567", "", 1234567, "1,234,567", ""],
    ["2.5E-3", "s", 0.0025, "2.5e\u22123 s", ""],
    ["\u22120", "", 0, "0", ""],
    ["-0.0", "", 0, "0.0", ""],
    ["+7", "", 7, "7", ""],
    ["52 GiB", "GB", 55.834574848, "52 GiB = 55.83 GB", ""],
    ["1.5 TB", "GB", 1500, "1.5 TB = 1,500 GB", ""],
    ["250 ms", "s", 0.25, "250 ms = 0.25 s", ""],
    ["37.5 %", "", 0.375, "37.5 % = 0.375", ""],
    ["3 GPU", "GPUs", 3, "3 GPUs", ""],
    ["3 gpus", "GPUs", 3, "3 GPUs", ""],
    ["\u0664\u0662", "GB", 42, "42 GB", ""], // Arabic-Indic digits
    ["\uff14\uff12,\uff15", "GB", 42.5, "42.5 GB", ""], // full-width digits, folded by NFKC
    ["1e-300 ns", "h", 2.7777777778e-313, "1e\u2212300 ns = 2.778e\u2212313 h", ""],
  ];
  for (const [typed, unit, value, echo, note] of readable) {
    test(`reads ${JSON.stringify(typed)} in ${JSON.stringify(unit)}`, () => {
      assert.deepEqual(reading(typed, unit), [value, echo, note, null]);
    });
  }

  const quote = (t, reason) => `Could not read \u201c${t}\u201d: ${reason}.`;
  const refused = [
    ["", "", "Type a prediction first, or press Show me."],
    ["   ", "", "Type a prediction first, or press Show me."],
    ["x".repeat(61), "", quote("x".repeat(39) + "\u2026", "a prediction has at most 60 characters")],
    ["0x1F", "", quote("0x1F", "hexadecimal numbers are not read; type the number in decimal")],
    ["NaN", "", quote("NaN", "type a finite number")],
    ["\u2212\u221e", "", quote("\u2212\u221e", "type a finite number")],
    ["abc", "", quote("abc", "not a number")],
    ["12,34,5", "", quote("12,34,5", "the digit groups do not read as thousands (groups of three digits)")],
    ["1,2,3", "", quote("1,2,3", "the digit groups do not read as thousands (groups of three digits)")],
    ["5 apples", "GB", quote("5 apples", "\u201capples\u201d after the number is not a unit this page knows")],
    ["5 s", "GB", quote("5 s", "s cannot be converted to GB")],
    ["5 %", "GB", quote("5 %", "% cannot be converted to GB")],
    ["5 GB", "", quote("5 GB", "GB cannot be converted to a plain number")],
    ["1e400", "", quote("1e400", "too large to compare")],
    ["1e-400", "", quote("1e-400", "too small to compare")],
    ["1e300 PB", "B", quote("1e300 PB", "too large to compare")], // finite as typed, not once converted
  ];
  for (const [typed, unit, error] of refused) {
    test(`refuses ${JSON.stringify(typed.slice(0, 12))} in ${JSON.stringify(unit)}`, () => {
      assert.deepEqual(reading(typed, unit), [null, "", "", error]);
    });
  }

  test("a missing unit argument is a plain number", () => {
    assert.deepEqual(reading("1,5"), [1.5, "1.5", "", null]);
  });
});

test("sentence says what was read, and the note", () => {
  assert.equal(MP.sentence(MP.read("1,500", "GB")), "Read as 1,500 GB (the comma read as a thousands separator).");
  assert.equal(MP.sentence(MP.read("52 GiB", "GB")), "Read as 52 GiB = 55.83 GB.");
});

describe("grade", () => {
  const says = "The library says 55.6 GB.";
  // prediction, the library's value, its text, unit, digits, tolerance, the line
  const cases = [
    [58, 55.56, "55.6 GB", "GB", 1, 0.05, `${says} Your prediction is off by +2.4 GB (+4 %): \u2713 within 5 %.`],
    [66, 55.56, "55.6 GB", "GB", 1, 0.05, `${says} Your prediction is off by +10.4 GB (+19 %): \u2248 within 25 %.`],
    [
      200,
      55.56,
      "55.6 GB",
      "GB",
      1,
      0.05,
      `${says} Your prediction is off by +144.4 GB (+260 %): ~ right order of magnitude (within a factor of 10).`,
    ],
    [
      -50,
      55.56,
      "55.6 GB",
      "GB",
      1,
      0.05,
      `${says} Your prediction is off by \u2212105.6 GB (\u2212190 %): \u2717 off: the sign is wrong.`,
    ],
    [
      1e308,
      55.56,
      "55.6 GB",
      "GB",
      1,
      0.05,
      `${says} Your prediction is 1.8e306 \u00d7 the answer: \u2717 off by more than a factor of 10.`,
    ],
    [
      1e308,
      -1e-308,
      "tiny",
      "",
      1,
      0.05,
      "The library says tiny. Your prediction is less than \u22121e308 \u00d7 the answer: \u2717 off: the sign is wrong.",
    ],
    [1000, 1, "1", "", 1, 0.05, "The library says 1. Your prediction is 1,000 \u00d7 the answer: \u2717 off by more than a factor of 10."],
    [0, 0, "0 s", "s", 2, 0.05, "The library says 0 s. \u2713 Exact."],
    [0.5, 0, "0 s", "s", 2, 0.05, "The library says 0 s. Your prediction is off by +0.50 s: \u2717 off."],
    [41, 40, "40 %", "%", 0, 0.05, "The library says 40 %. Your prediction is off by +1 percentage points (+3 %): \u2713 within 5 %."],
    [1.2, 1, "1.0", "", 1, 0.25, "The library says 1.0. Your prediction is off by +0.2 (+20 %): \u2713 within 25 %."],
    [5, Infinity, "\u221e", "", 1, 0.05, "The library says \u221e."],
  ];
  for (const [x, v, text, unit, digits, tol, line] of cases) {
    test(`${x} against ${v}`, () => assert.equal(MP.grade(x, v, text, unit, digits, tol), line));
  }
});

describe("compare and reveal", () => {
  const r55 = { value: 55.56, text: "55.6 GB", error: null };
  const nvlink = { value: "NVLink", text: "NVLink", error: null };
  const skipped = (text) => `You skipped the prediction. The library says ${text}.`;
  // prediction, the library's result, unit, digits, tolerance, Check's line, Show me's line
  const cases = [
    [
      "58",
      { value: null, text: "", error: "tp must divide 32 heads" },
      "GB",
      1,
      0.05,
      "Not a valid combination: tp must divide 32 heads",
      "Not a valid combination: tp must divide 32 heads",
    ],
    ["  ", r55, "GB", 1, 0.05, "Type a prediction first, or press Show me.", skipped("55.6 GB")],
    [
      " nvLink ",
      nvlink,
      "",
      1,
      0.05,
      "You predicted \u201cnvLink\u201d. The library says NVLink. \u2713 Your prediction matches.",
      skipped("NVLink"),
    ],
    ["PCIe", nvlink, "", 1, 0.05, "You predicted \u201cPCIe\u201d. The library says NVLink. \u2717 No match.", skipped("NVLink")],
    ["58", { value: null, text: "not a number", error: null }, "GB", 1, 0.05, "The library says not a number.", skipped("not a number")],
    [
      "1,23,4",
      r55,
      "GB",
      1,
      0.05,
      "Could not read \u201c1,23,4\u201d: the digit groups do not read as thousands (groups of three digits).",
      skipped("55.6 GB"),
    ],
    [
      "1,500",
      { value: 1499, text: "1,499 GB", error: null },
      "GB",
      0,
      0.05,
      "Read as 1,500 GB (the comma read as a thousands separator). The library says 1,499 GB. " +
        "Your prediction is off by +1 GB (+0 %): \u2713 within 5 %.",
      skipped("1,499 GB"),
    ],
    [
      "52 GiB",
      r55,
      "GB",
      1,
      0.05,
      "Read as 52 GiB = 55.83 GB. The library says 55.6 GB. Your prediction is off by +0.3 GB (+0 %): \u2713 within 5 %.",
      skipped("55.6 GB"),
    ],
  ];
  for (const [typed, result, unit, digits, tol, checked, shown] of cases) {
    test(`${JSON.stringify(typed)} against ${JSON.stringify(result.value)}`, () => {
      assert.equal(MP.compare(typed, result, unit, digits, tol), checked);
      assert.equal(MP.reveal(result), shown);
    });
  }
});

test("squash folds compatibility forms and runs of ASCII whitespace", () => {
  assert.deepEqual(
    ["  a \t b\n", "\uff21\uff11", "x\u00a0y", "", null, undefined].map(MP.squash),
    ["a b", "A1", "x y", "", "", ""],
  );
});
