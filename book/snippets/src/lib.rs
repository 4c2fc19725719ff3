//! The Rust code blocks of `README.md` and of the book's chapters
//! (`book/src`), compiled as doc-tests of this crate, and run unless marked
//! `no_run`: `cargo test -p cnpgi-book-snippets --doc`. Each markdown file
//! is the documentation of one item below, which exists only when rustdoc
//! collects doc-tests. Blocks in another language carry their info string
//! (`sh`, `console`, `toml`, `yaml`, `text`), which rustdoc skips; a block
//! without one would be compiled as Rust.
//!
//! The test below holds this list to the chapters: every markdown file of
//! `book/src`, but the generated reference pages, is included here.

/// `README.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct Readme;

macro_rules! chapters {
    ($($name:ident = $path:literal;)*) => {
        $(
            #[doc = concat!("`book/src/", $path, "`.")]
            #[cfg(doctest)]
            #[doc = include_str!(concat!("../../src/", $path))]
            pub struct $name;
        )*
        /// The chapters included above, relative to `book/src`.
        #[cfg(test)]
        const CHAPTERS: &[&str] = &[$($path),*];
    };
}

chapters! {
    Summary = "SUMMARY.md";
    Introduction = "introduction.md";
    FirstPlugin = "tutorial/first-plugin.md";
    RunLocally = "tutorial/run-locally.md";
    OnCloudNativePg = "tutorial/on-cloudnative-pg.md";
    WritingPlugins = "guides/writing-plugins.md";
    Deploy = "guides/deploy.md";
    HostPlugins = "guides/host-plugins.md";
    InstanceMode = "guides/instance-mode.md";
    WalPlugin = "guides/wal-plugin.md";
    Doctor = "guides/doctor.md";
    Ports = "operations/ports.md";
    ExitCodes = "operations/exit-codes.md";
    Timeouts = "operations/timeouts.md";
    Limits = "operations/limits.md";
    Metrics = "operations/metrics.md";
    WhenThingsGoWrong = "operations/when-things-go-wrong.md";
    Performance = "operations/performance.md";
    Architecture = "architecture.md";
    Testing = "testing.md";
    EndToEnd = "testing/end-to-end.md";
    Versioning = "versioning.md";
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Every markdown file under `dir`, relative to `root`.
    fn markdown_files(root: &Path, dir: &Path, found: &mut Vec<String>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                markdown_files(root, &path, found);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                let relative = path.strip_prefix(root).expect("under the root");
                found.push(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }

    /// A chapter added to the book without its line above would have its
    /// Rust blocks compiled by nobody.
    #[test]
    fn every_chapter_is_compiled() {
        let root: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src");
        let mut found = Vec::new();
        markdown_files(&root, &root, &mut found);
        // The reference pages are generated from the clap definitions: no Rust.
        found.retain(|path| !path.starts_with("reference/"));
        found.sort();
        let mut included: Vec<String> = super::CHAPTERS.iter().map(|path| (*path).to_owned()).collect();
        included.sort();
        assert_eq!(
            found, included,
            "book/snippets/src/lib.rs must include every chapter of book/src"
        );
    }
}
