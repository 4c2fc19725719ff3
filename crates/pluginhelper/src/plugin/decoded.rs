//! The Clusters a plugin decoded last, with its parameters in them, kept
//! for the next calls that send the same bytes.
//!
//! The operator sends the same Cluster definition with every lifecycle hook
//! of a reconcile (one per instance Pod, `CREATE` or `EVALUATE`) and of every
//! reconcile until the Cluster changes; decoding it and parsing the
//! parameters again each time is the largest part of a hook that only adds
//! a label. The key is the exact bytes, so a Cluster that changed in any way
//! is decoded afresh, and what is shared is immutable.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use tonic::Status;

use crate::cluster::{Cluster, decode_cluster};

/// How many Clusters are kept: enough for the Clusters an operator
/// reconciles at once (CloudNativePG reconciles up to 10 in parallel), few
/// enough that a linear scan costs less than a hash of the bytes.
const CAPACITY: usize = 16;

/// A decoded Cluster and this plugin's parameters in it.
pub(super) struct Decoded<P> {
    definition: Vec<u8>,
    /// The Cluster.
    pub(super) cluster: Cluster,
    /// This plugin's parameters in it.
    pub(super) parameters: P,
}

/// The last [`CAPACITY`] Clusters decoded, most recent first.
pub(super) struct DecodedClusters<P> {
    recent: Mutex<VecDeque<Arc<Decoded<P>>>>,
}

impl<P> Default for DecodedClusters<P> {
    fn default() -> Self {
        Self {
            recent: Mutex::new(VecDeque::with_capacity(CAPACITY)),
        }
    }
}

impl<P> DecodedClusters<P> {
    /// The Cluster `definition` decodes to and the parameters `parse` reads
    /// from it: kept ones when the same bytes were decoded recently. Errors
    /// are not kept: a Cluster that fails is decoded again the next time,
    /// and fails again with the same message.
    pub(super) fn get(
        &self,
        definition: &[u8],
        parse: impl FnOnce(&Cluster) -> Result<P, Status>,
    ) -> Result<Arc<Decoded<P>>, Status> {
        if let Some(found) = self.find(definition) {
            return Ok(found);
        }
        let cluster = decode_cluster(definition)?;
        let parameters = parse(&cluster)?;
        let decoded = Arc::new(Decoded {
            definition: definition.to_vec(),
            cluster,
            parameters,
        });
        let mut recent = self.lock();
        if recent.len() == CAPACITY {
            recent.pop_back();
        }
        recent.push_front(decoded.clone());
        Ok(decoded)
    }

    fn find(&self, definition: &[u8]) -> Option<Arc<Decoded<P>>> {
        let mut recent = self.lock();
        let position = recent.iter().position(|kept| kept.definition == definition)?;
        let found = recent.remove(position)?;
        recent.push_front(found.clone());
        Some(found)
    }

    /// The lock guards no invariant a panicking holder could break (entries
    /// are immutable), so a poisoned lock is still usable.
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Decoded<P>>>> {
        self.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn cluster(name: &str) -> Vec<u8> {
        format!(r#"{{"metadata":{{"name":"{name}"}},"spec":{{"plugins":[{{"name":"p"}}]}}}}"#).into_bytes()
    }

    #[test]
    fn the_same_bytes_are_decoded_once() {
        let decoded = DecodedClusters::default();
        let parses = AtomicUsize::new(0);
        let parse = |c: &Cluster| {
            parses.fetch_add(1, Ordering::Relaxed);
            Ok(c.metadata.name.clone())
        };
        let first = decoded.get(&cluster("a"), parse).expect("decodes");
        let again = decoded.get(&cluster("a"), parse).expect("decodes");
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(again.parameters.as_deref(), Some("a"));
        let other = decoded.get(&cluster("b"), parse).expect("decodes");
        assert_eq!(other.parameters.as_deref(), Some("b"));
        assert_eq!(parses.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn the_least_recently_used_is_dropped_when_full() {
        let decoded = DecodedClusters::default();
        let parse = |c: &Cluster| Ok(c.metadata.name.clone());
        let first = decoded.get(&cluster("0"), parse).expect("decodes");
        for i in 1..CAPACITY {
            decoded.get(&cluster(&i.to_string()), parse).expect("decodes");
        }
        // Used again: now the most recent, so "1" is the one dropped next.
        assert!(Arc::ptr_eq(
            &first,
            &decoded.get(&cluster("0"), parse).expect("decodes")
        ));
        decoded.get(&cluster("new"), parse).expect("decodes");
        assert!(Arc::ptr_eq(
            &first,
            &decoded.get(&cluster("0"), parse).expect("decodes")
        ));
        let recent = decoded.lock();
        assert_eq!(recent.len(), CAPACITY);
        assert!(recent.iter().all(|kept| kept.parameters.as_deref() != Some("1")));
    }

    #[test]
    fn errors_are_not_kept() {
        let decoded: DecodedClusters<()> = DecodedClusters::default();
        let refuse = |_: &Cluster| Err(Status::invalid_argument("bad parameters"));
        for _ in 0..2 {
            let err = decoded.get(&cluster("a"), refuse).err().expect("refused");
            assert_eq!(err.message(), "bad parameters");
        }
        let err = decoded.get(b"{", |_| Ok(())).err().expect("refused");
        assert!(err.message().contains("cannot decode Cluster"), "{}", err.message());
        assert!(decoded.lock().is_empty());
    }
}
