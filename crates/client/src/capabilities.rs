//! Each CNPG-I service's `GetCapabilities`, asked and read one way: one row
//! per service in the table below, which probing ([`crate::probe`]) and the
//! conformance suite's skeleton both use.
//!
//! ```no_run
//! # async fn example(client: cnpgi_client::client::PluginClient) -> Result<(), tonic::Status> {
//! use cnpgi_client::capabilities::{Wal, ask};
//!
//! let (rpcs, problems) = ask::<Wal>(&client).await?;
//! println!("WAL RPCs: {rpcs:?} ({problems:?})");
//! # Ok(()) }
//! ```

use std::{future::Future, pin::Pin};

use cnpgi_core::{
    capabilities::{Capability, CapabilityError},
    for_each_service,
    service::{self, Service},
};

use crate::client::PluginClient;

/// A call in flight, as the generated clients return it.
pub type Call<A> = Pin<Box<dyn Future<Output = Result<tonic::Response<A>, tonic::Status>> + Send>>;

/// A service's `GetCapabilities`: how to ask it and where its entries are.
/// Implemented for each row of [`cnpgi_core::for_each_service!`].
pub trait ServiceCapabilities {
    /// The service's description (name, capability, RPCs).
    const SERVICE: &'static Service;
    /// What one entry advertises.
    type Value: Clone + PartialEq + std::fmt::Debug + Send + 'static;
    /// One entry of the answer.
    type Entry: Capability<Value = Self::Value> + Send + 'static;
    /// The answer of `GetCapabilities`.
    type Answer: Send + 'static;

    /// Asks the plugin.
    fn call(client: &PluginClient) -> Call<Self::Answer>;
    /// The entries of an answer.
    fn entries(answer: &Self::Answer) -> &[Self::Entry];

    /// One entry's value, or what is wrong with it.
    fn read(entry: &Self::Entry) -> Result<Self::Value, CapabilityError> {
        entry.value()
    }
    /// A value's name on the wire (`TYPE_ARCHIVE_WAL`).
    fn name(value: &Self::Value) -> std::borrow::Cow<'static, str> {
        Self::Entry::name(value)
    }
}

/// The values `answer` advertises, read as routing reads them: entries
/// that cannot be read are left out (and said in the second list); a value
/// listed twice is kept once, but for the entries kept as sent
/// ([`Capability::DISTINCT`]).
pub fn read<S: ServiceCapabilities>(answer: &S::Answer) -> (Vec<S::Value>, Vec<CapabilityError>) {
    let mut values = Vec::new();
    let mut problems = Vec::new();
    for entry in S::entries(answer) {
        match S::read(entry) {
            Ok(value) if S::Entry::DISTINCT && values.contains(&value) => {}
            Ok(value) => values.push(value),
            Err(problem) => problems.push(problem),
        }
    }
    (values, problems)
}

/// Asks `S`'s `GetCapabilities` and [`read`]s the answer.
pub async fn ask<S: ServiceCapabilities>(
    client: &PluginClient,
) -> Result<(Vec<S::Value>, Vec<CapabilityError>), tonic::Status> {
    let answer = S::call(client).await?.into_inner();
    Ok(read::<S>(&answer))
}

/// A [`ServiceCapabilities`] per row of the service table.
macro_rules! services {
    ($( $(#[$doc:meta])* $name:ident = $konst:ident ($cap:ident, $label:literal, $grpc:literal) {
        key: $key:ident, proto: $($proto:ident)::+, client: $($client:ident)::+, server: $($server:ident)::+,
        capabilities: $request:ident -> $answer:ident { $field:ident: [$entry:ident] },
        values: $values:ident $($oneof:ident)?, info: $info:ident, sdk: $sdk:ident, local: $local:ident,
        rpcs: [$( $(#[$rpc_doc:meta])* $rpc:ident = $rpc_name:literal, $parameters:ident, $exercise:ident; )*],
    } )*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name;

        impl ServiceCapabilities for $name {
            const SERVICE: &'static Service = &service::$konst;
            type Value = <Self::Entry as Capability>::Value;
            type Entry = cnpgi_proto::$($proto)::+::$entry;
            type Answer = cnpgi_proto::$($proto)::+::$answer;

            fn call(client: &PluginClient) -> Call<Self::Answer> {
                let mut stub = client.$key();
                let request = client.request(cnpgi_proto::$($proto)::+::$request {});
                Box::pin(async move { stub.get_capabilities(request).await })
            }

            fn entries(answer: &Self::Answer) -> &[Self::Entry] {
                &answer.$field
            }
        }
    )*};
}

for_each_service!(services);

#[cfg(test)]
mod tests {
    use cnpgi_core::capabilities::WalRpc;
    use cnpgi_proto::wal::v1::{WalCapabilitiesResult, WalCapability, wal_capability};

    use super::*;

    fn wal_entry(rpc: i32) -> WalCapability {
        WalCapability {
            r#type: Some(wal_capability::Type::Rpc(wal_capability::Rpc { r#type: rpc })),
        }
    }

    #[test]
    fn unreadable_and_repeated_entries_are_left_out_and_said() {
        let answer = WalCapabilitiesResult {
            capabilities: vec![
                wal_entry(WalRpc::ArchiveWal as i32),
                wal_entry(WalRpc::ArchiveWal as i32),
                wal_entry(9_999),
                WalCapability { r#type: None },
            ],
        };
        let (values, problems) = read::<Wal>(&answer);
        assert_eq!(values, vec![WalRpc::ArchiveWal]);
        assert_eq!(
            problems,
            vec![CapabilityError::Unknown(9_999), CapabilityError::Missing]
        );
        assert_eq!(Wal::name(&WalRpc::ArchiveWal), "TYPE_ARCHIVE_WAL");
        assert_eq!(Wal::SERVICE.label, "WAL");
    }
}
