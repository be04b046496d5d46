// The live planner's worker (book/planner.md, issue 27): Pyodide, from this site's _static/pyodide/, runs the
// library's own command line, meshplan.cli.main, on the argument list the page sends, with the reader's config
// written into Pyodide's in-memory file system. Off the page's thread, so a long search never freezes the page.
//
// Messages in: {id, argv: [...], files: {"./name/config.json": text}}. Out: {progress: k, of: n, what} while
// loading; then {id, code, stdout, stderr} for each run, or {id, code: 2, stdout: "", stderr} when loading failed.
// A Python exception outside the CLI's own handling comes back as one line, never a traceback.

const STEPS = 4;
let ready = null;
let loaded = false;

function progress(k, what) {
  self.postMessage({ progress: k, of: STEPS, what });
}

async function fetchOk(url, as) {
  const r = await fetch(url);
  if (!r.ok) {
    throw new Error(`${url}: HTTP ${r.status}`);
  }
  return as === "json" ? r.json() : r.arrayBuffer();
}

async function load() {
  const base = new URL("./", import.meta.url); // _static/
  const t0 = performance.now();
  progress(0, "downloading the Python runtime");
  const { loadPyodide } = await import(new URL("pyodide/pyodide.mjs", base).href);
  const py = await loadPyodide({ indexURL: new URL("pyodide/", base).href, fullStdLib: false });
  progress(2, "unpacking the library");
  const manifest = await fetchOk(new URL("planner/manifest.json", base).href, "json");
  const wheel = await fetchOk(new URL(`planner/${manifest.wheel}`, base).href, "buffer");
  py.unpackArchive(wheel, "wheel");
  progress(3, "importing meshplan");
  py.runPython(`
import contextlib, io, os
import meshplan
import meshplan.cli

def _planner_run(argv, files):
    """meshplan's command line on argv, its stdout, stderr and exit status, as a terminal would show them."""
    for path, text in files.items():
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = meshplan.cli.main(list(argv))
        except SystemExit as exc:  # argparse: usage and its message are already on stderr
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
        except Exception as exc:  # noqa: BLE001 - one line, as the CLI would end
            print(f"meshplan: error: {type(exc).__name__}: {exc}", file=err)
            code = 1
    return [code, out.getvalue(), err.getvalue()]
`);
  progress(STEPS, "ready");
  return { py, run: py.globals.get("_planner_run"), ms: performance.now() - t0, version: manifest };
}

self.onmessage = async (event) => {
  const { id, argv, files } = event.data;
  try {
    if (ready === null) {
      ready = load();
    }
    const env = await ready;
    loaded = true;
    const t = performance.now();
    const pyArgv = env.py.toPy(argv);
    const pyFiles = env.py.toPy(files || {});
    const result = env.run(pyArgv, pyFiles);
    const [code, stdout, stderr] = result.toJs();
    result.destroy();
    pyArgv.destroy();
    pyFiles.destroy();
    self.postMessage({ id, code, stdout, stderr, ms: performance.now() - t, load_ms: env.ms });
  } catch (err) {
    if (!loaded) {
      ready = null; // a failed load is retried on the next press
    }
    const line = String((err && err.message) || err).split("\n")[0];
    self.postMessage({ id, code: 2, stdout: "", stderr: `the planner could not start: ${line}`, failed: true });
  }
};
