# shellcheck shell=bash
# Background jobs and step timings for .ci/run (sourced).
#
# Why: on 2 cores, a cold run spends long stretches with a core idle (cargo's
# serial tails and links, downloads, end-to-end suites waiting on servers).
# The builds that later steps need (Go programs, images, the publish check)
# run beside the steps at idle priority, so they take only CPU time nobody
# else wants: a foreground step is hardly slowed by them, and a step that
# needs a job's result waits for it (`ci_await`), at which point the job has
# the whole machine.
#
# Priorities and sessions: every job runs in a session of its own, and
# Linux's autogroup scheduling (kernel.sched_autogroup_enabled, on by default)
# makes each session a group that gets an equal share of the CPU, whatever
# the niceness or policy of its tasks. So the niceness that counts is the
# group's (/proc/self/autogroup): 15 for a low-priority job, 0 for the rest
# (the steps run in .ci/run's own session, at 0). Not 19: several run at
# once and the steps await each of them in turn, so they must progress. A
# cold run measured before this: ten jobs with a share each, the kind chain's
# Go builds got about a fifth of a core each, the low-priority builds as much.
# With autogroup off, the tasks' own nice and SCHED_IDLE (also set) apply.
#
#   ci_job NAME [--normal] [--after JOB...] -- COMMAND...
#                                                 starts COMMAND in the background
#   ci_await JOB...                               waits for jobs; fails with a job's log tail
#   ci_await_report JOB [REGEX]                   waits for a job, prints its log, then ci_await
#   ci_step NAME                                  starts a timed step (ends the previous one)
#   ci_report                                     prints the steps' and jobs' times
#
# Every job runs in a session of its own with CNPGI_CI_RUN=<run token>-bg, so
# the per-step leftover check (.ci/leftovers.py) leaves running jobs alone;
# ci_stop_jobs stops them (SIGTERM to their sessions, then the leftover check
# with the jobs' token) on any exit.

CI_STATE=$(mktemp -d "${TMPDIR:-/tmp}/cnpgi-ci.XXXXXX")
CI_STARTED=$(date +%s)
CI_STEP=""
CI_STEP_STARTED=0
CI_TIMINGS="$CI_STATE/timings"
: >"$CI_TIMINGS"
CI_JOBS=()

ci_now() { echo $(($(date +%s) - CI_STARTED)); }

# ci_cpu FILE: writes the CPU seconds (user + system) of this shell's waited-for
# children so far into FILE. Through a file, not $(...): `times` in a command
# substitution would report the substitution's own subshell. Processes that
# leave the tree (containers run by dockerd, BuildKit's builds) are not counted.
ci_cpu() {
  times >"$1.times"
  awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); t += p[1] * 60 + p[2] } printf "%d\n", t }' \
    "$1.times" >"$1"
}
# ci_step_cpu FILE: as ci_cpu, less the CPU of the jobs that ended so far: a
# job's runner is this shell's child, so its CPU joins this shell's children's
# once it exits, in whichever step that happens (give or take a job that ends
# at a step's boundary).
ci_step_cpu() {
  ci_cpu "$1"
  # No job may have ended yet (a new machine's first steps): no *.jobcpu, and
  # the unmatched pattern must not reach cat (pipefail would end the run).
  local ended=("$CI_STATE"/*.jobcpu)
  [ -e "${ended[0]}" ] || ended=()
  cat "$1" "${ended[@]}" | awk 'NR == 1 { t = $1; next } { t -= $1 } END { print t }' >"$1.net"
  mv "$1.net" "$1"
}

# ci_step NAME: ends the current step (its duration goes to the report) and starts NAME.
ci_step() {
  ci_step_end
  CI_STEP=$1
  CI_STEP_STARTED=$(date +%s)
  ci_step_cpu "$CI_STATE/cpu-step-start"
  echo "== $1 (at $(ci_now) s)"
}
ci_step_end() {
  if [ -n "$CI_STEP" ]; then
    ci_step_cpu "$CI_STATE/cpu-step-end"
    printf 'step\t%s\t%s\t%s\n' "$(($(date +%s) - CI_STEP_STARTED))" "$CI_STEP" \
      "$(cat "$CI_STATE/cpu-step-end" "$CI_STATE/cpu-step-start" | awk 'NR == 1 { t = $1 } NR == 2 { t -= $1 } END { print (t > 0 ? t : 0) }')" >>"$CI_TIMINGS"
    CI_STEP=""
  fi
}

# `setsid bash -c "$CI_PRIORITIZED" NICE COMMAND...` runs COMMAND in a session
# (so an autogroup) of its own whose niceness is NICE, the tasks' own too.
# shellcheck disable=SC2016,SC2089 # a script for bash -c, expanded there
CI_PRIORITIZED='echo "$0" >/proc/self/autogroup 2>/dev/null || true; exec nice -n "$0" "$@"'

# ci_job NAME [--normal] [--after JOB...] -- COMMAND...: runs COMMAND in the
# background at low priority (niceness 15 and SCHED_IDLE; idle I/O class where
# the scheduler has one), after the named jobs succeeded. --normal keeps the
# steps' priority: for a suite that runs beside the steps (it mostly waits on
# servers, and its timed checks must not starve while a step compiles), or a
# build on the kind chain. Output: $CI_STATE/NAME.log; exit code:
# $CI_STATE/NAME.rc, written last. The job's runner is a new bash process
# (not a subshell) so that its environment, which .ci/leftovers.py reads,
# carries the jobs' token.
ci_job() {
  local name=$1 after=() priority=idle
  shift
  if [ "${1:-}" = --normal ]; then priority=normal; shift; fi
  if [ "${1:-}" = --after ]; then
    shift
    while [ "$1" != -- ]; do after+=("$1"); shift; done
  fi
  [ "${1:-}" = -- ] && shift
  CI_JOBS+=("$name")
  # The runner leads a process group of its own (setsid does not fork here: a
  # background command of a script is no group leader), so that a runner
  # still waiting for its dependencies is stopped with its `sleep`.
  CNPGI_CI_RUN="$CNPGI_CI_RUN-bg" setsid bash -c 'ci_job_run "$@"' ci_job_run "$name" "$priority" "${#after[@]}" "${after[@]}" "$@" &
  echo "$!" >"$CI_STATE/$name.runner"
}
# ci_job_run NAME PRIORITY N DEP_1..DEP_N COMMAND...: the runner of ci_job.
ci_job_run() {
  local name=$1 priority=$2 n=$3 dep rc=0 started nice=(15 chrt --idle 0 ionice -c 3)
  shift 3
  if [ "$priority" = normal ]; then nice=(0); fi
  cd "$CI_REPO" || exit 1
  for dep in "${@:1:$n}"; do
    while [ ! -e "$CI_STATE/$dep.rc" ]; do sleep 2; done
    if [ "$(cat "$CI_STATE/$dep.rc")" != 0 ]; then
      echo "not started: job $dep failed" >"$CI_STATE/$name.log"
      echo 1 >"$CI_STATE/$name.rc"
      return 0
    fi
  done
  shift "$n"
  printf 'start\t%s\t%s\n' "$(ci_now)" "$name" >>"$CI_TIMINGS"
  started=$(date +%s)
  printf 'priority\t%s\t%s\n' "$priority" "$name" >>"$CI_TIMINGS"
  setsid bash -c "$CI_PRIORITIZED" "${nice[@]}" "$@" >"$CI_STATE/$name.log" 2>&1 </dev/null &
  echo "$!" >"$CI_STATE/$name.pid"
  wait "$!" || rc=$?
  ci_cpu "$CI_STATE/$name.jobcpu"
  printf 'job\t%s\t%s\t%s\n' "$(($(date +%s) - started))" "$name" "$(cat "$CI_STATE/$name.jobcpu")" >>"$CI_TIMINGS"
  echo "$rc" >"$CI_STATE/$name.rc"
}
export -f ci_job_run ci_now ci_cpu
# shellcheck disable=SC2090 # CI_PRIORITIZED is a script for bash -c, not words
export CI_STATE CI_STARTED CI_TIMINGS CI_PRIORITIZED

# ci_await JOB...: waits until each job ended; fails the run, with the job's
# log tail, if one failed. The wait is timed into the report.
ci_await() {
  local name waited_from rc
  waited_from=$(date +%s)
  for name in "$@"; do
    while [ ! -e "$CI_STATE/$name.rc" ]; do sleep 1; done
    rc=$(cat "$CI_STATE/$name.rc")
    if [ "$rc" != 0 ]; then
      echo "FAIL: background job '$name' exited $rc; the end of its log ($CI_STATE/$name.log):" >&2
      tail -n 60 "$CI_STATE/$name.log" >&2
      exit 1
    fi
  done
  printf 'wait\t%s\t%s\n' "$(($(date +%s) - waited_from))" "$*" >>"$CI_TIMINGS"
}

# ci_await_report JOB [REGEX]: waits for JOB to end, prints its log (only the
# lines matching REGEX, when given) whether it passed or failed, then
# ci_await JOB: for a suite run as a job, whose report belongs in the step's.
ci_await_report() {
  local name=$1
  while [ ! -e "$CI_STATE/$name.rc" ]; do sleep 1; done
  if [ $# -ge 2 ]; then
    grep -E "$2" "$CI_STATE/$name.log" || true
  else
    cat "$CI_STATE/$name.log"
  fi
  ci_await "$name"
}

# ci_stop_jobs: SIGTERM to every job still running (each is a session of its
# own: its children too), up to 30 s for their traps to clean up.
ci_stop_jobs() {
  local name pid stopped=()
  for name in "${CI_JOBS[@]}"; do
    [ -e "$CI_STATE/$name.rc" ] && continue
    if pid=$(cat "$CI_STATE/$name.pid" 2>/dev/null); then
      if kill -TERM -- "-$pid" 2>/dev/null; then stopped+=("$pid"); fi
    fi
    # Its runner too: waiting for a dependency, or for the command just stopped.
    if pid=$(cat "$CI_STATE/$name.runner" 2>/dev/null); then
      if kill -TERM -- "-$pid" 2>/dev/null; then stopped+=("$pid"); fi
    fi
  done
  for pid in "${stopped[@]}"; do
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  done
}

# ci_report: the steps and background jobs, in seconds.
ci_report() {
  ci_step_end
  echo "== timings (total $(ci_now) s)"
  awk -F '\t' '
    $1 == "step" { printf "  step  %5d s  %s (CPU %d s)\n", $2, $3, $4 }
    $1 == "wait" && $2 > 0 { printf "  wait  %5d s  for %s\n", $2, $3 }
    $1 == "priority" { priority[$3] = $2 }
    $1 == "job"  { printf "  job   %5d s  %s (background, %s priority; CPU %d s)\n", $2, $3, priority[$3], $4 }
  ' "$CI_TIMINGS"
  if [ -n "${CNPGI_CI_TIMINGS:-}" ]; then
    cp "$CI_TIMINGS" "$CNPGI_CI_TIMINGS"
  fi
  # The background jobs' whole logs, kept (they go with $CI_STATE otherwise):
  # where a cold run's time went, for whoever shortens it.
  if [ -n "${CNPGI_CI_JOB_LOGS:-}" ]; then
    mkdir -p "$CNPGI_CI_JOB_LOGS"
    cp "$CI_STATE"/*.log "$CNPGI_CI_JOB_LOGS"/ 2>/dev/null || true
  fi
}
