#!/usr/bin/env node
/*
 * Typeset the built site's math once, at build time, with the site's own MathJax (3.2.2, copied to
 * _static/mathjax/ by sphinx-mathjax-offline), so that no reader's browser has to.
 *
 *   node scripts/typeset_math.js _build/html
 *
 * Every page that loads MathJax (book/_templates/layout.html adds its loader, _static/mathjax/startup.js, to the
 * pages with math) is read into MathJax's LiteDOM, typeset with the configuration the page itself carries
 * (`window.MathJax = {...}`, from mathjax3_config in _config.yml: which classes to process), TeX input, CommonHTML
 * output and the hidden MathML that screen readers read (a11y/assistive-mml, as in the browser), and written back
 * without the two MathJax scripts. The page then shows its math as soon as its HTML and fonts arrive, with no
 * script: on a 2-core machine MathJax cost about 0.4 s of CPU per page load in Chromium, half of each load.
 * The fonts stay MathJax's own woff files under _static/mathjax/output/chtml/fonts/woff-v2/.
 *
 * Strict: a TeX error (MathJax renders it as <merror>; an undefined macro counts, where a browser's MathJax would
 * print it in red), a page MathJax cannot read, or a page left with no math fails the run, naming the page and the
 * TeX. Each page is typeset in a fresh Node process (a MathJax instance holds one document and its CSS), one per
 * core at a time. Deterministic: the same page in gives the same page out.
 */
"use strict";

const fs = require("fs");
const path = require("path");
const os = require("os");
const { spawn } = require("child_process");

const STARTUP = /<script[^>]*\ssrc="[^"]*_static\/mathjax\/startup\.js"[^>]*><\/script>/;
const CONFIG = /<script>window\.MathJax = (\{.*?\})<\/script>/s;
// MathJax measures nothing in LiteDOM, so the x-height of the surrounding text is given: 0.5626 em, that of the
// book's text font as MathJax measured it in Chromium here, which set the math at 127.3 % of the text's size (a
// browser-side MathJax matches each reader's own font; a value fixed at build time keeps this one).
const EX_FACTOR = 0.5626;

function pages(siteDir) {
  const out = [];
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) {
        if (!["_static", "_sources", "_images", ".doctrees"].includes(entry.name)) walk(full);
      } else if (entry.name.endsWith(".html")) out.push(full);
    }
  };
  walk(siteDir);
  return out.sort();
}

function fail(message) {
  process.stderr.write(`typeset_math: ${message}\n`);
  process.exit(1);
}

function typesetPage(siteDir, file) {
  const html = fs.readFileSync(file, "utf8");
  const match = CONFIG.exec(html);
  if (!match) fail(`${file}: loads MathJax but carries no window.MathJax configuration`);
  const pageConfig = JSON.parse(match[1]);
  const mathjaxDir = path.resolve(siteDir, "_static", "mathjax");
  const fontDir = path.join(mathjaxDir, "output", "chtml", "fonts", "woff-v2");
  const fontURL = path.relative(path.dirname(path.resolve(file)), fontDir).split(path.sep).join("/");
  global.MathJax = {
    loader: {
      paths: { mathjax: mathjaxDir },
      load: ["adaptors/liteDOM", "input/tex", "output/chtml", "a11y/assistive-mml"],
      require: require,
    },
    // An undefined macro is an error here (a browser's MathJax shows it in red in the page, via noundefined).
    tex: { ...(pageConfig.tex || {}), packages: { "[-]": ["noundefined"] } },
    options: pageConfig.options || {},
    chtml: { fontURL, exFactor: EX_FACTOR },
    startup: { typeset: false, document: html },
  };
  require(path.join(mathjaxDir, "startup.js"));
  return MathJax.startup.promise.then(() => {
    const adaptor = MathJax.startup.adaptor;
    const doc = MathJax.startup.document;
    doc.render();
    const items = Array.from(doc.math);
    if (!items.length) fail(`${file}: loads MathJax but MathJax found no math in it`);
    const errorOf = (item) => {
      let message = null;
      item.root.walkTree((node) => {
        if (message === null && node.isKind("merror")) message = node.attributes.get("data-mjx-error") || "error";
      });
      return message;
    };
    const errors = items.map((item) => [item.math, errorOf(item)]).filter(([, message]) => message !== null);
    if (errors.length) {
      const lines = errors.map(([tex, message]) => `  ${tex}   (${message})`);
      fail(`${file}: ${errors.length} TeX error(s):\n` + lines.join("\n"));
    }
    for (const script of adaptor.tags(adaptor.head(doc.document), "script")) {
      const src = adaptor.getAttribute(script, "src") || "";
      const body = adaptor.textContent(script);
      if (src.endsWith("_static/mathjax/startup.js") || body.startsWith("window.MathJax = ")) {
        adaptor.remove(script);
      }
    }
    const out = adaptor.doctype(doc.document) + "\n" + adaptor.outerHTML(adaptor.root(doc.document)) + "\n";
    if (STARTUP.test(out) || CONFIG.test(out)) fail(`${file}: the MathJax scripts are still in the page`);
    fs.writeFileSync(file, out);
    process.stdout.write(`typeset_math: ${path.relative(siteDir, file)}: ${items.length} formulas\n`);
  });
}

function main() {
  const args = process.argv.slice(2);
  if (args[0] === "--page" && args.length === 3) {
    typesetPage(args[1], args[2]).catch((err) => fail(`${args[2]}: ${err && err.stack ? err.stack : err}`));
    return;
  }
  if (args.length !== 1) fail("usage: node scripts/typeset_math.js SITE_DIR");
  const siteDir = args[0];
  if (!fs.existsSync(path.join(siteDir, "_static", "mathjax", "startup.js"))) {
    fail(`${siteDir}/_static/mathjax/startup.js not found: build the site first (sphinx-mathjax-offline copies it)`);
  }
  const todo = pages(siteDir).filter((file) => STARTUP.test(fs.readFileSync(file, "utf8")));
  // One Node process per page, as many at a time as there are cores; their reports print in page order.
  const reports = new Array(todo.length);
  let next = 0;
  let failed = false;
  const startOne = () => {
    if (next >= todo.length) return null;
    const index = next++;
    return new Promise((resolve) => {
      const child = spawn(process.execPath, [__filename, "--page", siteDir, todo[index]]);
      const out = { stdout: "", stderr: "" };
      child.stdout.on("data", (chunk) => (out.stdout += chunk));
      child.stderr.on("data", (chunk) => (out.stderr += chunk));
      child.on("close", (code) => {
        if (code !== 0) {
          failed = true;
          if (!out.stderr) out.stderr = `typeset_math: ${todo[index]}: the typesetting process ended with ${code}\n`;
        }
        reports[index] = out;
        resolve(startOne());
      });
    });
  };
  const workers = Array.from({ length: Math.max(1, Math.min(os.cpus().length, todo.length)) }, startOne);
  Promise.all(workers).then(() => {
    for (const report of reports) {
      process.stdout.write(report.stdout);
      process.stderr.write(report.stderr);
    }
    if (failed) process.exit(1);
    process.stdout.write(`typeset_math: ${todo.length} pages typeset\n`);
  });
}

main();
