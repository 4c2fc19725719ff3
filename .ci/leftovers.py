#!/usr/bin/env python3
"""Lists the processes a CI run started that are still alive.

.ci/run exports CNPGI_CI_RUN=<token>; every process it starts inherits the
variable, including ones that were orphaned and reparented to PID 1. This
script prints each live process (other than the ones named on the command
line) whose environment carries the token, and exits 1 if there is any.

With --kill it also sends SIGKILL to them after listing them, so one leak does
not cascade into the next step.

Usage: leftovers.py [--kill] STEP IGNORED_PID...
"""

import contextlib
import os
import signal
import sys


def main():
    args = sys.argv[1:]
    kill = bool(args) and args[0] == "--kill"
    if kill:
        args = args[1:]
    step, ignored = args[0], {int(pid) for pid in args[1:]}
    token = os.environ.pop("CNPGI_CI_RUN", None)
    if not token:
        sys.exit("leftovers.py: CNPGI_CI_RUN is not set")
    marker = f"CNPGI_CI_RUN={token}".encode()
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me or pid in ignored:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if marker in environ and state != b"Z":
            found.append((pid, cmdline))
    for pid, cmdline in found:
        print(f"LEFTOVER after '{step}': pid {pid}: {cmdline}", file=sys.stderr)
        if kill:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
