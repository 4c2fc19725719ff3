//! The gRPC status every storage failure answers: the one place where the
//! storage engine's errors ([`crate::storage`]) become CNPG-I answers.
//!
//! CloudNativePG turns a `WAL.Restore` answered `NOT_FOUND` into "this file
//! is not in the archive", after which PostgreSQL ends its recovery (or
//! tries the next timeline). So `NOT_FOUND` answers three things only:
//!
//! * [`StoreError::NotFound`]: the store was read and the key is not in it;
//! * [`WalStoreError::NotInArchive`]: the same, for a WAL file restored;
//! * [`WalStoreError::ReadSource`] of a file that does not exist (archiving:
//!   the WAL file PostgreSQL names is gone).
//!
//! Everything else answers another code, so that a damaged or unreachable
//! archive stops a recovery instead of ending it early:
//!
//! | failure | code |
//! |---|---|
//! | damaged data: a WAL object, a backup, a manifest | `DATA_LOSS` |
//! | the store cannot be reached now: its directory missing or unreadable, the network, 5xx, a timeout; PostgreSQL down or slow during a backup | `UNAVAILABLE` |
//! | the store misconfigured: it cannot be opened, the bucket missing, credentials refused; a first archive into another cluster's; no backup for the recovery target; PGDATA not empty; an instance that cannot be backed up | `FAILED_PRECONDITION` |
//! | a name archived with other content | `ALREADY_EXISTS` |
//! | the object changed while it was archived | `ABORTED` |
//! | a WAL file over 1 GiB, an unreadable recovery target | `INVALID_ARGUMENT` |
//! | local failures: reading or writing files, a worker thread, compression, PostgreSQL's answer | `INTERNAL` |

use std::fmt::Display;

use tonic::{Code, Status};

use crate::storage::backup::BackupError;
use crate::storage::manifest::ChooseError;
use crate::storage::restore::RestoreError;
use crate::storage::store::StoreError;
use crate::storage::wal::WalStoreError;

/// The status of `error`, with `code` and the error's own message.
fn status(code: Code, error: &impl Display) -> Status {
    Status::new(code, error.to_string())
}

/// `NOT_FOUND` only for a key the store was read and lacks; a store that is
/// misconfigured (it cannot be opened, a missing bucket, refused
/// credentials) is `FAILED_PRECONDITION`; one that cannot be reached now
/// (missing directory, network, 5xx, timeout) `UNAVAILABLE`.
fn store_code(error: &StoreError) -> Code {
    match error {
        StoreError::NotFound { .. } => Code::NotFound,
        StoreError::Open { .. } | StoreError::BucketMissing { .. } | StoreError::Denied { .. } => {
            Code::FailedPrecondition
        }
        StoreError::RootMissing { .. }
        | StoreError::Unreachable { .. }
        | StoreError::Failed { .. }
        | StoreError::Timeout { .. } => Code::Unavailable,
    }
}

fn wal_code(error: &WalStoreError) -> Code {
    match error {
        WalStoreError::NotInArchive { .. } => Code::NotFound,
        WalStoreError::ReadSource { source, .. } if source.kind() == std::io::ErrorKind::NotFound => Code::NotFound,
        WalStoreError::ReadSource { .. } | WalStoreError::Encode { .. } => Code::Internal,
        WalStoreError::Write { .. } | WalStoreError::Worker(_) => Code::Internal,
        WalStoreError::TooLarge { .. } => Code::InvalidArgument,
        WalStoreError::NotEmpty { .. } => Code::FailedPrecondition,
        WalStoreError::Damaged { .. } => Code::DataLoss,
        WalStoreError::Conflict { .. } => Code::AlreadyExists,
        WalStoreError::Raced { .. } => Code::Aborted,
        WalStoreError::Store(store) => store_code(store),
    }
}

fn choose_code(error: &ChooseError) -> Code {
    match error {
        ChooseError::BadTarget(_) => Code::InvalidArgument,
        ChooseError::NoBackups | ChooseError::UnknownId { .. } | ChooseError::TooEarly(_) => Code::FailedPrecondition,
    }
}

fn restore_code(error: &RestoreError) -> Code {
    match error {
        RestoreError::Store(store) => store_code(store),
        RestoreError::DamagedManifest { .. } | RestoreError::NoneUsable { .. } | RestoreError::Damaged { .. } => {
            Code::DataLoss
        }
        RestoreError::Choose(choose) => choose_code(choose),
        RestoreError::PgdataNotEmpty { .. } => Code::FailedPrecondition,
        RestoreError::PgdataUnreadable { .. } | RestoreError::Local { .. } | RestoreError::Worker(_) => Code::Internal,
    }
}

fn backup_code(error: &BackupError) -> Code {
    match error {
        BackupError::Store(store) => store_code(store),
        BackupError::Unsupported(_) => Code::FailedPrecondition,
        BackupError::Postgres { .. } | BackupError::Timeout { .. } => Code::Unavailable,
        BackupError::Stream { .. } | BackupError::Answer(_) => Code::Internal,
    }
}

/// `From<error> for Status` for each storage error, with the code its
/// function above gives it.
macro_rules! into_status {
    ($($error:ty => $code:ident),* $(,)?) => {
        $(
            impl From<$error> for Status {
                fn from(error: $error) -> Self {
                    status($code(&error), &error)
                }
            }
        )*
    };
}

into_status! {
    StoreError => store_code,
    WalStoreError => wal_code,
    ChooseError => choose_code,
    RestoreError => restore_code,
    BackupError => backup_code,
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::storage::object::ObjectError;

    const NAME: &str = "000000010000000000000003";
    const KEY: &str = "pg1/wals/0000000100000000/000000010000000000000003.zst";
    const STORE: &str = "file:///archive (server pg1)";

    fn store_errors() -> Vec<StoreError> {
        let (store, key) = (STORE.to_owned(), KEY.to_owned());
        vec![
            StoreError::NotFound {
                store: store.clone(),
                key: key.clone(),
            },
            StoreError::RootMissing {
                dir: "/archive".into(),
                reason: "does not exist (is its volume mounted?)".into(),
            },
            StoreError::BucketMissing {
                bucket: "bucket".into(),
                store: store.clone(),
                operation: "get",
                key: key.clone(),
            },
            StoreError::Denied {
                store: store.clone(),
                operation: "get",
                key: key.clone(),
                detail: "InvalidAccessKeyId".into(),
            },
            StoreError::Unreachable {
                store: store.clone(),
                operation: "get",
                key: key.clone(),
                reason: "cannot connect to http://127.0.0.1:1".into(),
            },
            StoreError::Open {
                store: store.clone(),
                reason: "bad settings".into(),
            },
            StoreError::Failed {
                store: store.clone(),
                operation: "get",
                key: key.clone(),
                source: Box::new(object_store::Error::Generic {
                    store: "test",
                    source: "500 Internal Server Error".into(),
                }),
            },
            StoreError::Timeout {
                store,
                operation: "get",
                key,
            },
        ]
    }

    /// Each error answers its code, with its own message.
    fn assert_answers<E: Display>(cases: Vec<(E, Code)>)
    where
        Status: From<E>,
    {
        for (error, code) in cases {
            let message = error.to_string();
            let status = Status::from(error);
            assert_eq!(status.code(), code, "{message}");
            assert_eq!(status.message(), message);
        }
    }

    /// A store error wrapped in `E` answers what it answers alone: a store
    /// that cannot be read never answers `NOT_FOUND`.
    fn assert_store_codes_kept<E: From<StoreError>>()
    where
        Status: From<E>,
    {
        for store in store_errors() {
            let code = store_code(&store);
            assert_eq!(Status::from(E::from(store)).code(), code);
        }
    }

    async fn join_error() -> tokio::task::JoinError {
        let task = tokio::spawn(std::future::pending::<()>());
        task.abort();
        task.await.unwrap_err()
    }

    #[test]
    fn stores_answer_not_found_only_for_a_key_they_lack() {
        let codes: Vec<Code> = store_errors().into_iter().map(|e| Status::from(e).code()).collect();
        assert_eq!(
            codes,
            [
                Code::NotFound,
                Code::Unavailable,
                Code::FailedPrecondition,
                Code::FailedPrecondition,
                Code::Unavailable,
                Code::FailedPrecondition,
                Code::Unavailable,
                Code::Unavailable,
            ]
        );
        // The message is the error's, naming store, operation and key.
        let status = Status::from(store_errors().swap_remove(7));
        assert_eq!(
            status.message(),
            format!("object store {STORE}: get {KEY}: no answer within 300 s")
        );
    }

    #[tokio::test]
    async fn wal_files_answer_not_found_only_when_absent() {
        let cases: Vec<(WalStoreError, Code)> = vec![
            (
                WalStoreError::NotInArchive {
                    name: NAME.into(),
                    key: KEY.into(),
                    store: STORE.into(),
                },
                Code::NotFound,
            ),
            (
                WalStoreError::ReadSource {
                    path: PathBuf::from("/pgdata/pg_wal").join(NAME),
                    source: io::Error::from(io::ErrorKind::NotFound),
                },
                Code::NotFound,
            ),
            (
                WalStoreError::ReadSource {
                    path: PathBuf::from("/pgdata/pg_wal").join(NAME),
                    source: io::Error::from(io::ErrorKind::PermissionDenied),
                },
                Code::Internal,
            ),
            (
                WalStoreError::TooLarge {
                    name: NAME.into(),
                    path: PathBuf::from("/pgdata/pg_wal").join(NAME),
                    size: 2 << 30,
                },
                Code::InvalidArgument,
            ),
            (
                WalStoreError::NotEmpty { store: STORE.into() },
                Code::FailedPrecondition,
            ),
            (
                WalStoreError::Damaged {
                    name: NAME.into(),
                    key: KEY.into(),
                    store: STORE.into(),
                    source: ObjectError::NotOurs("no header frame".into()),
                },
                Code::DataLoss,
            ),
            (
                WalStoreError::Encode {
                    name: NAME.into(),
                    source: ObjectError::Compress(io::Error::other("zstd")),
                },
                Code::Internal,
            ),
            (
                WalStoreError::Conflict {
                    name: NAME.into(),
                    key: KEY.into(),
                    store: STORE.into(),
                },
                Code::AlreadyExists,
            ),
            (
                WalStoreError::Raced {
                    name: NAME.into(),
                    key: KEY.into(),
                    store: STORE.into(),
                },
                Code::Aborted,
            ),
            (
                // A destination directory that does not exist is a local
                // failure, never an absence from the archive.
                WalStoreError::Write {
                    path: PathBuf::from("/pgdata/pg_wal/RECOVERYXLOG"),
                    source: io::Error::from(io::ErrorKind::NotFound),
                },
                Code::Internal,
            ),
            (WalStoreError::Worker(join_error().await), Code::Internal),
        ];
        assert_answers(cases);
        assert_store_codes_kept::<WalStoreError>();
    }

    #[test]
    fn the_absence_message_names_file_key_and_store() {
        let status = Status::from(WalStoreError::NotInArchive {
            name: NAME.into(),
            key: KEY.into(),
            store: STORE.into(),
        });
        assert_eq!(
            status.message(),
            format!("WAL file {NAME} is not in the archive (no object {KEY} in {STORE})")
        );
    }

    #[tokio::test]
    async fn restores_tell_damage_from_absence_and_from_local_failures() {
        let damaged = |what: &str| format!("{what} damaged");
        let cases: Vec<(RestoreError, Code)> = vec![
            (
                RestoreError::DamagedManifest {
                    backup_id: "20260101T000000".into(),
                    key: "pg1/backups/20260101T000000/backup.json".into(),
                    store: STORE.into(),
                    reason: damaged("manifest"),
                },
                Code::DataLoss,
            ),
            (
                RestoreError::NoneUsable {
                    source: ChooseError::NoBackups,
                    store: STORE.into(),
                    damaged: damaged("manifest"),
                },
                Code::DataLoss,
            ),
            (
                RestoreError::Damaged {
                    id: "20260101T000000".into(),
                    key: "pg1/backups/20260101T000000/data.tar.zst".into(),
                    store: STORE.into(),
                    detail: damaged("data"),
                },
                Code::DataLoss,
            ),
            (RestoreError::Choose(ChooseError::NoBackups), Code::FailedPrecondition),
            (
                RestoreError::Choose(ChooseError::UnknownId {
                    wanted: "x".into(),
                    available: String::new(),
                }),
                Code::FailedPrecondition,
            ),
            (
                RestoreError::Choose(ChooseError::TooEarly("2026-01-01".into())),
                Code::FailedPrecondition,
            ),
            (
                RestoreError::Choose(ChooseError::BadTarget("targetLSN".into())),
                Code::InvalidArgument,
            ),
            (
                RestoreError::PgdataNotEmpty {
                    pgdata: "/pgdata".into(),
                },
                Code::FailedPrecondition,
            ),
            (
                RestoreError::PgdataUnreadable {
                    pgdata: "/pgdata".into(),
                    source: io::Error::from(io::ErrorKind::NotFound),
                },
                Code::Internal,
            ),
            (
                RestoreError::Local {
                    path: "/pgdata".into(),
                    source: io::Error::from(io::ErrorKind::StorageFull),
                },
                Code::Internal,
            ),
            (RestoreError::Worker(join_error().await), Code::Internal),
        ];
        assert_answers(cases);
        assert_store_codes_kept::<RestoreError>();
    }

    #[test]
    fn backups_answer_by_what_failed() {
        let target = || "/controller/run:5432".to_owned();
        let cases: Vec<(BackupError, Code)> = vec![
            (
                BackupError::Postgres {
                    target: target(),
                    what: "connect",
                    detail: "refused".into(),
                },
                Code::Unavailable,
            ),
            (
                BackupError::Timeout {
                    target: target(),
                    what: "pg_backup_stop",
                    timeout: Duration::from_secs(1800),
                },
                Code::Unavailable,
            ),
            (BackupError::Unsupported("tablespaces".into()), Code::FailedPrecondition),
            (
                BackupError::Stream {
                    pgdata: "/pgdata".into(),
                    source: io::Error::from(io::ErrorKind::PermissionDenied),
                },
                Code::Internal,
            ),
            (BackupError::Answer("no LSN".into()), Code::Internal),
        ];
        assert_answers(cases);
        assert_store_codes_kept::<BackupError>();
    }
}
