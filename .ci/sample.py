#!/usr/bin/env python3
"""Samples where a CI run's CPU goes, for .ci/measure --report.

    .ci/sample.py OUT [--interval 2] [--window 30]

Every window, one line to OUT: seconds since start, the kernel's pressure
figures (PSI: the share of time some task waited for CPU, for I/O, and all
tasks waited for I/O, avg10), then the sessions that used the most CPU in
that window with their CPU seconds. A session is a CI job (each runs as a
session of its own), dockerd's builds and containers (their own sessions),
or the run's steps (.ci/measure's session).

A process's CPU is its own time as it grows, and a process that exits is
counted to the end through its parent's children's time (Processes says how),
so short-lived ones (rustc, the Go compiler) are counted too, in their
parent's session when they lived between two samples.
"""

import argparse
import os
import signal
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


class Processes:
    """CPU seconds by session between two samples, reaped children included.

    Each process's own time (utime + stime) is counted as it grows. A parent's
    children's time (cutime + cstime) grows when it reaps a child, by that
    child's whole total: less what earlier samples already counted of the
    children that disappeared, the rest is what they used since the last
    sample (or in their whole life, if it fell between two samples).
    """

    def __init__(self):
        self.seen = {}  # pid: (ppid, sid, own, children)
        self.names = {}
        self.sample()

    @staticmethod
    def read():
        procs = {}
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
            ppid, sid = int(fields[1]), int(fields[3])
            own = (int(fields[11]) + int(fields[12])) / TICK
            children = (int(fields[13]) + int(fields[14])) / TICK
            procs[int(pid)] = (ppid, sid, own, children)
        return procs

    def sample(self):
        """CPU seconds by session since the previous call."""
        now = self.read()
        counted = {}  # pid: seconds of its children's time already counted
        for pid, (ppid, _, own, children) in self.seen.items():
            if pid not in now:
                # Its total reaches the nearest living ancestor: a job's
                # runner that reaped the job and exited in the same interval
                # hands both totals up to .ci/run.
                reaper = ppid
                while reaper not in now and reaper in self.seen and reaper != self.seen[reaper][0]:
                    reaper = self.seen[reaper][0]
                if reaper not in now:
                    reaper = 1
                counted[reaper] = counted.get(reaper, 0.0) + own + children
        used = {}
        for pid, (_, sid, own, children) in now.items():
            if pid in self.seen:
                _, _, own0, children0 = self.seen[pid]
                delta = (own - own0) + max(0.0, children - children0 - counted.get(pid, 0.0))
            else:
                delta = own + children if self.seen else 0.0
            if delta > 0:
                used[sid] = used.get(sid, 0.0) + delta
            if sid not in self.names:  # in case its leader is gone by the next line
                self.names[sid] = session_name(sid) or f"session {sid}"
        self.seen = now
        return used

    def name(self, sid):
        """The session's name: its leader's command line as it is now (a job's
        leader execs its command a moment after it starts), or as it was last
        read once the leader is gone."""
        name = session_name(sid)
        if name:
            self.names[sid] = name
        return self.names.get(sid, f"session {sid}")


def session_name(sid):
    """The command line of process `sid`, shortened; empty when it is gone."""
    try:
        with open(f"/proc/{sid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return ""
    return " ".join(a.decode(errors="replace") for a in args if a)[:60]


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
    procs = Processes()
    used = {}
    next_window = start + args.window
    with open(args.out, "w", buffering=1) as out:
        out.write("# seconds, PSI avg10 (cpu some, io some, io full), then CPU seconds by session\n")
        while True:
            time.sleep(args.interval)
            for sid, seconds in procs.sample().items():
                used[sid] = used.get(sid, 0.0) + seconds
            if time.monotonic() >= next_window:
                cpu_some, _ = pressure("cpu")
                io_some, io_full = pressure("io")
                top = sorted(used.items(), key=lambda kv: -kv[1])[:8]
                cells = []
                for sid, seconds in top:
                    if seconds < 0.5:
                        continue
                    name = "steps" if sid == own_sid else procs.name(sid)
                    cells.append(f"{seconds:.0f} {name}")
                out.write(f"{time.monotonic() - start:.0f}\tcpu {cpu_some} io {io_some}/{io_full}\ttotal {sum(used.values()):.0f}\t" + " | ".join(cells) + "\n")
                used = {}
                next_window += args.window


if __name__ == "__main__":
    main()
