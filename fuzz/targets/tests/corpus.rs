//! Replays every committed input of `fuzz/corpus/<target>/` through its fuzz
//! target, so `cargo test --workspace` checks on every change what the nightly
//! fuzzing found and kept (crash regressions included), without libFuzzer.

use std::{
    fs,
    panic::{self, AssertUnwindSafe},
    path::{Path, PathBuf},
};

/// A fuzz target: its name and its function.
type Target = (&'static str, fn(&[u8]));

/// Every target of `fuzz/Cargo.toml`.
const TARGETS: &[Target] = &[
    ("admission_review", cnpgi_fuzz_targets::admission_review),
    ("cluster_file", cnpgi_fuzz_targets::cluster_file),
    ("cluster_wire", cnpgi_fuzz_targets::cluster_wire),
    ("json_patch", cnpgi_fuzz_targets::json_patch),
    ("wal_object", cnpgi_fuzz_targets::wal_object),
];

/// `fuzz/`, this crate's parent directory.
fn fuzz_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("fuzz/targets has a parent")
}

/// The `[[bin]]` names of `fuzz/Cargo.toml`: cargo fuzz's targets.
fn declared_targets() -> Vec<String> {
    let manifest = fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml is readable");
    let mut names = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin && let Some(value) = line.strip_prefix("name") {
            let name = value.trim_start().trim_start_matches('=').trim().trim_matches('"');
            names.push(name.to_owned());
        }
    }
    names
}

#[test]
fn every_fuzz_target_is_replayed() {
    let declared = declared_targets();
    assert!(!declared.is_empty(), "no [[bin]] found in fuzz/Cargo.toml");
    let replayed: Vec<&str> = TARGETS.iter().map(|(name, _)| *name).collect();
    let missing: Vec<&String> = declared
        .iter()
        .filter(|name| !replayed.contains(&name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "fuzz targets of fuzz/Cargo.toml without a corpus replay: {missing:?}; add each to TARGETS in {}",
        file!()
    );
    let undeclared: Vec<&&str> = replayed
        .iter()
        .filter(|name| !declared.iter().any(|d| d == *name))
        .collect();
    assert!(
        undeclared.is_empty(),
        "replayed targets not in fuzz/Cargo.toml: {undeclared:?}"
    );
}

#[test]
fn every_corpus_input_passes_its_target() {
    let mut failures = Vec::new();
    let mut problems = Vec::new();
    for (target, run) in TARGETS {
        let dir = fuzz_dir().join("corpus").join(target);
        let mut inputs: Vec<PathBuf> = match fs::read_dir(&dir) {
            Ok(entries) => entries
                .map(|entry| entry.expect("a corpus directory entry").path())
                .filter(|path| path.is_file())
                .collect(),
            Err(error) => {
                problems.push(format!("{target}: cannot read {}: {error}", dir.display()));
                continue;
            }
        };
        if inputs.is_empty() {
            problems.push(format!("{target}: {} holds no input", dir.display()));
        }
        inputs.sort();
        for input in inputs {
            let data = fs::read(&input).expect("a corpus input is readable");
            // The panic's own message is printed by the hook as it happens;
            // the list at the end names the target and input of each.
            if let Err(panic) = panic::catch_unwind(AssertUnwindSafe(|| run(&data))) {
                let message = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(not a string)");
                failures.push(format!(
                    "{target} panicked on {}: {message}\n  reproduce with `cargo +nightly fuzz run {target} {}` \
                     (from the repository root); fix the bug with a unit test beside the code, and keep the input here",
                    input.display(),
                    input.display()
                ));
            }
        }
    }
    let mut report = String::new();
    if !problems.is_empty() {
        report += &format!(
            "every fuzz target needs a non-empty corpus (fuzz/corpus/<target>/):\n{}\n",
            problems.join("\n")
        );
    }
    if !failures.is_empty() {
        report += &format!(
            "{} corpus input(s) failed their fuzz target:\n{}\n",
            failures.len(),
            failures.join("\n")
        );
    }
    assert!(report.is_empty(), "{report}");
}
