"""The warm kernels strict nbval runs the notebooks in (``tests/warm_kernels.py``) are the kernels a notebook gets
from ``python -m ipykernel_launcher``: the same environment, paths, signal handlers, display options, matplotlib
backend, comm targets, shell hooks and warning filters once the notebooks' libraries are imported; a killed launcher
takes its kernel with it, and stopping the server stops every kernel."""

from __future__ import annotations

import ast
import json
import os
import time
from pathlib import Path

import pytest
import warm_kernels

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

# What a notebook's code can see of its kernel, after the imports the notebooks make.
PROBE = r"""
import gc, json, locale, os, signal, sys, warnings
import matplotlib, matplotlib.pyplot as plt, numpy, pandas as pd, sympy, ipywidgets
import meshplan, meshplan.widgets
ip = get_ipython()
state = json.dumps(dict(
    pid=os.getpid(),
    path=sys.path, argv=sys.argv[1:2], cwd=os.getcwd(), flags=str(sys.flags),
    env=sorted((k, v) for k, v in os.environ.items() if k not in ("JPY_PARENT_PID", "JPY_SESSION_NAME")),
    signals={n: str(signal.getsignal(getattr(signal, n))) for n in ("SIGINT", "SIGTERM", "SIGCHLD", "SIGPIPE")},
    gc=[gc.isenabled(), gc.get_threshold()], recursion=sys.getrecursionlimit(),
    encodings=[sys.getdefaultencoding(), sys.stdout.encoding, locale.getpreferredencoding()],
    mpl=[matplotlib.get_backend(), list(plt.rcParams["figure.figsize"]), plt.rcParams["figure.dpi"]],
    pandas=[pd.get_option(o) for o in ("display.max_columns", "display.width", "display.max_rows")],
    comm_targets=sorted(ip.kernel.comm_manager.targets),
    post_execute=sorted(getattr(f, "__qualname__", str(f)) for f in ip.events.callbacks["post_execute"]),
    formatters=sorted(ip.display_formatter.active_types),
    warning_filters=sorted(str((f[0], f[1] and f[1].pattern, f[2].__name__, f[3])) for f in warnings.filters),
))
"""


@pytest.fixture(scope="module")
def server():
    """The server of this pytest process (the one nbval's notebooks use when ``-p warm_kernels`` is on, started here if
    it is not yet), with the kernelspec on JUPYTER_PATH."""
    saved = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(warm_kernels.KERNELS_DIR.parent), saved]))
    srv = warm_kernels._SERVER
    srv.start()
    yield srv
    if saved is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = saved


def _start(name: str):
    from jupyter_client.manager import start_new_kernel

    return start_new_kernel(kernel_name=name, cwd=str(NOTEBOOKS))


class _Aborted(Exception):
    """The kernel aborted the request: it came in just after an error, when a kernel drops what is queued."""


def _value(kc, code: str, expression: str):
    """Run ``code`` in the kernel, then return the value of ``expression`` there (a Python literal). Read from the
    execute reply's ``user_expressions``, not from printed output: a kernel may send a cell's output after it reports
    being idle again, so printed text can miss a reader that stops at idle."""
    msg_id = kc.execute(code, user_expressions={"value": expression})
    while True:
        reply = kc.get_shell_msg(timeout=60)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    content = reply["content"]
    if content["status"] == "aborted":
        raise _Aborted(code)
    assert content["status"] == "ok", "\n".join(content.get("traceback", [])) or content
    value = content["user_expressions"]["value"]
    assert value["status"] == "ok", value
    return ast.literal_eval(value["data"]["text/plain"])


def _probe(name: str) -> dict:
    km, kc = _start(name)
    try:
        return json.loads(_value(kc, PROBE, "state"))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_warm_kernel_is_a_plain_kernel(server):
    warm, plain = _probe(warm_kernels.KERNEL_NAME), _probe("python3")
    assert warm.pop("pid") != plain.pop("pid")
    differ = {k: (warm[k], plain[k]) for k in plain if warm[k] != plain[k]}
    assert differ == {}
    assert plain["pandas"][0] == 20  # the kernel's display option, not the terminal's (0): pandas is not preloaded


def test_interrupt_reaches_the_kernel(server):
    km, kc = _start(warm_kernels.KERNEL_NAME)
    try:
        msg_id = kc.execute("import time; time.sleep(60)")
        while True:  # interrupt once the cell runs: an idle kernel ignores SIGINT (a slow machine may take seconds)
            msg = kc.get_iopub_msg(timeout=30)
            if msg["msg_type"] == "execute_input" and msg["parent_header"].get("msg_id") == msg_id:
                break
        time.sleep(0.2)
        km.interrupt_kernel()  # SIGINT to the launcher's process group, forwarded to the kernel
        reply = kc.get_shell_msg(timeout=20)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
        for _ in range(50):  # a request that comes in just after the KeyboardInterrupt is aborted: ask again
            try:
                alive = _value(kc, "", "'alive'")
                break
            except _Aborted:
                time.sleep(0.1)
        assert alive == "alive"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_a_server_that_cannot_preload_says_why(monkeypatch):
    monkeypatch.setattr(warm_kernels.subprocess, "Popen", _popen_failing)
    srv = warm_kernels.Server()
    with pytest.raises(RuntimeError, match=r"did not start:\n.*no such module"):
        srv.start()
    assert srv.proc is None and srv.dir is None


_real_popen = warm_kernels.subprocess.Popen


def _popen_failing(cmd, **kwargs):
    """The server's command, made to fail as a preload would: importing a module that does not exist."""
    code = "import sys; print('ModuleNotFoundError: no such module', file=sys.stderr); sys.exit(1)"
    return _real_popen([cmd[0], "-c", code], **kwargs)


@pytest.mark.parametrize("address", [None, "/nonexistent/meshplan-kernels/socket"], ids=["unset", "unreachable"])
def test_without_the_server_the_launcher_starts_a_plain_kernel(server, monkeypatch, address):
    if address is None:
        monkeypatch.delenv(warm_kernels.ENV)
    else:
        monkeypatch.setenv(warm_kernels.ENV, address)
    km, kc = _start(warm_kernels.KERNEL_NAME)
    try:
        # not forked by the server: the launcher became ipykernel_launcher (exec), a child of this process
        assert _value(kc, "import os", "(os.getpid(), os.getppid())") == (km.provisioner.pid, os.getpid())
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_a_launcher_that_dies_mid_request_does_not_stop_the_server(server):
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as half:  # connects, sends nothing, goes away
        half.connect(os.environ[warm_kernels.ENV])
    km, kc = _start(warm_kernels.KERNEL_NAME)
    try:
        assert _value(kc, "import os", "os.getppid()") == server.proc.pid  # still forked by the server
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_killing_the_launcher_kills_the_kernel(server):
    km, kc = _start(warm_kernels.KERNEL_NAME)
    pid = _value(kc, "import os", "os.getpid()")
    kc.stop_channels()
    km.shutdown_kernel(now=True)  # nbval's way: SIGKILL to the launcher
    assert _wait_gone(pid), "the kernel outlived its launcher"


def test_stopping_a_server_kills_its_kernels(server):
    # a server of its own, without the preload (the same code path; the shared server stays up for the notebooks)
    bare = warm_kernels.Server(preload=False)
    bare.start()
    try:
        km, kc = _start(warm_kernels.KERNEL_NAME)  # from the bare server: its address is the one in the environment
        pid = _value(kc, "import os", "os.getpid()")
        kc.stop_channels()
        bare.stop()
        assert _wait_gone(pid), "the kernel outlived its server"
        km.shutdown_kernel(now=True)
    finally:
        bare.stop()
        os.environ[warm_kernels.ENV] = os.path.join(server.dir, "socket")
