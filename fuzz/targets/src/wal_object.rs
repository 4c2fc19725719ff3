//! The `wal_object` target: the wal-archive plugin's stored objects and WAL segment headers.

use cnpgi_core::wal_segment::check_segment;
use cnpgi_wal_archive::storage::object::{decode, header};

/// What a store returns for a WAL file (the wal-archive plugin's object
/// format: a header, then zstd), and the first bytes of a file PostgreSQL
/// asks to archive: decoded or refused, never a panic, and never a
/// reservation of the size a forged header announces (libFuzzer's
/// -malloc_limit_mb fails one; see the corpus' `claims-900-mb`).
pub fn wal_object(data: &[u8]) {
    let _ = header(data);
    let _ = decode(data, "000000010000000000000003");
    let _ = check_segment(data.len() as u64, data, Some(16 << 20));
    let _ = check_segment(16 << 20, data, None);
}
