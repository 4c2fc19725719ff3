//! ReconcilerHooks routed through real plugins (served over Unix sockets,
//! probed like any plugin): order, CONTINUE/REQUEUE/TERMINATE, errors.

#![allow(clippy::unwrap_used)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use cnpgi_client::client::{ClientOptions, PluginClient, Transport};
use cnpgi_host::{
    registry::{Registry, RegistryOptions},
    routing::{HookOutcome, HookPhase, RouteError, RoutedResource, Router, RoutingPolicy},
};
use cnpgi_pluginhelper::{
    lowlevel::hook::{Hook, capabilities},
    proto::{
        identity::v1::plugin_capability::service::Type as ServiceType,
        reconciler::v1::{
            ReconcilerHooksCapabilitiesRequest, ReconcilerHooksCapabilitiesResult, ReconcilerHooksRequest,
            ReconcilerHooksResult,
            reconciler_hooks_capability::Kind,
            reconciler_hooks_server::{ReconcilerHooks, ReconcilerHooksServer},
        },
    },
    testing::{TestIdentity, TestPlugin},
    transport::PluginServer,
};
use serde_json::{Value, json};
use tonic::{Request, Response, Status};

/// Answers `answer` to Pre and Post on Clusters, counting calls; `None`
/// answers an error.
struct Hooks {
    answer: Option<Hook>,
    calls: Arc<AtomicUsize>,
}

impl Hooks {
    fn answer(&self, request: &ReconcilerHooksRequest) -> Result<Response<ReconcilerHooksResult>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let cluster: Value = serde_json::from_slice(&request.cluster_definition).unwrap();
        let resource: Value = serde_json::from_slice(&request.resource_definition).unwrap();
        assert_eq!(cluster["kind"], "Cluster");
        assert_eq!(resource["metadata"]["name"], "c");
        match self.answer {
            Some(hook) => Ok(Response::new(hook.into())),
            None => Err(Status::unavailable("the hook's backend is down")),
        }
    }
}

#[tonic::async_trait]
impl ReconcilerHooks for Hooks {
    async fn get_capabilities(
        &self,
        _: Request<ReconcilerHooksCapabilitiesRequest>,
    ) -> Result<Response<ReconcilerHooksCapabilitiesResult>, Status> {
        Ok(Response::new(capabilities([Kind::Cluster])))
    }

    async fn pre(&self, request: Request<ReconcilerHooksRequest>) -> Result<Response<ReconcilerHooksResult>, Status> {
        self.answer(request.get_ref())
    }

    async fn post(&self, request: Request<ReconcilerHooksRequest>) -> Result<Response<ReconcilerHooksResult>, Status> {
        self.answer(request.get_ref())
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    _plugins: Vec<TestPlugin>,
    router: Router,
    calls: Vec<Arc<AtomicUsize>>,
}

/// Plugins `a.example.com`, `b.example.com`, ... answering `answers` in turn.
async fn setup(answers: &[Option<Hook>]) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let registry = Arc::new(Registry::new(RegistryOptions::default()));
    let (mut plugins, mut calls) = (Vec::new(), Vec::new());
    for (i, answer) in answers.iter().enumerate() {
        let name = format!("{}.example.com", char::from(b'a' + u8::try_from(i).unwrap()));
        let counter = Arc::new(AtomicUsize::new(0));
        let server = PluginServer::new(TestIdentity::new(&name).with_service(ServiceType::ReconcilerHooks))
            .add_service(ReconcilerHooksServer::new(Hooks {
                answer: *answer,
                calls: counter.clone(),
            }));
        plugins.push(TestPlugin::start_unix_in(server, dir.path()).await.unwrap());
        let client = PluginClient::new(
            &name,
            Transport::Unix {
                path: dir.path().join(&name),
            },
            &ClientOptions::default(),
        )
        .unwrap();
        registry.add("static", client).await.unwrap();
        assert_eq!(registry.get(&name).unwrap().info.reconciler_kinds, [Kind::Cluster]);
        calls.push(counter);
    }
    Setup {
        _dir: dir,
        _plugins: plugins,
        router: Router::new(registry, RoutingPolicy::default()),
        calls,
    }
}

fn cluster(plugins: &[&str]) -> Value {
    let plugins: Vec<Value> = plugins.iter().map(|name| json!({ "name": name })).collect();
    json!({
        "apiVersion": "cnpgi.io/v1", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"instances": 1, "plugins": plugins}
    })
}

fn counts(setup: &Setup) -> Vec<usize> {
    setup.calls.iter().map(|c| c.load(Ordering::SeqCst)).collect()
}

#[tokio::test]
async fn continue_runs_every_plugin_and_requeue_stops_the_chain() {
    let setup = setup(&[
        Some(Hook::Continue),
        Some(Hook::RequeueAfter(Duration::from_secs(30))),
        Some(Hook::Continue),
    ])
    .await;
    // Listed out of order: the chain still runs a, b, c.
    let all = cluster(&["c.example.com", "a.example.com", "b.example.com"]);
    let outcome = setup
        .router
        .reconciler_hooks(
            HookPhase::Pre,
            Kind::Cluster,
            &RoutedResource::new(all.clone()),
            &serde_json::to_vec(&all).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        HookOutcome::Requeue {
            plugin: "b.example.com".into(),
            after: Duration::from_secs(30)
        }
    );
    assert_eq!(counts(&setup), [1, 1, 0]);

    // Only a and c enabled: both continue.
    let outcome = setup
        .router
        .reconciler_hooks(
            HookPhase::Post,
            Kind::Cluster,
            &RoutedResource::new(cluster(&["a.example.com", "c.example.com"])),
            &serde_json::to_vec(&all).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(outcome, HookOutcome::Continue);
    assert_eq!(counts(&setup), [2, 1, 1]);

    // Nothing hooks Backups: no call at all.
    let outcome = setup
        .router
        .reconciler_hooks(
            HookPhase::Pre,
            Kind::Backup,
            &RoutedResource::new(all.clone()),
            &serde_json::to_vec(&all).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(outcome, HookOutcome::Continue);
    assert_eq!(counts(&setup), [2, 1, 1]);
}

#[tokio::test]
async fn terminate_stops_the_chain_and_errors_fail_closed() {
    let setup = setup(&[Some(Hook::Terminate), None]).await;
    let both = cluster(&["a.example.com", "b.example.com"]);
    let outcome = setup
        .router
        .reconciler_hooks(
            HookPhase::Pre,
            Kind::Cluster,
            &RoutedResource::new(both.clone()),
            &serde_json::to_vec(&both).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        outcome,
        HookOutcome::Terminate {
            plugin: "a.example.com".into()
        }
    );
    assert_eq!(counts(&setup), [1, 0]);

    let only_b = cluster(&["b.example.com"]);
    let error = setup
        .router
        .reconciler_hooks(
            HookPhase::Post,
            Kind::Cluster,
            &RoutedResource::new(only_b.clone()),
            &serde_json::to_vec(&only_b).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, RouteError::Call { .. }), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("b.example.com") && text.contains("ReconcilerHooks/Post"),
        "{text}"
    );
}
