//! Recovery target times, read and written as CloudNativePG does.
//!
//! `recoveryTarget.targetTime` may be written in PostgreSQL's format
//! (`2026-01-02 03:04:05.123456+00`) or RFC 3339 (`2026-01-02T03:04:05Z`,
//! with or without fraction, or without zone: UTC). [`parse`] reads all of
//! them (to choose the backup to restore); [`to_postgres`] rewrites the
//! RFC 3339 forms into PostgreSQL's for `recovery_target_time` and leaves
//! anything else as written, exactly as CloudNativePG's
//! `ConvertToPostgresFormat`.
//!
//! ```
//! use cnpgi_wal_archive::pgtime::{parse, to_postgres};
//!
//! assert_eq!(to_postgres("2026-01-02T03:04:05Z"), "2026-01-02 03:04:05.000000+00:00");
//! assert_eq!(parse("2026-01-02 03:04:05+00")?, parse("2026-01-02T03:04:05Z")?);
//! # Ok::<(), cnpgi_wal_archive::pgtime::TimeError>(())
//! ```

use chrono::{DateTime, FixedOffset, NaiveDateTime, Utc};

/// A time that is in none of the accepted formats.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not a time (RFC 3339 like 2026-01-02T03:04:05Z, or PostgreSQL's 2026-01-02 03:04:05+00)")]
pub struct TimeError(String);

fn rfc3339(text: &str) -> Option<DateTime<FixedOffset>> {
    DateTime::parse_from_rfc3339(text).ok()
}

fn rfc3339_without_zone(text: &str) -> Option<NaiveDateTime> {
    NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").ok()
}

/// PostgreSQL's output format: `YYYY-MM-DD HH:MM:SS[.ffffff][±HH[:MM[:SS]]]`,
/// UTC without a zone.
fn postgres(text: &str) -> Option<DateTime<Utc>> {
    let (date_time, offset_seconds) = match text.rfind(['+', '-']).filter(|&i| i > 10) {
        Some(i) => {
            let (base, zone) = text.split_at(i);
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            let mut seconds = 0i32;
            for (index, part) in zone[1..].split(':').enumerate() {
                if index > 2 || part.len() != 2 || !part.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                let value: i32 = part.parse().ok()?;
                seconds += value * [3600, 60, 1][index];
            }
            (base, sign * seconds)
        }
        None => (text, 0),
    };
    let naive = NaiveDateTime::parse_from_str(date_time, "%Y-%m-%d %H:%M:%S%.f").ok()?;
    let offset = FixedOffset::east_opt(offset_seconds)?;
    Some(naive.and_local_timezone(offset).single()?.with_timezone(&Utc))
}

/// Reads a target time in any accepted format.
///
/// # Errors
///
/// [`TimeError`] for anything else.
pub fn parse(text: &str) -> Result<DateTime<Utc>, TimeError> {
    postgres(text)
        .or_else(|| rfc3339(text).map(|t| t.with_timezone(&Utc)))
        .or_else(|| rfc3339_without_zone(text).map(|t| t.and_utc()))
        .ok_or_else(|| TimeError(text.chars().take(64).collect()))
}

/// The value of `recovery_target_time` for `text`, as CloudNativePG writes it.
pub fn to_postgres(text: &str) -> String {
    let format = |t: DateTime<FixedOffset>| t.format("%Y-%m-%d %H:%M:%S%.6f%:z").to_string();
    if let Some(t) = rfc3339(text) {
        return format(t);
    }
    if let Some(t) = rfc3339_without_zone(text) {
        return format(t.and_utc().fixed_offset());
    }
    text.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_cloudnative_pg() {
        // Expected values from machinery's ConvertToPostgresFormat tests.
        assert_eq!(to_postgres("2023-07-06T08:00:39Z"), "2023-07-06 08:00:39.000000+00:00");
        assert_eq!(
            to_postgres("2023-07-06T08:00:39.123456Z"),
            "2023-07-06 08:00:39.123456+00:00"
        );
        assert_eq!(
            to_postgres("2023-07-06T08:00:39+02:00"),
            "2023-07-06 08:00:39.000000+02:00"
        );
        assert_eq!(to_postgres("2023-07-06T08:00:39"), "2023-07-06 08:00:39.000000+00:00");
        assert_eq!(to_postgres("2023-07-06 08:00:39.123+00"), "2023-07-06 08:00:39.123+00");
        assert_eq!(to_postgres("yesterday"), "yesterday");
    }

    #[test]
    fn parses_every_accepted_form() {
        let utc = parse("2023-07-06T08:00:39Z").unwrap();
        for same in [
            "2023-07-06 08:00:39",
            "2023-07-06 08:00:39+00",
            "2023-07-06 08:00:39.000000+00:00",
            "2023-07-06 10:00:39+02",
            "2023-07-06 06:30:39-01:30",
            "2023-07-06T08:00:39",
            "2023-07-06T10:00:39+02:00",
        ] {
            assert_eq!(parse(same).unwrap(), utc, "{same}");
        }
        assert_eq!(
            parse("2023-07-06 08:00:39.5+00").unwrap().timestamp_subsec_millis(),
            500
        );
        for bad in [
            "",
            "now",
            "2023-07-06",
            "2023-07-06 25:00:00",
            "2023-07-06 08:00:39+0",
            "2023-07-06 08:00:39+00:00:00:00",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
