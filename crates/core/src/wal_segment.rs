//! Whether a file PostgreSQL asks to archive can be a WAL segment: a name
//! shaped like one (24 hexadecimal digits) must come with a file of the
//! segment size, whose first page carries that size in its long header.
//!
//! PostgreSQL only hands complete segments to `archive_command`, so a file
//! of another size (0 bytes after a crash of the file system, a truncated
//! copy) is damage: archiving it would put a segment in the archive that
//! recovery later cannot replay. History files (`00000002.history`), backup
//! labels (`….backup`) and partial segments (`….partial`) have sizes of
//! their own and are not checked here.
//!
//! ```
//! use cnpgi_core::wal_segment::{check_segment, is_segment_name};
//!
//! assert!(is_segment_name("000000010000000000000003"));
//! assert!(!is_segment_name("00000002.history"));
//! let error = check_segment(0, &[], None).unwrap_err();
//! assert_eq!(error.to_string(), "it is empty (0 bytes), not a WAL segment");
//! ```

use serde_json::Value;

/// The smallest WAL segment size `initdb --wal-segsize` accepts (1 MiB).
pub const MIN_SEGMENT_SIZE: u64 = 1 << 20;
/// The largest (1 GiB).
pub const MAX_SEGMENT_SIZE: u64 = 1 << 30;
/// PostgreSQL's default segment size (16 MiB).
pub const DEFAULT_SEGMENT_SIZE: u64 = 16 << 20;
/// How many bytes of a segment [`check_segment`] reads: its long page
/// header (`XLogLongPageHeaderData`, 40 bytes on every platform PostgreSQL
/// supports).
pub const HEADER_LEN: usize = 40;

/// `xlp_info`'s flag of a long page header, set on the first page of every
/// segment (`XLP_LONG_HEADER` in `xlog_internal.h`).
const XLP_LONG_HEADER: u16 = 0x0002;
/// Offset of `xlp_seg_size` in the long header: after the 24-byte short
/// header (magic, info, timeline, page address, remaining length, padding)
/// and the 8-byte system identifier.
const SEG_SIZE_OFFSET: usize = 32;

/// Why a file cannot be the WAL segment its name says it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    /// The file is empty.
    #[error("it is empty (0 bytes), not a WAL segment")]
    Empty,
    /// The size is not one a WAL segment can have.
    #[error("its size, {size} bytes, is not a WAL segment size (a power of two from 1 MiB to 1 GiB)")]
    NotASegmentSize {
        /// The file's size.
        size: u64,
    },
    /// The size differs from the Cluster's segment size.
    #[error("its size, {size} bytes, differs from the Cluster's WAL segment size ({expected} bytes)")]
    WrongSize {
        /// The file's size.
        size: u64,
        /// `spec.bootstrap.initdb.walSegmentSize`, in bytes.
        expected: u64,
    },
    /// The first page has no long header.
    #[error("its first page has no WAL long page header (xlp_info {info:#06x})")]
    NoLongHeader {
        /// The `xlp_info` read.
        info: u16,
    },
    /// The long header gives another size.
    #[error("its size, {size} bytes, differs from the segment size its header records ({recorded} bytes)")]
    HeaderMismatch {
        /// The file's size.
        size: u64,
        /// `xlp_seg_size`.
        recorded: u64,
    },
}

/// Whether `name` is a WAL segment's name: 24 upper-case hexadecimal digits
/// (timeline, log, segment), as PostgreSQL writes them.
pub fn is_segment_name(name: &str) -> bool {
    name.len() == 24 && name.bytes().all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
}

/// The WAL segment size a Cluster states, in bytes: CloudNativePG's
/// `spec.bootstrap.initdb.walSegmentSize` (in MiB). `None` when it states
/// none (a Cluster bootstrapped from a backup keeps its origin's size, which
/// only the segments themselves record).
///
/// ```
/// let cluster = serde_json::json!({"spec": {"bootstrap": {"initdb": {"walSegmentSize": 64}}}});
/// assert_eq!(cnpgi_core::wal_segment::cluster_segment_size(&cluster), Some(64 << 20));
/// ```
pub fn cluster_segment_size(cluster: &Value) -> Option<u64> {
    let mib = cluster.pointer("/spec/bootstrap/initdb/walSegmentSize")?.as_u64()?;
    mib.checked_mul(1 << 20)
}

/// Checks that a file of `size` bytes starting with `header` (its first
/// [`HEADER_LEN`] bytes, or all of it when shorter) can be a WAL segment,
/// of `expected` bytes when the Cluster states a size.
///
/// # Errors
///
/// [`SegmentError`] saying what is wrong with it.
pub fn check_segment(size: u64, header: &[u8], expected: Option<u64>) -> Result<(), SegmentError> {
    if size == 0 {
        return Err(SegmentError::Empty);
    }
    if !size.is_power_of_two() || !(MIN_SEGMENT_SIZE..=MAX_SEGMENT_SIZE).contains(&size) {
        return Err(SegmentError::NotASegmentSize { size });
    }
    if let Some(expected) = expected
        && expected != size
    {
        return Err(SegmentError::WrongSize { size, expected });
    }
    // Both fields are written in the machine's byte order; PostgreSQL runs
    // on little-endian machines wherever these commands do (x86-64, arm64).
    let info = header.get(2..4).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
    if info & XLP_LONG_HEADER == 0 {
        return Err(SegmentError::NoLongHeader { info });
    }
    let recorded = header
        .get(SEG_SIZE_OFFSET..SEG_SIZE_OFFSET + 4)
        .map_or(0, |b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])));
    if recorded != size {
        return Err(SegmentError::HeaderMismatch { size, recorded });
    }
    Ok(())
}

/// The first [`HEADER_LEN`] bytes of a segment of `size` bytes as PostgreSQL
/// writes them (magic of PostgreSQL 15, timeline 1): for tests that need a
/// file [`check_segment`] accepts.
///
/// ```
/// let header = cnpgi_core::wal_segment::segment_header(16 << 20);
/// assert!(cnpgi_core::wal_segment::check_segment(16 << 20, &header, None).is_ok());
/// ```
pub fn segment_header(size: u32) -> [u8; HEADER_LEN] {
    let mut header = [0u8; HEADER_LEN];
    header[0..2].copy_from_slice(&0xD110u16.to_le_bytes());
    header[2..4].copy_from_slice(&(XLP_LONG_HEADER | 0x0004).to_le_bytes());
    header[4..8].copy_from_slice(&1u32.to_le_bytes());
    header[SEG_SIZE_OFFSET..SEG_SIZE_OFFSET + 4].copy_from_slice(&size.to_le_bytes());
    header[36..40].copy_from_slice(&8192u32.to_le_bytes());
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_are_24_upper_case_hex_digits() {
        assert!(is_segment_name("0000000100000000000000FF"));
        for name in [
            "0000000100000000000000ff",
            "00000001000000000000000",
            "000000010000000000000001.partial",
            "000000010000000000000001.00000028.backup",
            "00000002.history",
            "",
        ] {
            assert!(!is_segment_name(name), "{name}");
        }
    }

    #[test]
    fn only_whole_segments_with_their_header_pass() {
        let size = DEFAULT_SEGMENT_SIZE;
        let header = segment_header(16 << 20);
        assert_eq!(check_segment(size, &header, None), Ok(()));
        assert_eq!(check_segment(size, &header, Some(size)), Ok(()));
        assert_eq!(check_segment(0, &header, None), Err(SegmentError::Empty));
        assert_eq!(
            check_segment(size - 8192, &header, None),
            Err(SegmentError::NotASegmentSize { size: size - 8192 })
        );
        assert_eq!(
            check_segment(512 << 10, &header, None),
            Err(SegmentError::NotASegmentSize { size: 512 << 10 })
        );
        assert_eq!(
            check_segment(size, &header, Some(64 << 20)),
            Err(SegmentError::WrongSize {
                size,
                expected: 64 << 20
            })
        );
        assert_eq!(
            check_segment(size, &[0; HEADER_LEN], None),
            Err(SegmentError::NoLongHeader { info: 0 })
        );
        assert_eq!(
            check_segment(32 << 20, &header, None),
            Err(SegmentError::HeaderMismatch {
                size: 32 << 20,
                recorded: size
            })
        );
        assert_eq!(
            check_segment(size, &header[..10], None),
            Err(SegmentError::HeaderMismatch { size, recorded: 0 })
        );
    }

    #[test]
    fn the_cluster_states_its_size_in_mib() {
        let cluster = serde_json::json!({"spec": {"bootstrap": {"initdb": {"walSegmentSize": 1}}}});
        assert_eq!(cluster_segment_size(&cluster), Some(MIN_SEGMENT_SIZE));
        assert_eq!(cluster_segment_size(&serde_json::json!({})), None);
    }
}
