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

    def __init__(self, suite, prefix="", record=None):
        """`record(passed)`, when given, is told of every counted result."""
        self.suite = suite
        self.prefix = prefix
        self.record = record
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
        if self.record:
            self.record(True)

    def fail(self, name, why="", always=False):
        """A failed check; `always` reports it even when CHECKS does not
        select it (a set-up step the selected checks needed)."""
        if not always and not self.selected(name):
            self.skipped += 1
            return
        self.failed += 1
        print(f"FAIL {self.prefix}{name}{': ' + why if why else ''}", flush=True)
        if self.record:
            self.record(False)

    def expect(self, name, condition, why=""):
        """ok when `condition` holds, else fail with `why`."""
        if condition:
            self.ok(name)
        else:
            self.fail(name, why)
        return bool(condition)

    def check(self, name, fn, expected=(Exception,), setup=False):
        """Runs `fn`: ok when it returns, fail with the exception otherwise.
        Exceptions of the `expected` types are shown by their message;
        others also by where they were raised. A check CHECKS does not
        select is not run, unless it is a `setup` step (then only its
        failure is reported). Returns whether it passed (True when not run)."""
        if not setup and not self.selected(name):
            self.skipped += 1
            return True
        try:
            fn()
        except Exception as e:
            why = str(e).replace("\n", " | ")
            if not isinstance(e, expected):
                why = f"{type(e).__name__}: {why} at {traceback.format_exc().splitlines()[-3].strip()}"
            self.fail(name, why, always=setup)
            return False
        self.ok(name)
        return True

    def summary(self):
        """Prints the counts; the exit code: 0, or 1 when a check failed."""
        note = f" ({self.skipped} not selected by CHECKS)" if self.skipped else ""
        print(f"{self.suite}: {self.passed} passed, {self.failed} failed{note}", flush=True)
        return 1 if self.failed else 0
