"""The notebook tests' kernel launcher (kernelspec ``meshplan-warm``; ``make test`` passes ``--nbval-kernel-name``).

Asks the warm-kernel server of this pytest process (``tests/warm_kernels.py``, its socket in
``MESHPLAN_WARM_KERNELS``) for an IPython kernel forked from a process that has already imported the notebooks'
libraries, hands it this process's standard streams, working directory, environment and arguments, forwards the
signals Jupyter sends (interrupt, terminate) and exits with the kernel's status. Without the server it becomes a
plain ``python -m ipykernel_launcher``. Standard library only: it runs as ``python -I -S`` (no site-packages), so it
starts in milliseconds. If the server cannot be reached or drops the request, it too becomes a plain kernel.
"""

import contextlib
import json
import os
import signal
import socket
import sys


def main() -> None:
    args = sys.argv[1:]
    address = os.environ.get("MESHPLAN_WARM_KERNELS")
    plain = [sys.executable, "-m", "ipykernel_launcher", *args]
    if not address:
        os.execv(sys.executable, plain)
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(address)
        socket.send_fds(conn, [b"F"], [0, 1, 2])
        conn.sendall(json.dumps({"argv": args, "cwd": os.getcwd(), "env": dict(os.environ)}).encode() + b"\n")
        replies = conn.makefile("r")
        pid = int(replies.readline().split()[1])  # "pid N"
    except (OSError, IndexError, ValueError) as exc:  # no server there, or it dropped the request: a plain kernel
        print(f"meshplan-warm: no warm kernel ({exc!r}); starting a plain one", file=sys.stderr, flush=True)
        os.execv(sys.executable, plain)

    def forward(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, forward)
    line = replies.readline()  # "exit N" once the kernel has exited; empty if the server went away
    sys.exit(int(line.split()[1]) if line else 1)


if __name__ == "__main__":
    main()
