// ESLint's flat config (make lint runs node_modules/.bin/eslint on the files below; package.json pins the versions).
// CommonJS, not an ES module: package.json sets no "type", so that scripts/typeset_math.js keeps its require().
"use strict";

const js = require("@eslint/js");
const globals = require("globals");

module.exports = [
  {
    // the built site, the environments and the installed packages are never linted
    ignores: ["_build/**", ".venv/**", "lib/build/**", "node_modules/**"],
  },
  {
    // The widgets' page scripts: classic browser scripts (not modules), written into every widget's HTML by
    // meshplan.widgets.runtime. Parsed as ECMAScript 2017: newer syntax, which older browsers cannot run, fails.
    files: ["lib/meshplan/widgets/static/*.js"],
    ...js.configs.recommended,
    languageOptions: {
      ecmaVersion: 2017,
      sourceType: "script",
      globals: { ...globals.browser },
    },
    rules: {
      ...js.configs.recommended.rules,
      // "\-" stays allowed in a character class: the runtime writes the signs [+\-] as predict.py's regular
      // expressions do (and changing it would change every page's bytes)
      "no-useless-escape": ["error", { allowRegexCharacters: ["-"] }],
    },
  },
  {
    // The book's own page scripts (book/_static: site.js on every page, planner.js on the live planner's): classic
    // scripts, ECMAScript 2020.
    files: ["book/_static/*.js"],
    ...js.configs.recommended,
    languageOptions: {
      ecmaVersion: 2020,
      sourceType: "script",
      globals: { ...globals.browser },
    },
  },
  {
    // The live planner's worker: a module worker (it imports Pyodide's pyodide.mjs).
    files: ["book/_static/*.mjs"],
    ...js.configs.recommended,
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "module",
      globals: { ...globals.worker },
    },
  },
  {
    // The scripts' unit tests, run by Node's own test runner (node --test; tests/test_widget_js.py runs them).
    files: ["tests/js/**/*.mjs"],
    ...js.configs.recommended,
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "module",
      globals: { ...globals.node },
    },
  },
  {
    files: ["eslint.config.js"],
    ...js.configs.recommended,
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "commonjs",
      globals: { ...globals.node },
    },
  },
];
