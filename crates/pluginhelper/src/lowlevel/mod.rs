//! Building blocks for CNPG-I services written by hand (tonic's generated
//! server traits implemented directly, served with
//! [`create_main_cmd`](crate::create_main_cmd)): each service's
//! `GetCapabilities` answer and the protocol rules its answers must follow.
//!
//! The declarative [`Plugin`](crate::plugin::Plugin) is built on these and
//! applies them for its handlers; a plugin written with it needs none of
//! this module but the values its handlers receive and answer
//! ([`WalFileName`], [`MetricSet`], [`Hook`]), which
//! [`plugin`](crate::plugin) and the [`prelude`](crate::prelude) re-export.
//! See `examples/low-level` and `tests/broken-plugin` in the repository for
//! services written by hand.
//!
//! | Module | Service | What it gives |
//! |---|---|---|
//! | [`wal_files`] | WAL | [`WalFileName`], PostgreSQL's archiving rule ([`decide_archive`]), the restore miss ([`not_in_archive`]: `NOT_FOUND`), `GetCapabilities` |
//! | [`metric_set`] | Metrics | [`MetricSet`]: `Define`, `Collect` checked against it, `GetCapabilities` |
//! | [`hook`] | ReconcilerHooks | [`Hook`], the `Pre`/`Post` answer, and `GetCapabilities` |
//! | [`enrich`](mod@enrich) | Postgres | [`enrich()`]: `EnrichConfiguration` answering the complete map, `GetCapabilities` |
//!
//! The Operator and OperatorLifecycle services need no module of their own:
//! their answers are built with [`cluster`](crate::cluster),
//! [`patch`](crate::patch), [`capabilities`](crate::capabilities),
//! [`validation`](crate::validation) and [`status`](crate::status).

pub mod enrich;
pub mod hook;
pub mod metric_set;
pub mod wal_files;

pub use enrich::enrich;
pub use hook::Hook;
pub use metric_set::{MetricSet, MetricsError};
pub use wal_files::{ArchiveDecision, WalError, WalFileKind, WalFileName, decide_archive, not_in_archive};
