//! PostgreSQL log sequence numbers and the WAL segment that holds one.
//!
//! A backup records where it starts and ends both as LSNs (`0/3000028`) and
//! as WAL file names (`000000010000000000000003`); PostgreSQL cannot name
//! the file on a standby (`pg_walfile_name` fails during recovery), so the
//! plugin computes it from the LSN, the timeline and the segment size.
//!
//! ```
//! use cnpgi_wal_archive::storage::lsn::Lsn;
//!
//! let lsn: Lsn = "1/3000028".parse()?;
//! assert_eq!(lsn.to_string(), "1/3000028");
//! assert_eq!(lsn.segment_file_name(2, 16 * 1024 * 1024), "000000020000000100000003");
//! # Ok::<(), cnpgi_wal_archive::storage::lsn::LsnError>(())
//! ```

use std::fmt;
use std::str::FromStr;

/// A WAL position, as PostgreSQL's `pg_lsn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

/// A string that is not an LSN.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not a PostgreSQL LSN (two hexadecimal numbers separated by '/', like 0/3000028)")]
pub struct LsnError(String);

impl FromStr for Lsn {
    type Err = LsnError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || LsnError(text.chars().take(64).collect());
        let (high, low) = text.split_once('/').ok_or_else(invalid)?;
        let part = |s: &str| {
            if s.is_empty() || s.len() > 8 {
                return Err(invalid());
            }
            u32::from_str_radix(s, 16).map_err(|_| invalid())
        };
        Ok(Self((u64::from(part(high)?) << 32) | u64::from(part(low)?)))
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

impl Lsn {
    /// The name of the WAL segment holding this position on `timeline`.
    pub fn segment_file_name(self, timeline: u32, segment_size: u64) -> String {
        segment_file_name(timeline, self.0 / segment_size.max(1), segment_size)
    }

    /// The name of the segment holding the byte just before this position:
    /// the last segment a backup ending here needs (PostgreSQL's
    /// `XLByteToPrevSeg`), which differs from [`Lsn::segment_file_name`]
    /// when the position is at a segment boundary.
    pub fn previous_segment_file_name(self, timeline: u32, segment_size: u64) -> String {
        segment_file_name(timeline, self.0.saturating_sub(1) / segment_size.max(1), segment_size)
    }
}

/// The file name of segment number `segno` (as PostgreSQL's `XLogFileName`).
fn segment_file_name(timeline: u32, segno: u64, segment_size: u64) -> String {
    let per_id = 0x1_0000_0000 / segment_size.max(1);
    format!("{timeline:08X}{:08X}{:08X}", segno / per_id, segno % per_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB16: u64 = 16 * 1024 * 1024;

    #[test]
    fn parses_and_prints_like_postgres() {
        for text in ["0/0", "0/3000028", "1/FF000000", "FFFFFFFF/FFFFFFFF"] {
            assert_eq!(text.parse::<Lsn>().unwrap().to_string(), text);
        }
        assert_eq!("0/a".parse::<Lsn>().unwrap(), Lsn(10));
        for bad in ["", "0", "/1", "1/", "x/1", "1/2/3", "123456789/0", "0/-1"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad}");
        }
    }

    #[test]
    fn segment_names_match_postgres() {
        // Values checked against pg_walfile_name() on PostgreSQL 15.
        let lsn: Lsn = "0/3000028".parse().unwrap();
        assert_eq!(lsn.segment_file_name(1, MB16), "000000010000000000000003");
        assert_eq!(lsn.previous_segment_file_name(1, MB16), "000000010000000000000003");
        let boundary: Lsn = "0/4000000".parse().unwrap();
        assert_eq!(boundary.segment_file_name(1, MB16), "000000010000000000000004");
        assert_eq!(boundary.previous_segment_file_name(1, MB16), "000000010000000000000003");
        let high: Lsn = "2/FF000000".parse().unwrap();
        assert_eq!(high.segment_file_name(3, MB16), "0000000300000002000000FF");
        // 64 MiB segments: 64 per "log".
        let big: Lsn = "1/C0000000".parse().unwrap();
        assert_eq!(big.segment_file_name(1, 64 * 1024 * 1024), "000000010000000100000030");
    }
}
