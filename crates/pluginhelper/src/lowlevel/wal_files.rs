//! WAL files as `cnpgi.wal.v1.WAL` handles them: the names PostgreSQL
//! archives, archive idempotence, the answer for a file the archive does not
//! have, and the service's `GetCapabilities` answer.
//!
//! CloudNativePG runs the plugin's `Archive` as PostgreSQL's
//! `archive_command` and `Restore` as its `restore_command`, so PostgreSQL's
//! rules apply:
//!
//! * archiving a name that is already archived **with the same content**
//!   must succeed (PostgreSQL retries after a crash), and **with different
//!   content** must fail, never overwrite ([`decide_archive`]);
//! * names are not only segments: `.partial` (end of a timeline on a
//!   promoted standby), `.history` (timeline switches) and `.backup` (backup
//!   history) files arrive too ([`WalFileName`]);
//! * restoring a file the archive lacks is an ordinary event (PostgreSQL
//!   probes for the next timeline's `.history`), answered with an error that
//!   lets PostgreSQL carry on: [`not_in_archive`] (`NOT_FOUND`).
//!
//! ```
//! use cnpgi_pluginhelper::lowlevel::wal_files::{ArchiveDecision, WalFileKind, WalFileName, decide_archive};
//!
//! let name = WalFileName::from_path("/var/lib/postgresql/data/pgdata/pg_wal/000000010000000000000003")?;
//! assert_eq!(name.kind(), WalFileKind::Segment);
//! assert_eq!(name.timeline(), 1);
//!
//! assert_eq!(decide_archive(&name, None::<&[u8]>, b"wal")?, ArchiveDecision::Store);
//! assert_eq!(decide_archive(&name, Some(&b"wal"[..]), b"wal")?, ArchiveDecision::AlreadyArchived);
//! assert!(decide_archive(&name, Some(&b"old"[..]), b"new").is_err());
//! # Ok::<(), cnpgi_pluginhelper::lowlevel::wal_files::WalError>(())
//! ```

use std::fmt;

use cnpgi_proto::wal::v1::{WalCapabilitiesResult, wal_capability};

/// What a WAL file is, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WalFileKind {
    /// A WAL segment: 24 hexadecimal digits (`000000010000000000000003`).
    Segment,
    /// The last, incomplete segment of a timeline (`<segment>.partial`).
    Partial,
    /// A timeline history file (`00000002.history`).
    History,
    /// A backup history file (`<segment>.<8 hex digits>.backup`).
    Backup,
}

/// A validated WAL file name (no directory part).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WalFileName {
    name: String,
    kind: WalFileKind,
    timeline: u32,
}

/// Why a WAL request cannot be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WalError {
    /// The name is not one PostgreSQL archives.
    #[error("{name:?} is not a WAL file name (a segment, .partial, .history or .backup file)")]
    InvalidName {
        /// The name given (bounded in length).
        name: String,
    },
    /// The name is archived with different content.
    #[error("WAL file {name} is already archived with different content; refusing to overwrite it")]
    Conflict {
        /// The WAL file.
        name: String,
    },
}

impl From<WalError> for tonic::Status {
    /// `INVALID_ARGUMENT` for a bad name, `ALREADY_EXISTS` for a conflict.
    fn from(error: WalError) -> Self {
        match error {
            WalError::InvalidName { .. } => tonic::Status::invalid_argument(error.to_string()),
            WalError::Conflict { .. } => tonic::Status::already_exists(error.to_string()),
        }
    }
}

fn is_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_lowercase())
}

impl WalFileName {
    /// Parses a bare WAL file name, e.g. PostgreSQL's `%f`.
    ///
    /// # Errors
    ///
    /// [`WalError::InvalidName`] for anything else, including names with a
    /// directory part or lowercase hexadecimal digits (PostgreSQL writes
    /// uppercase), so that a name can never escape the archive's layout.
    pub fn parse(name: &str) -> Result<Self, WalError> {
        let invalid = || WalError::InvalidName {
            name: name.chars().take(256).collect(),
        };
        let kind = if is_hex(name, 24) {
            WalFileKind::Segment
        } else if let Some(segment) = name.strip_suffix(".partial")
            && is_hex(segment, 24)
        {
            WalFileKind::Partial
        } else if let Some(timeline) = name.strip_suffix(".history")
            && is_hex(timeline, 8)
        {
            WalFileKind::History
        } else if let Some(rest) = name.strip_suffix(".backup")
            && let Some((segment, offset)) = rest.split_once('.')
            && is_hex(segment, 24)
            && is_hex(offset, 8)
        {
            WalFileKind::Backup
        } else {
            return Err(invalid());
        };
        let timeline = u32::from_str_radix(&name[..8], 16).map_err(|_| invalid())?;
        Ok(Self {
            name: name.to_owned(),
            kind,
            timeline,
        })
    }

    /// Parses the last component of a path, e.g. `Archive`'s
    /// `source_file_name` (PGDATA joined with PostgreSQL's `%p`).
    ///
    /// # Errors
    ///
    /// [`WalError::InvalidName`] when the last component is not a WAL file name.
    pub fn from_path(path: &str) -> Result<Self, WalError> {
        Self::parse(path.rsplit('/').next().unwrap_or(path))
    }

    /// The name, e.g. `000000010000000000000003.partial`.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// What kind of WAL file this is.
    pub fn kind(&self) -> WalFileKind {
        self.kind
    }

    /// The timeline the file belongs to (the first 8 hexadecimal digits).
    pub fn timeline(&self) -> u32 {
        self.timeline
    }
}

impl fmt::Display for WalFileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// What an `Archive` call must do with a file, given what the archive holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveDecision {
    /// Not archived yet: store it.
    Store,
    /// Archived with the same content: answer OK without storing it again.
    AlreadyArchived,
}

/// PostgreSQL's rule for archiving `name`: store it when the archive does not
/// have it, succeed without storing when it has the same content, and refuse
/// when it has different content. `existing` and `incoming` may be the
/// contents or digests of them (anything comparable).
///
/// # Errors
///
/// [`WalError::Conflict`] when the archived content differs.
pub fn decide_archive<T: PartialEq + ?Sized>(
    name: &WalFileName,
    existing: Option<&T>,
    incoming: &T,
) -> Result<ArchiveDecision, WalError> {
    match existing {
        None => Ok(ArchiveDecision::Store),
        Some(existing) if existing == incoming => Ok(ArchiveDecision::AlreadyArchived),
        Some(_) => Err(WalError::Conflict { name: name.to_string() }),
    }
}

/// The answer to `Restore` for a file the archive does not have:
/// `NOT_FOUND`, which CloudNativePG turns into a non-zero exit of
/// `restore_command`, after which PostgreSQL carries on (ends recovery, or
/// tries the next timeline).
pub fn not_in_archive(name: &WalFileName) -> tonic::Status {
    tonic::Status::not_found(format!("WAL file {name} is not in the archive"))
}

/// The `GetCapabilities` answer advertising `rpcs`.
///
/// ```
/// use cnpgi_pluginhelper::lowlevel::wal_files::capabilities;
/// use cnpgi_pluginhelper::proto::wal::v1::wal_capability::rpc::Type;
///
/// let answer = capabilities([Type::ArchiveWal, Type::RestoreWal]);
/// assert_eq!(answer.capabilities.len(), 2);
/// ```
pub fn capabilities(rpcs: impl IntoIterator<Item = wal_capability::rpc::Type>) -> WalCapabilitiesResult {
    WalCapabilitiesResult {
        capabilities: rpcs.into_iter().map(cnpgi_core::capabilities::wal_rpc).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_postgres_archives() {
        for (name, kind, timeline) in [
            ("000000010000000000000003", WalFileKind::Segment, 1),
            ("0000000A00000001000000FF", WalFileKind::Segment, 10),
            ("000000020000000000000004.partial", WalFileKind::Partial, 2),
            ("00000002.history", WalFileKind::History, 2),
            ("000000010000000000000002.00000028.backup", WalFileKind::Backup, 1),
        ] {
            let parsed = WalFileName::parse(name).unwrap();
            assert_eq!(
                (parsed.kind(), parsed.timeline(), parsed.as_str()),
                (kind, timeline, name)
            );
        }
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            "",
            "RECOVERYXLOG",
            "00000001000000000000000",
            "0000000100000000000000033",
            "000000010000000000000003.partial.partial",
            "0000000a0000000000000003",
            "../00000002.history",
            "00000002.history/",
            "0000000Z.history",
            "000000010000000000000002.backup",
            "00000001000000000000000\u{e9}",
        ] {
            let err = WalFileName::parse(bad).unwrap_err();
            assert!(matches!(err, WalError::InvalidName { .. }), "{bad}");
            assert_eq!(tonic::Status::from(err).code(), tonic::Code::InvalidArgument);
        }
        let long = "0".repeat(100_000);
        let WalError::InvalidName { name } = WalFileName::parse(&long).unwrap_err() else {
            panic!("not InvalidName");
        };
        assert_eq!(name.len(), 256);
    }

    #[test]
    fn paths_give_their_file_name() {
        let name = WalFileName::from_path("/var/lib/postgresql/data/pgdata/pg_wal/00000002.history").unwrap();
        assert_eq!(name.kind(), WalFileKind::History);
        assert!(WalFileName::from_path("/pg_wal/").is_err());
    }

    #[test]
    fn archiving_is_idempotent_and_never_overwrites() {
        let name = WalFileName::parse("000000010000000000000003").unwrap();
        assert_eq!(
            decide_archive(&name, None, &[1u8, 2][..]).unwrap(),
            ArchiveDecision::Store
        );
        assert_eq!(
            decide_archive(&name, Some(&[1u8, 2][..]), &[1u8, 2][..]).unwrap(),
            ArchiveDecision::AlreadyArchived
        );
        let err = decide_archive(&name, Some(&[1u8][..]), &[2u8][..]).unwrap_err();
        assert_eq!(
            err,
            WalError::Conflict {
                name: "000000010000000000000003".into()
            }
        );
        assert_eq!(tonic::Status::from(err).code(), tonic::Code::AlreadyExists);
        // Digests work as well as contents.
        assert_eq!(
            decide_archive(&name, Some("abc"), "abc").unwrap(),
            ArchiveDecision::AlreadyArchived
        );
    }

    #[test]
    fn a_missing_file_is_not_found() {
        let name = WalFileName::parse("00000003.history").unwrap();
        let status = not_in_archive(&name);
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert!(status.message().contains("00000003.history"));
    }
}
