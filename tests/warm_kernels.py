"""Warm notebook kernels for strict nbval: each notebook's kernel is forked from a process that has already imported
what the notebooks import.

A plain kernel is a new interpreter that imports ipykernel, IPython and debugpy (about 0.3 s of the kernel's own CPU
on the 2-core machine, 0.08 s when forked); then the notebook's first cell imports matplotlib, sympy and the library
(chapter 1's cells took 2.1-2.3 CPU-s in a plain kernel, 1.2-1.35 in a warm one). Twelve
notebooks paid both in every ``make test``. Here one server per pytest process pays them once.

How: the kernelspec ``tests/kernels/meshplan-warm`` (``make test``: ``-p warm_kernels --nbval-kernel-name
meshplan-warm``) runs a launcher that asks this server for a kernel. The server forks, and the child becomes
``python -m ipykernel_launcher -f CONNECTION_FILE`` in the launcher's working directory, environment and standard
streams. Every notebook still runs from its first cell, in a process of its own, with an empty namespace. Only the
import of modules is shared, and only of modules whose import does the same thing outside a kernel as inside one
(``PRELOAD``; ``NOT_PRELOADED`` names those it must not touch, and the server refuses to start if it did). The child
resets what a fork would otherwise carry over: the environment, the working directory, ``sys.argv``, the signal
handlers, and the seeds of ``random`` and ``numpy.random``.

Lifetime: this module is also the pytest plugin. The server starts when the first notebook of a pytest process is set
up and stops with that process: it kills its kernels and exits when its standard input (a pipe from pytest) closes,
also when pytest is killed. A kernel whose launcher is killed (nbval stops each kernel so) is killed too, and kernels
exit by themselves if the server dies (``--IPKernelApp.parent_handle``). Without the server (``MESHPLAN_WARM_KERNELS``
unset) the launcher starts a plain kernel.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import pytest

ENV = "MESHPLAN_WARM_KERNELS"  # the server's socket, read by the launcher
KERNEL_NAME = "meshplan-warm"
KERNELS_DIR = Path(__file__).with_name("kernels")  # on JUPYTER_PATH as <dir>/kernels/meshplan-warm
INLINE = "module://matplotlib_inline.backend_inline"  # what ipykernel sets MPLBACKEND to when it is unset

# What the notebooks import (and ipykernel itself), where importing it outside the kernel does exactly what importing
# it inside does: none of these looks for IPython at import. Matplotlib reads MPLBACKEND when imported; the server
# sets it as ipykernel would. A name missing here only costs its import in each kernel.
PRELOAD = (
    "ipykernel.kernelapp",  # what ipykernel_launcher imports before it creates the kernel
    "ipykernel.ipkernel",
    "ipykernel.zmqshell",
    "ipykernel.debugger",  # the kernel imports it (and debugpy) as it starts
    "IPython.core.interactiveshell",
    "IPython.display",
    "numpy",
    "matplotlib",
    "matplotlib.pyplot",  # resolves its backend lazily, in the kernel
    "sympy",
    "meshplan",
    "meshplan.widgets",
    "meshplan.course.grid",
    "meshplan.course.lab",
    "meshplan.search",
    "meshplan.schedule",
    "meshplan.export",
    "meshplan.course.derive",
    "meshplan.course.plotting",
    "meshplan.parallel.engine_activations",
    "meshplan.steptime",
    "meshplan.plan.reporting",
    "meshplan.spec.models.count",
    "meshplan.spec.models.fallback",
    "meshplan.realrun.rows",
    "meshplan.realrun.activations",
)
# Never imported by the server. pandas, ipywidgets and matplotlib's inline backend do something else when imported
# outside a kernel: pandas picks its display options by whether it runs in one (``pandas.core.config_init``:
# ``display.max_columns`` 0 in a terminal, 20 in a kernel), ipywidgets registers its comm targets with the running
# kernel, and the inline backend hooks into the running shell. torch and transformers: no notebook's kernel imports
# them (the real runs and the exact counts run in processes of their own), and they would double the server's memory.
NOT_PRELOADED = ("pandas", "ipywidgets", "matplotlib_inline.backend_inline", "torch", "transformers")


# ------------------------------------------------------------------------------------------------ the server
def _preload() -> dict[str, str]:
    """Import ``PRELOAD``; return the environment variables the imports set (debugpy sets one), which each kernel
    gets on top of its own environment, as it would have had them had it made the imports itself. What the imports
    print (warnings included) goes to the server's log; the warning filters they add stay, as in a kernel."""
    before = dict(os.environ)
    os.environ.setdefault("MPLBACKEND", INLINE)
    for name in PRELOAD:
        importlib.import_module(name)
    loaded = [name for name in NOT_PRELOADED if name in sys.modules]
    if loaded:
        raise RuntimeError(f"warm kernels: preloading imported {', '.join(loaded)}: their import must run in a kernel")
    if threading.active_count() != 1:  # a fork copies only the forking thread: nothing may run beside it
        raise RuntimeError(f"warm kernels: preloading started threads: {threading.enumerate()}")
    return {k: v for k, v in os.environ.items() if before.get(k) != v}


def _become_kernel(request: dict, fds: list[int], server_pid: int, set_by_imports: dict[str, str]) -> None:
    """In the forked child: take the launcher's streams, place, environment and arguments, then run the kernel.
    Never returns."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the handlers a new interpreter starts with
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.update(set_by_imports)
        sys.argv = ["ipykernel_launcher", *request["argv"], f"--IPKernelApp.parent_handle={server_pid}"]
        import random

        random.seed()
        if "numpy" in sys.modules:  # preloaded: its global generator was seeded once, in the server
            sys.modules["numpy"].random.seed()
        from ipykernel import kernelapp

        kernelapp.launch_new_instance()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(address: str, preload: bool = True) -> None:
    """Listen on the Unix socket ``address``, preload, then fork a kernel for each launcher that connects."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # pytest's Ctrl-C is for pytest; the pipe tells us when to stop
    set_by_imports = _preload() if preload else {}
    # What is loaded now lives as long as any kernel: out of the collector's reach, a kernel's collections neither
    # walk it nor write to its pages (each such write copies a page the fork had shared).
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address + ".tmp")
    listener.listen(16)
    os.rename(address + ".tmp", address)  # ready: the address appears only now
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin, selectors.EVENT_READ, "stdin")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    kernels: dict[int, socket.socket] = {}  # pid -> its launcher's connection
    server_pid = os.getpid()

    def reap() -> None:
        while True:  # every exited child, a killed kernel whose launcher went first included
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = kernels.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                sel.unregister(conn)
                conn.close()

    try:
        while True:
            for key, _ in sel.select():
                if key.data == "stdin":
                    if not os.read(sys.stdin.fileno(), 4096):
                        return
                elif key.data == "wake":
                    os.read(wake_r, 4096)
                    reap()
                elif key.data == "accept":
                    conn, _ = listener.accept()
                    fds: list[int] = []
                    try:
                        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
                        with conn.makefile("rb") as stream:
                            request = json.loads(stream.readline())
                        if len(fds) != 3:
                            raise ValueError(f"{len(fds)} standard streams")
                        pid = os.fork()
                    except (OSError, ValueError) as exc:  # a launcher that died mid-request: serve the next one
                        print(f"warm kernels: request dropped: {exc}", file=sys.stderr, flush=True)
                        for fd in fds:
                            os.close(fd)
                        conn.close()
                        continue
                    if pid == 0:
                        sel.close()
                        listener.close()
                        conn.close()
                        for other in kernels.values():
                            other.close()
                        signal.set_wakeup_fd(-1)
                        os.close(wake_r)
                        os.close(wake_w)
                        _become_kernel(request, fds, server_pid, set_by_imports)
                    for fd in fds:
                        os.close(fd)
                    conn.sendall(f"pid {pid}\n".encode())
                    kernels[pid] = conn
                    sel.register(conn, selectors.EVENT_READ, pid)
                else:  # a launcher's connection: it sends nothing more, so this is its end (it was killed)
                    pid = key.data
                    conn = kernels.pop(pid)
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    sel.unregister(conn)
                    conn.close()
                    reap()
    finally:
        for pid in kernels:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in list(kernels):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


# ------------------------------------------------------------------------------------------------ pytest's side
class Server:
    """The server of one pytest process: ``start()`` once, before the first notebook; ``stop()`` at the end."""

    def __init__(self, preload: bool = True) -> None:
        self.preload = preload  # False: kernels forked from a bare interpreter (for the tests of the mechanism)
        self.proc: subprocess.Popen | None = None
        self.dir: str | None = None

    def start(self) -> None:
        """Start the server and wait until it has preloaded (1-2 s); RuntimeError with its output if it fails."""
        if self.proc is not None:
            return
        self.dir = tempfile.mkdtemp(prefix="meshplan-kernels-")
        if len(self.dir) > 80:  # a Unix socket's path has room for about 100 bytes: a long TMPDIR would not fit
            os.rmdir(self.dir)
            self.dir = tempfile.mkdtemp(prefix="meshplan-kernels-", dir="/tmp")
        address = os.path.join(self.dir, "socket")
        log_path = os.path.join(self.dir, "server.log")  # what the imports print (debugpy warns), and any failure
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, address, *([] if self.preload else ["--no-preload"])],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 120
        while not os.path.exists(address):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                with open(log_path, errors="replace") as f:
                    output = f.read()[-3000:]
                self.stop()
                raise RuntimeError(f"the warm-kernel server did not start:\n{output}")
            time.sleep(0.02)
        os.environ[ENV] = address

    def stop(self) -> None:
        if self.dir is not None and os.environ.get(ENV) == os.path.join(self.dir, "socket"):
            del os.environ[ENV]  # only this server's address (a test may run a server of its own)
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # the server's signal to kill its kernels and exit
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


# ------------------------------------------------------------------------------------------------ the pytest plugin
# ``-p warm_kernels --nbval-kernel-name meshplan-warm`` (the Makefile's NBVAL; pytest.ini puts tests/ on the path)
_SERVER = Server()


def _wanted(config) -> bool:
    return getattr(config.option, "nbval_kernel_name", None) == KERNEL_NAME


def pytest_configure(config):
    if _wanted(config):  # Jupyter finds the kernelspec as <a JUPYTER_PATH folder>/kernels/meshplan-warm
        paths = [str(KERNELS_DIR.parent), *filter(None, os.environ.get("JUPYTER_PATH", "").split(os.pathsep))]
        os.environ["JUPYTER_PATH"] = os.pathsep.join(paths)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.path.suffix == ".ipynb" and _wanted(item.config):
        _SERVER.start()  # before nbval starts the notebook's kernel


def pytest_unconfigure(config):
    _SERVER.stop()


if __name__ == "__main__":
    del sys.path[0]  # this script's folder (tests/): a kernel's path has no such entry (IPython adds '' to it)
    serve(sys.argv[1], preload="--no-preload" not in sys.argv[2:])
