//! Rust types, clients and servers for the CNPG-I protocol.
//!
//! The code is generated at build time from the `.proto` files in the
//! repository's `proto/` directory. Package names, service names, message
//! names and field numbers are those of upstream CNPG-I, so the generated
//! clients talk to any CNPG-I plugin and the generated servers answer the
//! CloudNativePG operator.
//!
//! ```
//! use cnpgi_proto::identity::v1::{plugin_capability, PluginCapability};
//!
//! let capability = PluginCapability {
//!     r#type: Some(plugin_capability::Type::Service(plugin_capability::Service {
//!         r#type: plugin_capability::service::Type::OperatorService.into(),
//!     })),
//! };
//! assert!(capability.r#type.is_some());
//! ```
//!
//! [`FILE_DESCRIPTOR_SET`] holds the encoded descriptors, for gRPC reflection.

#![forbid(unsafe_code)]

/// The encoded `FileDescriptorSet` of every CNPG-I `.proto` file in this
/// crate, for use with gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cnpgi_descriptor.bin"));

/// One package's generated code as `<module>::v1`; the docs are the package's.
macro_rules! package {
    ($($(#[$doc:meta])* $module:ident => $package:literal;)*) => {$(
        $(#[$doc])*
        pub mod $module {
            #[doc = concat!("`", $package, "`.")]
            pub mod v1 {
                #![allow(missing_docs, unreachable_pub, clippy::all)]
                tonic::include_proto!($package);
            }
        }
    )*};
}

package! {
    /// `cnpgi.identity.*`: the service every plugin implements, and the
    /// `Postgres` service (PostgreSQL configuration), which shares its package.
    identity => "cnpgi.identity.v1";

    /// `cnpgi.operator.*`: Cluster validation, defaulting and status.
    operator => "cnpgi.operator.v1";

    /// `cnpgi.operator_lifecycle.*`: patches of objects before they are written.
    operator_lifecycle => "cnpgi.operator_lifecycle.v1";

    /// `cnpgi.reconciler.*`: hooks before and after the operator reconciles an object.
    reconciler => "cnpgi.reconciler.v1";

    /// `cnpgi.wal.*`: WAL archiving and restoring (`WAL`), and restoring a backup
    /// in the recovery Job (`RestoreJobHooks`), which shares the package.
    wal => "cnpgi.wal.v1";

    /// `cnpgi.backup.*`: base backups.
    backup => "cnpgi.backup.v1";

    /// `cnpgi.metrics.*`: metrics added to the instance's Prometheus endpoint.
    metrics => "cnpgi.metrics.v1";

    /// `cnpgi.registration.*`: plugins registering themselves with a cnpgi-rs
    /// host and keeping their lease with heartbeats. This project's own package,
    /// not CNPG-I's (CloudNativePG does not serve it); the file is
    /// `proto/registration/v1/registration.proto`.
    registration => "cnpgi.registration.v1";
}

#[cfg(test)]
mod tests {
    #[test]
    fn proto3_optional_fields_track_presence() {
        // `check_empty_wal_archive` is proto3 `optional` upstream: unset must
        // differ from false on the wire and in the generated type.
        use prost::Message;
        let unset = super::wal::v1::WalArchiveRequest::default();
        let set_false = super::wal::v1::WalArchiveRequest {
            check_empty_wal_archive: Some(false),
            ..Default::default()
        };
        assert!(unset.encode_to_vec().is_empty());
        assert_eq!(set_false.encode_to_vec(), [0x20, 0x00]);
        let restore = super::wal::v1::RestoreRequest::decode(&[0x10, 0x01][..]).unwrap();
        assert_eq!(restore.check_empty_wal_archive, Some(true));
    }
}
