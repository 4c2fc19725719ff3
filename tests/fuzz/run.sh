#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for a bounded time over its committed
# corpus (fuzz/corpus/<target>). The nightly workflow (.github/workflows/fuzz.yml,
# 300 s each) and developers run it; .ci/run does not: per change, `cargo test
# --workspace` replays the corpus through the targets' logic (fuzz/targets,
# tests/corpus.rs), on stable and without instrumentation.
#
#   bash tests/fuzz/run.sh [SECONDS_PER_TARGET]     (default 20)
#   bash tests/fuzz/run.sh --build-only              (the targets' build alone)
#
# Installs cargo-fuzz (pinned) and a nightly toolchain if missing; builds the
# targets in the dev profile with libFuzzer's coverage instrumentation and
# AddressSanitizer, in their own target directory (CNPGI_FUZZ_TARGET, default
# ~/.cache/cnpgi-ci/fuzz-target). New inputs the fuzzer finds go to a
# temporary directory, not the repository. A crash, a timeout (-timeout) or an
# allocation over -malloc_limit_mb fails the run: libFuzzer's report is
# printed with the input, kept as fuzz/artifacts/<target>/crash-*; make it a
# regression test (a unit test beside the decoder) and commit its input to
# the target's corpus, which `cargo test` then replays on every change.
set -euo pipefail
cd "$(dirname "$0")/../.."
build_only=0
if [ "${1:-}" = --build-only ]; then build_only=1; shift; fi
seconds=${1:-20}
case "$seconds" in '' | *[!0-9]*) echo "tests/fuzz/run.sh: SECONDS_PER_TARGET must be a number, not '$seconds'" >&2; exit 2 ;; esac
CARGO_FUZZ_VERSION=0.13.2
tools=${CNPGI_FUZZ_TOOLS:-$HOME/.cache/cnpgi-ci/fuzz-tools}
export CARGO_TARGET_DIR=${CNPGI_FUZZ_TARGET:-$HOME/.cache/cnpgi-ci/fuzz-target}
export PATH="$tools/bin:$PATH"
export CARGO_TERM_COLOR=never CARGO_INCREMENTAL=0

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  rustup toolchain install nightly --profile minimal >/dev/null ||
    { echo "tests/fuzz/run.sh: cannot install Rust nightly (cargo fuzz's sanitizers need it)" >&2; exit 1; }
fi
if [ "$(cargo-fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  cargo install --quiet --locked --root "$tools" cargo-fuzz --version "$CARGO_FUZZ_VERSION" ||
    { echo "tests/fuzz/run.sh: cannot install cargo-fuzz $CARGO_FUZZ_VERSION" >&2; exit 1; }
fi

targets=$(cargo +nightly fuzz list --fuzz-dir fuzz)
# -O is off (--dev): the profile every test here uses, and a shorter build.
cargo +nightly fuzz build --fuzz-dir fuzz --dev
[ "$build_only" = 0 ] || exit 0
found=$(mktemp -d)
trap 'rm -rf "$found"' EXIT
failed=0
for target in $targets; do
  mkdir -p "$found/$target"
  started=$SECONDS
  if cargo +nightly fuzz run --fuzz-dir fuzz --dev "$target" "$found/$target" "fuzz/corpus/$target" -- \
    -max_total_time="$seconds" -timeout=10 -malloc_limit_mb=256 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 >"$found/$target.log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$found/$target.log")
    echo "ok   fuzz $target: ${runs:-?} inputs in $((SECONDS - started)) s, no crash"
  else
    failed=$((failed + 1))
    echo "FAIL fuzz $target:"
    tail -n 40 "$found/$target.log"
  fi
done
echo "fuzz: $(wc -w <<<"$targets") targets, $failed failed"
[ "$failed" = 0 ]
