//! The storage engine: where the archive is and what is in it, apart from
//! the CNPG-I calls that use it.
//!
//! * [`store`]: the directory or S3 store, and the layout of a cluster's
//!   folder in it; its errors tell absent, damaged and unreachable apart;
//! * [`object`]: a stored WAL file (compressed, with a checksummed header);
//! * [`wal`]: archiving and restoring WAL files;
//! * [`backup`] and [`pgdata_tar`]: base backups of the running instance;
//!   [`part_upload`]: their data uploaded in parts, in bounded memory;
//! * [`manifest`] and [`lsn`]: what a backup records, choosing the backup
//!   a recovery starts from;
//! * [`retention`]: the backups in a store, and deleting the old ones;
//! * [`restore`]: a base backup back into an empty PGDATA.

pub mod backup;
pub mod lsn;
pub mod manifest;
pub mod object;
pub mod part_upload;
pub mod pgdata_tar;
pub mod restore;
pub mod retention;
pub mod store;
pub mod wal;
