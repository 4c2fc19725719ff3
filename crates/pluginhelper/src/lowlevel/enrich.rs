//! `cnpgi.identity.v1.Postgres.EnrichConfiguration`: editing the PostgreSQL
//! configuration the instance manager is about to write.
//!
//! CloudNativePG sends every plugin the complete parameter map it computed,
//! and an answer that is not empty **replaces the whole map**: a plugin that
//! answers only the parameters it changed deletes all the others. [`enrich`]
//! takes the request's map, lets the plugin edit it, and answers the
//! complete result, or nothing when nothing changed.
//!
//! ```
//! use std::collections::HashMap;
//! use cnpgi_pluginhelper::lowlevel::enrich::enrich;
//!
//! let configs = HashMap::from([("shared_buffers".to_owned(), "128MB".to_owned())]);
//! let answer = enrich(&configs, |map| {
//!     map.insert("archive_timeout".to_owned(), "5min".to_owned());
//! });
//! assert_eq!(answer.configs.len(), 2); // the complete map, not just the change
//! assert!(enrich(&configs, |_| {}).configs.is_empty()); // unchanged: no change
//! ```

use std::collections::HashMap;

use cnpgi_proto::identity::v1::{EnrichConfigurationResult, PostgresCapabilitiesResult, postgres_capability};

/// Applies `edit` to a copy of `configs` and answers the complete map, or an
/// empty answer ("no change") when the map is unchanged.
pub fn enrich(
    configs: &HashMap<String, String>,
    edit: impl FnOnce(&mut HashMap<String, String>),
) -> EnrichConfigurationResult {
    let mut edited = configs.clone();
    edit(&mut edited);
    if &edited == configs {
        EnrichConfigurationResult::default()
    } else {
        EnrichConfigurationResult { configs: edited }
    }
}

/// The `GetCapabilities` answer of a plugin implementing `EnrichConfiguration`.
pub fn capabilities() -> PostgresCapabilitiesResult {
    PostgresCapabilitiesResult {
        capabilities: vec![cnpgi_core::capabilities::postgres_rpc(
            postgres_capability::rpc::Type::EnrichConfiguration,
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_the_complete_map_or_nothing() {
        let configs = HashMap::from([("a".to_owned(), "1".to_owned()), ("b".to_owned(), "2".to_owned())]);
        let changed = enrich(&configs, |map| {
            map.insert("b".to_owned(), "3".to_owned());
        });
        assert_eq!(
            changed.configs,
            HashMap::from([("a".to_owned(), "1".to_owned()), ("b".to_owned(), "3".to_owned())])
        );
        let removed = enrich(&configs, |map| {
            map.remove("a");
        });
        assert_eq!(removed.configs, HashMap::from([("b".to_owned(), "2".to_owned())]));
        assert!(
            enrich(&configs, |map| {
                map.insert("a".to_owned(), "1".to_owned());
            })
            .configs
            .is_empty()
        );
        assert_eq!(capabilities().capabilities.len(), 1);
    }
}
