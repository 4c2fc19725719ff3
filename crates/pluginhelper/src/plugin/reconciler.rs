//! The ReconcilerHooks service of a declarative plugin: `Pre` and `Post`
//! hooks per kind of reconciled object.

use std::sync::Arc;

use cnpgi_proto::reconciler::v1::{
    ReconcilerHooksCapabilitiesRequest, ReconcilerHooksCapabilitiesResult, ReconcilerHooksRequest,
    ReconcilerHooksResult, reconciler_hooks_server,
};
use serde_json::Value;
use tonic::{Request, Response, Status};

use super::{AsyncHandler, BoxedHandler, Plugin, Shared, boxed};
use crate::{
    capabilities::ReconcilerKind,
    cluster::{Cluster, decode_cluster, decode_object},
    lowlevel::hook::{self, Hook},
    parameters::Parameters,
};

/// What a reconciler hook receives.
#[derive(Debug, Clone)]
pub struct ReconcilerCall<P> {
    /// The Cluster.
    pub cluster: Cluster,
    /// This plugin's parameters in it.
    pub parameters: P,
    /// The object being reconciled (the Cluster, or a Backup), as received.
    pub object: Value,
}

impl<P> ReconcilerCall<P> {
    /// `metadata.deletionTimestamp` of the object reconciled, when it is
    /// being deleted (as the API server wrote it, RFC 3339).
    pub fn deletion_timestamp(&self) -> Option<&str> {
        self.object.pointer("/metadata/deletionTimestamp")?.as_str()
    }

    /// Whether the object reconciled is being deleted: its
    /// `metadata.deletionTimestamp` is set. That is how a host tells a
    /// plugin to clean up (`cnpgi-host`'s `deletion` module): a `Pre` hook
    /// on the resource, sent as the API server has it while a finalizer
    /// holds it. The hook cleans up what it made for it and answers
    /// [`Hook::Continue`] when done (the resource may then go), or
    /// [`Hook::RequeueAfter`] to be asked again; the host waits a bounded
    /// time only, so a cleanup should be quick and idempotent.
    ///
    /// ```
    /// use cnpgi_pluginhelper::prelude::*;
    ///
    /// let plugin = Plugin::<()>::new(GetPluginMetadataResponse::default()).reconciler_pre(
    ///     ReconcilerKind::Cluster,
    ///     |call| async move {
    ///         if call.is_being_deleted() {
    ///             // Drop what this plugin made for the resource, then let it go.
    ///             return Ok(Hook::Continue);
    ///         }
    ///         Ok(Hook::Continue)
    ///     },
    /// );
    /// # drop(plugin);
    /// ```
    pub fn is_being_deleted(&self) -> bool {
        self.deletion_timestamp().is_some()
    }
}

type HookFn<P> = BoxedHandler<ReconcilerCall<P>, Hook>;

/// The `Pre` and `Post` hooks registered, by kind.
pub(super) struct Handlers<P> {
    pre: Vec<(ReconcilerKind, HookFn<P>)>,
    post: Vec<(ReconcilerKind, HookFn<P>)>,
}

impl<P: Parameters> super::Registered for Handlers<P> {
    fn registered(&self) -> bool {
        !self.is_empty()
    }
}

impl<P> Default for Handlers<P> {
    fn default() -> Self {
        Self {
            pre: Vec::new(),
            post: Vec::new(),
        }
    }
}

impl<P> Handlers<P> {
    pub(super) fn is_empty(&self) -> bool {
        self.pre.is_empty() && self.post.is_empty()
    }

    /// The kinds with a hook, in the protocol's order.
    fn kinds(&self) -> Vec<ReconcilerKind> {
        let mut kinds: Vec<ReconcilerKind> = self.pre.iter().chain(&self.post).map(|(kind, _)| *kind).collect();
        kinds.sort_by_key(|kind| *kind as i32);
        kinds.dedup();
        kinds
    }
}

impl<P: Parameters> Plugin<P> {
    fn reconciler_hook(
        mut self,
        post: bool,
        kind: ReconcilerKind,
        hook: impl AsyncHandler<ReconcilerCall<P>, Hook>,
    ) -> Self {
        if kind != ReconcilerKind::Unspecified {
            let hooks = if post {
                &mut self.handlers.reconciler.post
            } else {
                &mut self.handlers.reconciler.pre
            };
            hooks.retain(|(registered, _)| *registered != kind);
            hooks.push((kind, boxed(hook)));
        }
        self
    }

    /// A hook run before the operator reconciles an object of `kind`; its
    /// [`Hook`] answer says whether the operator goes on, requeues, or stops.
    /// Objects of a kind without a `Pre` hook get `Continue`.
    pub fn reconciler_pre(self, kind: ReconcilerKind, hook: impl AsyncHandler<ReconcilerCall<P>, Hook>) -> Self {
        self.reconciler_hook(false, kind, hook)
    }

    /// A hook run after the operator reconciled an object of `kind`.
    pub fn reconciler_post(self, kind: ReconcilerKind, hook: impl AsyncHandler<ReconcilerCall<P>, Hook>) -> Self {
        self.reconciler_hook(true, kind, hook)
    }
}

/// The ReconcilerHooks service of a [`Plugin`], dispatching to its hooks.
pub struct ReconcilerService<P>(pub(super) Arc<Shared<P>>);

impl<P: Parameters> ReconcilerService<P> {
    async fn call(&self, post: bool, request: ReconcilerHooksRequest) -> Result<ReconcilerHooksResult, Status> {
        let object = decode_object(&request.resource_definition, "reconciled object")?;
        let kind = match object.get("kind").and_then(Value::as_str) {
            Some("Cluster") => ReconcilerKind::Cluster,
            Some("Backup") => ReconcilerKind::Backup,
            // CNPG-I's `Cluster` kind is the resource that enables the
            // plugins, whatever its own kind (a host's `DatabaseTable`):
            // the object reconciled is then the resource itself.
            _ if request.resource_definition == request.cluster_definition => ReconcilerKind::Cluster,
            _ => ReconcilerKind::Unspecified,
        };
        let handlers = &self.0.handlers.reconciler;
        let hooks = if post { &handlers.post } else { &handlers.pre };
        let Some((_, hook)) = hooks.iter().find(|(registered, _)| *registered == kind) else {
            return Ok(Hook::Continue.into());
        };
        let cluster = decode_cluster(&request.cluster_definition)?;
        let parameters = self.0.parameters(&cluster)?;
        let answer = hook(ReconcilerCall {
            cluster,
            parameters,
            object,
        })
        .await?;
        Ok(answer.into())
    }
}

#[tonic::async_trait]
impl<P: Parameters> reconciler_hooks_server::ReconcilerHooks for ReconcilerService<P> {
    async fn get_capabilities(
        &self,
        _: Request<ReconcilerHooksCapabilitiesRequest>,
    ) -> Result<Response<ReconcilerHooksCapabilitiesResult>, Status> {
        Ok(Response::new(hook::capabilities(self.0.handlers.reconciler.kinds())))
    }

    async fn pre(&self, request: Request<ReconcilerHooksRequest>) -> Result<Response<ReconcilerHooksResult>, Status> {
        self.call(false, request.into_inner()).await.map(Response::new)
    }

    async fn post(&self, request: Request<ReconcilerHooksRequest>) -> Result<Response<ReconcilerHooksResult>, Status> {
        self.call(true, request.into_inner()).await.map(Response::new)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(object: Value) -> ReconcilerCall<()> {
        ReconcilerCall {
            cluster: Cluster::default(),
            parameters: (),
            object,
        }
    }

    #[test]
    fn a_resource_is_being_deleted_when_its_deletion_timestamp_is_set() {
        let deleted = call(json!({"metadata": {"name": "users", "deletionTimestamp": "2026-01-02T03:04:05Z"}}));
        assert!(deleted.is_being_deleted());
        assert_eq!(deleted.deletion_timestamp(), Some("2026-01-02T03:04:05Z"));
        let live = call(json!({"metadata": {"name": "users"}}));
        assert!(!live.is_being_deleted());
        assert_eq!(live.deletion_timestamp(), None);
        assert!(!call(json!({"metadata": {"deletionTimestamp": null}})).is_being_deleted());
    }
}
