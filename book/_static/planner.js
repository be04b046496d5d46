// The live planner's page script (book/planner.md, issue 27). It reads the form, writes the command line the form
// means (shown on the page: what a reader would type), and sends that argument list to planner-worker.mjs, where
// Pyodide runs the library's own meshplan.cli.main on it. Nothing here computes a number: the report, the JSON, the
// search and the export are the command line's own output, and a bad input shows the command line's own message.
// The settings (never the reader's config) are kept in the address's #fragment, so a plan can be shared as a link.
(function () {
  "use strict";

  // Each control: its option, and the default the command line takes when the option is left out (then the page
  // leaves it out too). Checkboxes are flags.
  var OPTIONS = [
    ["gpus", "--gpus", null],
    ["hardware", "--hardware", ""],
    ["accounting", "--accounting", ""],
    ["precision", "--precision", "bf16"],
    ["tp", "--tp", "1"],
    ["cp", "--cp", "1"],
    ["pp", "--pp", "1"],
    ["ep", "--ep", "1"],
    ["dp", "--dp", ""],
    ["zero", "--zero", "0"],
    ["recompute", "--recompute", "none"],
    ["virtual-stages", "--virtual-stages", "1"],
    ["seq", "--seq", "4096"],
    ["micro-batch-size", "--micro-batch-size", "1"],
    ["global-batch", "--global-batch", ""],
  ];
  var FLAGS = [
    ["uneven-stages", "--uneven-stages"],
    ["no-sp", "--no-sp"],
  ];
  // search takes the model, the machine and the batch, not the cut
  var SEARCH_OPTIONS = ["gpus", "hardware", "accounting", "precision", "seq", "global-batch"];
  var SEARCH_TOP = "5";
  var NAME = /^[A-Za-z0-9._-]{1,64}$/;

  function el(name) {
    return document.getElementById("planner-" + name);
  }

  var form = document.getElementById("planner");
  var SCRIPT = document.currentScript ? document.currentScript.src : location.href;
  if (!form) {
    return;
  }
  var buttons = [el("run"), el("search"), el("export")];
  var status = el("status");
  var progress = el("progress");
  var worker = null;
  var pending = {};
  var nextId = 1;
  var busy = false;
  window.plannerTimings = { loadMs: null, runs: [] };

  function value(name) {
    var node = el(name);
    return node ? String(node.value).trim() : "";
  }

  function modelArg() {
    var model = value("model");
    return model ? model : "./" + (value("name") || "my-model") + "/config.json";
  }

  // The argument list of one command: plan (text or --json), search or export.
  function argv(command) {
    var args = [command];
    if (command === "export") {
      args.push("--format", value("format"));
    }
    args.push("--model", modelArg());
    OPTIONS.forEach(function (opt) {
      if (command === "search" && SEARCH_OPTIONS.indexOf(opt[0]) < 0) {
        return;
      }
      var v = value(opt[0]);
      if (v !== "" && v !== opt[2]) {
        args.push(opt[1], v);
      }
    });
    if (command !== "search") {
      FLAGS.forEach(function (flag) {
        if (el(flag[0]).checked) {
          args.push(flag[1]);
        }
      });
    } else {
      args.push("--top", SEARCH_TOP);
    }
    return args;
  }

  function files() {
    if (value("model")) {
      return {};
    }
    var out = {};
    out[modelArg()] = el("config").value;
    return out;
  }

  // What a shell would need: each argument quoted when it holds anything but safe characters.
  function shellLine(args) {
    return (
      "meshplan " +
      args
        .map(function (a) {
          return /^[A-Za-z0-9_.,:=/+-]+$/.test(a) ? a : "'" + a.replace(/'/g, "'\\''") + "'";
        })
        .join(" ")
    );
  }

  function show(node, text) {
    node.textContent = text;
    node.hidden = false;
  }

  function hide(node) {
    node.textContent = "";
    node.hidden = true;
  }

  function setBusy(on) {
    busy = on;
    buttons.forEach(function (b) {
      b.disabled = on;
    });
    el("result").setAttribute("aria-busy", on ? "true" : "false");
  }

  function startWorker() {
    worker = new Worker(new URL("planner-worker.mjs", SCRIPT), { type: "module" });
    worker.onmessage = function (event) {
      var msg = event.data;
      if (msg.progress !== undefined) {
        progress.hidden = msg.progress >= msg.of;
        progress.max = msg.of;
        progress.value = msg.progress;
        progress.setAttribute("aria-valuetext", msg.what);
        status.textContent = "Loading the planner: " + msg.what + "…";
        return;
      }
      var done = pending[msg.id];
      delete pending[msg.id];
      if (msg.load_ms !== undefined && window.plannerTimings.loadMs === null) {
        window.plannerTimings.loadMs = msg.load_ms;
      }
      if (done) {
        done(msg);
      }
    };
    worker.onerror = function (event) {
      var line = "the planner could not start: " + (event.message || "its worker failed to load");
      Object.keys(pending).forEach(function (id) {
        pending[id]({ code: 2, stdout: "", stderr: line, failed: true });
        delete pending[id];
      });
      worker = null;
    };
  }

  function call(args) {
    if (worker === null) {
      startWorker();
    }
    return new Promise(function (resolve) {
      var id = nextId++;
      pending[id] = resolve;
      worker.postMessage({ id: id, argv: args, files: files() });
    });
  }

  // The command line's message: its last non-empty line of stderr (one line: the CLI's contract).
  function message(result) {
    var lines = String(result.stderr || "")
      .split("\n")
      .filter(function (l) {
        return l.trim() !== "";
      });
    return lines.length ? lines[lines.length - 1] : "meshplan exited with status " + result.code;
  }

  function clearResult() {
    el("report").textContent = "";
    el("json").textContent = "";
    hide(el("search-out"));
    el("search-label").hidden = true;
    hide(el("export-out"));
    el("export-row").hidden = true;
  }

  function fail(result) {
    clearResult();
    show(el("error"), message(result));
    el("error-label").hidden = false;
    status.textContent = "The command line refused these inputs: " + message(result);
  }

  function ok() {
    hide(el("error"));
    el("error-label").hidden = true;
  }

  function timing(result) {
    window.plannerTimings.runs.push(result.ms);
    var t = window.plannerTimings;
    var first = t.runs.length === 1 && t.loadMs !== null ? " (loaded in " + (t.loadMs / 1000).toFixed(1) + " s)" : "";
    return " in " + Math.round(result.ms) + " ms" + first + ".";
  }

  function run(kind) {
    if (busy) {
      return Promise.resolve();
    }
    if (!value("model") && !NAME.test(value("name"))) {
      fail({ stderr: "meshplan: error: the name must be 1-64 letters, digits, '.', '_' or '-'", code: 2 });
      el("name").focus();
      return Promise.resolve();
    }
    var args = kind === "plan" ? argv("plan") : argv(kind);
    el("command").textContent = shellLine(kind === "plan" ? args.concat(["--json"]) : args);
    saveHash();
    setBusy(true);
    status.textContent = worker === null ? "Loading the planner…" : "Running…";
    var chain;
    if (kind === "plan") {
      chain = call(args.concat(["--json"])).then(function (json) {
        if (json.code !== 0) {
          fail(json);
          return;
        }
        return call(args).then(function (text) {
          if (text.code !== 0) {
            fail(text);
            return;
          }
          ok();
          el("json").textContent = json.stdout.replace(/\n$/, "");
          el("report").textContent = text.stdout.replace(/\n$/, "");
          status.textContent = "Planned" + timing(json);
        });
      });
    } else {
      chain = call(args).then(function (result) {
        if (result.code !== 0) {
          fail(result);
          return;
        }
        ok();
        var out = el(kind === "search" ? "search-out" : "export-out");
        show(out, result.stdout.replace(/\n$/, ""));
        if (kind === "search") {
          el("search-label").hidden = false;
        } else {
          el("export-row").hidden = false;
        }
        status.textContent = (kind === "search" ? "Searched" : "Exported") + timing(result);
        out.focus();
      });
    }
    return chain.then(
      function () {
        setBusy(false);
      },
      function (err) {
        setBusy(false);
        fail({ stderr: "the planner failed: " + err, code: 2 });
      }
    );
  }

  // ---- the address's #fragment: every setting that differs from its default, never the config
  var HASHED = ["model", "name", "format"]
    .concat(
      OPTIONS.map(function (o) {
        return o[0];
      })
    )
    .concat(
      FLAGS.map(function (f) {
        return f[0];
      })
    );

  function saveHash() {
    var parts = [];
    HASHED.forEach(function (name) {
      var node = el(name);
      if (node.type === "checkbox") {
        if (node.checked) {
          parts.push(name + "=1");
        }
        return;
      }
      var v = value(name);
      var dflt = node.tagName === "SELECT" ? defaultOption(node) : String(node.defaultValue).trim();
      if (v !== dflt) {
        parts.push(name + "=" + encodeURIComponent(v));
      }
    });
    history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname + location.search);
  }

  function defaultOption(select) {
    for (var i = 0; i < select.options.length; i++) {
      if (select.options[i].defaultSelected) {
        return select.options[i].value;
      }
    }
    return select.options.length ? select.options[0].value : "";
  }

  function loadHash() {
    var text = location.hash.replace(/^#/, "");
    if (!text) {
      return;
    }
    text.split("&").forEach(function (part) {
      var eq = part.indexOf("=");
      var name = eq < 0 ? part : part.slice(0, eq);
      var v = eq < 0 ? "" : decodeURIComponent(part.slice(eq + 1));
      if (HASHED.indexOf(name) < 0) {
        return;
      }
      var node = el(name);
      if (node.type === "checkbox") {
        node.checked = v === "1";
      } else if (node.tagName === "SELECT") {
        var known = Array.prototype.some.call(node.options, function (o) {
          return o.value === v;
        });
        if (known) {
          node.value = v;
        }
      } else {
        node.value = v;
      }
    });
  }

  // ---- the config: pasted, dropped or chosen; typing one picks "your config.json"
  function useOwn() {
    el("model").value = "";
  }

  function readFile(file) {
    if (!file) {
      return;
    }
    var reader = new FileReader();
    reader.onload = function () {
      el("config").value = String(reader.result);
      useOwn();
      status.textContent = "Read " + file.name + " (" + file.size.toLocaleString("en") + " bytes).";
    };
    reader.readAsText(file);
  }

  el("config").addEventListener("input", useOwn);
  el("file").addEventListener("change", function () {
    readFile(el("file").files[0]);
  });
  var own = el("own");
  own.addEventListener("dragover", function (event) {
    event.preventDefault();
    own.classList.add("planner-drop");
  });
  own.addEventListener("dragleave", function () {
    own.classList.remove("planner-drop");
  });
  own.addEventListener("drop", function (event) {
    event.preventDefault();
    own.classList.remove("planner-drop");
    readFile(event.dataTransfer.files[0]);
  });

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    run("plan");
  });
  el("search").addEventListener("click", function () {
    run("search");
  });
  el("export").addEventListener("click", function () {
    run("export");
  });
  el("copy").addEventListener("click", function () {
    var text = el("export-out").textContent;
    var done = function () {
      status.textContent = "Copied the export to the clipboard.";
    };
    if (navigator.clipboard && window.isSecureContext) {
      // a browser that asks the reader first may never settle: after a second, select the text instead
      var settled = false;
      var timer = setTimeout(function () {
        if (!settled) {
          selectExport();
        }
      }, 1000);
      navigator.clipboard.writeText(text).then(
        function () {
          settled = true;
          clearTimeout(timer);
          done();
        },
        function () {
          settled = true;
          clearTimeout(timer);
          selectExport();
        }
      );
    } else {
      selectExport();
    }
  });

  function selectExport() {
    var range = document.createRange();
    range.selectNodeContents(el("export-out"));
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    status.textContent = "The export is selected: press Ctrl+C (⌘C) to copy it.";
  }

  loadHash();
  window.addEventListener("hashchange", loadHash);
  if (location.protocol === "file:") {
    buttons.forEach(function (b) {
      b.disabled = true;
    });
    status.textContent =
      "Opened from disk, the planner cannot start (browsers do not run its WebAssembly worker from file://): " +
      "serve the site, e.g. `python -m http.server -d _build/html`, and open http://127.0.0.1:8000/book/planner.html.";
    status.classList.add("planner-warn");
  }
  window.plannerArgv = argv; // for the tests: the argument list each command would send
})();
