# shellcheck shell=bash
# Named checks for the shell test suites: one `ok`/`FAIL` line per check and
# `SUITE: N passed, M failed` at the end. Sourced, after setting SUITE (the
# name printed by die and checks_summary).
#
#   ok WHAT                 a check that passed
#   fail WHAT               a check that failed
#   check WHAT CMD ARGS...  runs CMD: ok when it succeeds, fail otherwise
#   selected WHAT           whether CHECKS selects the check WHAT
#   die MESSAGE             stops the suite: the set-up itself failed
#   checks_summary          prints the counts; fails when a check failed
#
# CHECKS=REGEX (extended, matched against each check's name) selects checks
# by name: the others are neither counted nor printed, and `check` does not
# run their command. The set-up steps the selected checks rely on still run.

passed=0
failed=0
skipped=0

selected() {
  [ -z "${CHECKS:-}" ] && return 0
  printf '%s\n' "$1" | grep -Eq -- "$CHECKS"
}

ok() {
  if selected "$*"; then
    passed=$((passed + 1))
    echo "ok   $*"
  else
    skipped=$((skipped + 1))
  fi
}

fail() {
  if selected "$*"; then
    failed=$((failed + 1))
    echo "FAIL $*"
  else
    skipped=$((skipped + 1))
  fi
}

check() {
  local what=$1
  shift
  if ! selected "$what"; then
    skipped=$((skipped + 1))
    return 0
  fi
  if "$@"; then ok "$what"; else fail "$what"; fi
}

die() {
  echo "${SUITE:-test}: $*" >&2
  exit 1
}

checks_summary() {
  local note=""
  [ "$skipped" = 0 ] || note=" ($skipped not selected by CHECKS)"
  echo "${SUITE:-test}: $passed passed, $failed failed$note"
  [ "$failed" = 0 ]
}

# checks_show_logs FILE...: the last lines of each non-empty FILE on stderr,
# for a suite that failed or stopped early.
checks_show_logs() {
  local f
  for f in "$@"; do
    [ -s "$f" ] || continue
    echo "---- last lines of $(basename "$f")" >&2
    tail -n 25 "$f" >&2
  done
}
