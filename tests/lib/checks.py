"""Named checks for the Python test suites, as tests/lib/checks.sh for the
shell ones: one `ok   NAME` / `FAIL NAME: why` line per check, and
`SUITE: N passed, M failed` at the end.

CHECKS=REGEX (matched against each check's name, re.search) selects checks
by name: the others are neither run (through `check`) nor counted.

    from checks import Checks
    checks = Checks("interop")
    checks.check("the plugin answers", lambda: call())   # ok unless it raises
    checks.expect("the name is right", name == NAME, f"got {name}")
    sys.exit(checks.summary())
"""

import os
import re
import traceback


class Checks:
    """The counts of one suite's checks."""

    def __init__(self, suite, prefix=""):
        self.suite = suite
        self.prefix = prefix
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        pattern = os.environ.get("CHECKS")
        self.selection = re.compile(pattern) if pattern else None

    def selected(self, name):
        return self.selection is None or bool(self.selection.search(self.prefix + name))

    def ok(self, name):
        if not self.selected(name):
            self.skipped += 1
            return
        self.passed += 1
        print(f"ok   {self.prefix}{name}", flush=True)

    def fail(self, name, why=""):
        if not self.selected(name):
            self.skipped += 1
            return
        self.failed += 1
        print(f"FAIL {self.prefix}{name}{': ' + why if why else ''}", flush=True)

    def expect(self, name, condition, why=""):
        """ok when `condition` holds, else fail with `why`."""
        if condition:
            self.ok(name)
        else:
            self.fail(name, why)
        return bool(condition)

    def check(self, name, fn, expected=(Exception,)):
        """Runs `fn` (unless not selected): ok when it returns, fail with
        the exception otherwise. Exceptions of the `expected` types are
        shown by their message; others also by where they were raised.
        Returns whether it passed (True when not selected)."""
        if not self.selected(name):
            self.skipped += 1
            return True
        try:
            fn()
        except Exception as e:
            why = str(e).replace("\n", " | ")
            if not isinstance(e, expected):
                why = f"{type(e).__name__}: {why} at {traceback.format_exc().splitlines()[-3].strip()}"
            self.fail(name, why)
            return False
        self.ok(name)
        return True

    def summary(self):
        """Prints the counts; the exit code: 0, or 1 when a check failed."""
        note = f" ({self.skipped} not selected by CHECKS)" if self.skipped else ""
        print(f"{self.suite}: {self.passed} passed, {self.failed} failed{note}", flush=True)
        return 1 if self.failed else 0
