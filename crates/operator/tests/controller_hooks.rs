//! The reconciler calls ReconcilerHooks Pre and Post as CloudNativePG does:
//! a Pre requeue or terminate stops before any Pod is written, a Post
//! requeue sets the next requeue, a hook error is a plugin failure. Plugins
//! are real (served over a Unix socket); the Kubernetes side is the HTTP-level
//! fake the other reconciler unit tests use.

#![allow(clippy::unwrap_used)]

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use cnpgi_client::client::{ClientOptions, PluginClient, Transport};
use cnpgi_host::{Host, HostOptions, testing::FakeApiServer};
use cnpgi_operator::controller::{self, Context, ReconcileError};
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
use kube::runtime::controller::Action;
use serde_json::json;
use tonic::{Request, Response, Status};

const PLUGIN: &str = "hooks.example.com";
const PODS: &str = "/api/v1/namespaces/default/pods";
const CLUSTERS: &str = "/apis/cnpgi.io/v1/namespaces/default/clusters";

/// Answers the configured hook to Pre and Post (`None`: an error).
#[derive(Clone, Default)]
struct Answers {
    pre: Option<Hook>,
    post: Option<Hook>,
}

struct Hooks(Arc<Mutex<Answers>>);

impl Hooks {
    fn reply(answer: Option<Hook>) -> Result<Response<ReconcilerHooksResult>, Status> {
        answer
            .map(|hook| Response::new(hook.into()))
            .ok_or_else(|| Status::unavailable("hook backend down"))
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

    async fn pre(&self, _: Request<ReconcilerHooksRequest>) -> Result<Response<ReconcilerHooksResult>, Status> {
        Self::reply(self.0.lock().unwrap().pre)
    }

    async fn post(&self, _: Request<ReconcilerHooksRequest>) -> Result<Response<ReconcilerHooksResult>, Status> {
        Self::reply(self.0.lock().unwrap().post)
    }
}

#[tokio::test]
async fn pre_and_post_hooks_steer_the_reconcile() {
    let answers = Arc::new(Mutex::new(Answers {
        pre: Some(Hook::RequeueAfter(Duration::from_secs(42))),
        post: Some(Hook::Continue),
    }));
    let dir = tempfile::tempdir().unwrap();
    let server = PluginServer::new(TestIdentity::new(PLUGIN).with_service(ServiceType::ReconcilerHooks))
        .add_service(ReconcilerHooksServer::new(Hooks(answers.clone())));
    let _served = TestPlugin::start_unix_in(server, dir.path()).await.unwrap();
    let host = Host::new(HostOptions::default());
    let path = dir.path().join(PLUGIN);
    host.add_plugin(
        "static",
        PluginClient::new(PLUGIN, Transport::Unix { path }, &ClientOptions::default()).unwrap(),
    )
    .await
    .unwrap();

    let cluster = json!({
        "apiVersion": "cnpgi.io/v1", "kind": "Cluster",
        "metadata": {"name": "pg", "namespace": "default", "uid": "0b9f6b3a-8d2e-4c5a-9d61-3f0e2a7c1b12", "generation": 1},
        "spec": {"instances": 1, "plugins": [{"name": PLUGIN}]}
    });
    let api = FakeApiServer::new();
    api.collection(PODS);
    api.seed(CLUSTERS, cluster.clone());
    let url = api.clone().start().await;
    let mut ctx = Context::new(FakeApiServer::client(&url, "default"), host, "cnpgi-operator");
    ctx.resync = Duration::from_secs(60);
    let ctx = Arc::new(ctx);
    let cluster = Arc::new(serde_json::from_value(cluster).unwrap());
    let reconcile = || controller::reconcile(Arc::clone(&cluster), ctx.clone());

    // Pre asks for a requeue: nothing is created, the delay is the plugin's.
    assert_eq!(reconcile().await.unwrap(), Action::requeue(Duration::from_secs(42)));
    assert!(api.stored(PODS).is_empty());

    // Pre terminates: nothing is created, no requeue.
    answers.lock().unwrap().pre = Some(Hook::Terminate);
    assert_eq!(reconcile().await.unwrap(), Action::await_change());
    assert!(api.stored(PODS).is_empty());

    // Pre continues: the Pod is created; Post's requeue sets the next one.
    *answers.lock().unwrap() = Answers {
        pre: Some(Hook::Continue),
        post: Some(Hook::RequeueAfter(Duration::from_secs(9))),
    };
    assert_eq!(reconcile().await.unwrap(), Action::requeue(Duration::from_secs(9)));
    assert_eq!(api.stored(PODS).len(), 1);

    // A failing hook is a plugin failure: phase, condition, Event.
    answers.lock().unwrap().pre = None;
    let error = reconcile().await.unwrap_err();
    assert!(matches!(error, ReconcileError::Plugin(_)), "{error}");
    assert!(error.to_string().contains("ReconcilerHooks/Pre"), "{error}");
    let status = api
        .recorded("PATCH", &format!("{CLUSTERS}/pg/status"))
        .last()
        .unwrap()
        .body["status"]
        .clone();
    assert_eq!(status["phase"], "Plugin error");
    // Retried after CloudNativePG's 15 s, not the 10 s of other plugin failures.
    assert_eq!(
        controller::error_policy(Arc::clone(&cluster), &error, ctx.clone()),
        Action::requeue(controller::HOOK_ERROR_RETRY)
    );
    assert_eq!(controller::HOOK_ERROR_RETRY, Duration::from_secs(15));
}
