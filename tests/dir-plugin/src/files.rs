//! File operations that leave no half-written file behind.

use std::{
    fs,
    io::{self, Write as _},
    path::Path,
};

/// Writes `contents` to `path` through a temporary file in the same
/// directory, synced and renamed into place.
pub(crate) fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = fs::File::create(&temporary)?;
        file.write_all(contents)?;
        file.sync_all()?;
        fs::rename(&temporary, path)?;
        fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    result
}

/// Copies the tree `from` into `to` (created), skipping what `skip` names
/// (relative to `from`); returns the number of files copied.
pub(crate) fn copy_tree(from: &Path, to: &Path, skip: &dyn Fn(&Path) -> bool) -> io::Result<u64> {
    fn walk(root: &Path, from: &Path, to: &Path, skip: &dyn Fn(&Path) -> bool) -> io::Result<u64> {
        fs::create_dir_all(to)?;
        let mut copied = 0;
        for entry in fs::read_dir(from)? {
            let entry = entry?;
            let source = entry.path();
            let relative = source.strip_prefix(root).unwrap_or(&source);
            if skip(relative) {
                continue;
            }
            let target = to.join(entry.file_name());
            let kind = entry.file_type()?;
            if kind.is_dir() {
                copied += walk(root, &source, &target, skip)?;
            } else if kind.is_file() {
                fs::copy(&source, &target)?;
                copied += 1;
            }
        }
        Ok(copied)
    }
    walk(from, from, to, skip)
}
