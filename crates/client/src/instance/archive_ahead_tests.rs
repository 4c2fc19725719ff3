//! The spool's markers: written whole, used once, and never trusted for a
//! file, a Cluster or a set of plugins they were not written for.

#![allow(clippy::unwrap_used)]

use super::*;

const SEGMENT: &str = "000000010000000000000003";

fn cluster(uid: &str, plugins: &[&str]) -> Value {
    let plugins: Vec<Value> = plugins.iter().map(|name| json!({"name": name})).collect();
    json!({"metadata": {"uid": uid}, "spec": {"plugins": plugins}})
}

/// PGDATA with `pg_wal/archive_status`, and a spool beside it.
fn layout() -> (tempfile::TempDir, PathBuf, Spool) {
    let root = tempfile::tempdir().unwrap();
    let wal = root.path().join("pgdata/pg_wal");
    std::fs::create_dir_all(wal.join("archive_status")).unwrap();
    let spool = Spool {
        dir: root.path().join("spool"),
    };
    (root, wal, spool)
}

/// A marker for `file` as it is now, written for `identity`.
async fn mark(spool: &Spool, identity: &Identity, file: &Path) {
    std::fs::create_dir_all(&spool.dir).unwrap();
    let (size, blake3) = digest(file.to_owned()).await.unwrap();
    let name = file.file_name().unwrap().to_str().unwrap();
    spool
        .write(name, &identity.marker(size, &blake3, &["p".to_owned()]))
        .unwrap();
}

#[tokio::test]
async fn a_marker_answers_once_for_the_file_it_was_written_for() {
    let (_root, wal, spool) = layout();
    let file = wal.join(SEGMENT);
    std::fs::write(&file, b"segment bytes").unwrap();
    let identity = Identity::of(&cluster("u1", &["p"]));
    mark(&spool, &identity, &file).await;
    assert!(!spool.dir.join(format!("{SEGMENT}.tmp")).exists(), "renamed into place");

    assert_eq!(spool.take(SEGMENT, &file, &identity).await, Ok(true));
    assert!(!spool.dir.join(SEGMENT).exists(), "used once");
    assert_eq!(spool.take(SEGMENT, &file, &identity).await, Ok(false));
}

#[tokio::test]
async fn a_marker_that_does_not_match_is_dropped_not_trusted() {
    let (_root, wal, spool) = layout();
    let file = wal.join(SEGMENT);
    let identity = Identity::of(&cluster("u1", &["p"]));
    let cases: [(&str, Identity, &[u8]); 4] = [
        ("the file changed", identity.clone(), b"other bytes"),
        (
            "another Cluster",
            Identity::of(&cluster("u2", &["p"])),
            b"segment bytes",
        ),
        (
            "a plugin enabled since",
            Identity::of(&cluster("u1", &["p", "q"])),
            b"segment bytes",
        ),
        ("the same bytes, longer", identity.clone(), b"segment bytes and more"),
    ];
    for (case, now, contents) in cases {
        std::fs::write(&file, b"segment bytes").unwrap();
        mark(&spool, &identity, &file).await;
        std::fs::write(&file, contents).unwrap();
        let why = spool.take(SEGMENT, &file, &now).await.unwrap_err();
        assert!(why.contains("dropped"), "{case}: {why}");
        assert!(!spool.dir.join(SEGMENT).exists(), "{case}: removed");
    }
    let why = {
        std::fs::write(spool.dir.join(SEGMENT), b"{half a mark").unwrap();
        spool.take(SEGMENT, &file, &identity).await.unwrap_err()
    };
    assert!(why.contains("not a marker"), "{why}");
}

#[test]
fn the_mismatch_names_what_differs() {
    let identity = Identity::of(&cluster("u1", &["b", "a", "a"]));
    assert_eq!(identity.enabled, ["a", "b"], "sorted, once each");
    let marker: Value = serde_json::from_slice(&identity.marker(5, "abc", &["a".to_owned()])).unwrap();
    assert_eq!(identity.mismatch(&marker, 5, "abc"), None);
    let changed = identity.mismatch(&marker, 5, "abd").unwrap();
    assert!(
        changed.contains("the file changed") && changed.contains("abd"),
        "{changed}"
    );
    let other = Identity::of(&cluster("u2", &["a", "b"]))
        .mismatch(&marker, 5, "abc")
        .unwrap();
    assert!(other.contains("Cluster uid \"u1\""), "{other}");
    for version in [1, 3] {
        // Version 1 held a SHA-256: dropped, not read as a BLAKE3.
        let mut other = marker.clone();
        other["version"] = json!(version);
        let why = identity.mismatch(&other, 5, "abc").unwrap();
        assert!(why.contains(&format!("version {version}")), "{why}");
    }
}

#[test]
fn prepare_lists_ready_segments_in_order_and_clears_stale_markers() {
    let (_root, wal, spool) = layout();
    let status = wal.join("archive_status");
    for file in [
        "000000010000000000000005.ready",
        "000000010000000000000004.ready",
        "000000010000000000000003.ready",
        "000000010000000000000002.done",
        "00000002.history.ready",
        "000000010000000000000006.partial.ready",
    ] {
        std::fs::write(status.join(file), b"").unwrap();
    }
    std::fs::create_dir_all(&spool.dir).unwrap();
    for stale in ["000000010000000000000002", "000000010000000000000004.tmp"] {
        std::fs::write(spool.dir.join(stale), b"{}").unwrap();
    }
    std::fs::write(spool.dir.join("000000010000000000000005"), b"{}").unwrap();
    std::fs::write(status.join("000000010000000000000007.ready"), b"").unwrap();

    let ready = spool.prepare(&wal.join(SEGMENT), SEGMENT).unwrap();
    assert_eq!(
        ready,
        ["000000010000000000000004", "000000010000000000000007"],
        "segments only, not the one asked for nor one with a marker, in PostgreSQL's order"
    );
    let mut left: Vec<String> = std::fs::read_dir(&spool.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["000000010000000000000005"],
        "the marker of a ready segment stays"
    );
}

#[test]
fn a_spool_that_cannot_be_made_is_an_error_that_names_it() {
    let (root, wal, _) = layout();
    std::fs::write(root.path().join("file"), b"").unwrap();
    let spool = Spool {
        dir: root.path().join("file/spool"),
    };
    let why = spool.prepare(&wal.join(SEGMENT), SEGMENT).unwrap_err();
    assert!(
        why.contains("cannot create the spool directory") && why.contains("file/spool"),
        "{why}"
    );
}
