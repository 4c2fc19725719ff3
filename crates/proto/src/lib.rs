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
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/cnpgi_descriptor.bin"));

/// `cnpgi.identity.*`: the service every plugin implements.
pub mod identity {
    /// `cnpgi.identity.v1`.
    pub mod v1 {
        #![allow(missing_docs, unreachable_pub, clippy::all)]
        tonic::include_proto!("cnpgi.identity.v1");
    }
}

/// `cnpgi.operator.*`: Cluster validation, defaulting and status.
pub mod operator {
    /// `cnpgi.operator.v1`.
    pub mod v1 {
        #![allow(missing_docs, unreachable_pub, clippy::all)]
        tonic::include_proto!("cnpgi.operator.v1");
    }
}

/// `cnpgi.operator_lifecycle.*`: patches of objects before they are written.
pub mod operator_lifecycle {
    /// `cnpgi.operator_lifecycle.v1`.
    pub mod v1 {
        #![allow(missing_docs, unreachable_pub, clippy::all)]
        tonic::include_proto!("cnpgi.operator_lifecycle.v1");
    }
}

/// Fully qualified gRPC service names, as they appear on the wire and in the
/// gRPC health service.
pub mod service_names {
    /// `cnpgi.identity.v1.Identity`.
    pub const IDENTITY: &str = "cnpgi.identity.v1.Identity";
    /// `cnpgi.operator.v1.Operator`.
    pub const OPERATOR: &str = "cnpgi.operator.v1.Operator";
    /// `cnpgi.operator_lifecycle.v1.OperatorLifecycle`.
    pub const OPERATOR_LIFECYCLE: &str = "cnpgi.operator_lifecycle.v1.OperatorLifecycle";
}
