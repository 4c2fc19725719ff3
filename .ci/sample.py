#!/usr/bin/env python3
"""Samples where a CI run's CPU goes, for .ci/measure --report.

    .ci/sample.py OUT [--interval 2] [--window 30]

Every window, one line to OUT: seconds since start, the kernel's pressure
figures (PSI: the share of time some task waited for CPU, for I/O, and all
tasks waited for I/O, avg10), then the sessions that used the most CPU in
that window with their CPU seconds. A session is a CI job (each runs as a
session of its own), dockerd's builds and containers (their own sessions),
or the run's steps (.ci/measure's session).

A session's CPU is the sum over its live processes of their own time and that
of the children they reaped (utime + stime + cutime + cstime), so a process
that exits between two samples is still counted, in its parent. A session
whose leader was reaped by a process outside it loses that total: a negative
change counts as zero.
"""

import argparse
import os
import signal
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def sessions():
    """CPU seconds by session id, and a name for each session."""
    cpu, names = {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # comm may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        sid = int(fields[3])
        ticks = sum(int(x) for x in fields[11:15])
        cpu[sid] = cpu.get(sid, 0) + ticks / TICK
    for sid in cpu:
        try:
            with open(f"/proc/{sid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            name = " ".join(a.decode(errors="replace") for a in args if a)[:60]
        except OSError:
            name = ""
        names[sid] = name or f"session {sid}"
    return cpu, names


def pressure(kind):
    try:
        with open(f"/proc/pressure/{kind}") as f:
            lines = dict(line.split(" ", 1) for line in f.read().splitlines())
    except OSError:
        return "-", "-"

    def avg10(key):
        for part in lines.get(key, "").split():
            if part.startswith("avg10="):
                return part[6:]
        return "-"

    return avg10("some"), avg10("full")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--window", type=float, default=30.0)
    args = parser.parse_args()
    own_sid = os.getsid(0)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    start = time.monotonic()
    last, names = sessions()
    used = {}
    next_window = start + args.window
    with open(args.out, "w", buffering=1) as out:
        out.write("# seconds, PSI avg10 (cpu some, io some, io full), then CPU seconds by session\n")
        while True:
            time.sleep(args.interval)
            now, current = sessions()
            names.update(current)
            for sid, total in now.items():
                if sid not in last:
                    continue  # a new session: counted from its first sample on
                delta = total - last[sid]
                if delta > 0:
                    used[sid] = used.get(sid, 0.0) + delta
            last = now
            if time.monotonic() >= next_window:
                cpu_some, _ = pressure("cpu")
                io_some, io_full = pressure("io")
                top = sorted(used.items(), key=lambda kv: -kv[1])[:8]
                cells = []
                for sid, seconds in top:
                    if seconds < 0.5:
                        continue
                    name = "steps" if sid == own_sid else names.get(sid, str(sid))
                    cells.append(f"{seconds:.0f} {name}")
                out.write(f"{time.monotonic() - start:.0f}\tcpu {cpu_some} io {io_some}/{io_full}\ttotal {sum(used.values()):.0f}\t" + " | ".join(cells) + "\n")
                used = {}
                next_window += args.window


if __name__ == "__main__":
    main()
