//! A fake Kubernetes API server at the HTTP level, for tests (cargo feature
//! `testing`): lists, streaming watches, create, delete, merge-patch (of
//! objects and their `status`), and Events; every request is recorded.
//!
//! Only the API server is faked: the code under test uses kube's real
//! client over real HTTP, as it would against a cluster.
//!
//! ```no_run
//! # async fn example() {
//! use cnpgi_host::testing::FakeApiServer;
//!
//! let api = FakeApiServer::new();
//! api.collection("/api/v1/namespaces/default/pods");
//! let url = api.clone().start().await;
//! let client = FakeApiServer::client(&url, "default");
//! # let _ = client;
//! # }
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::BTreeMap,
    convert::Infallible,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::{Request, Response, body::Frame, service::service_fn};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_stream::{StreamExt, wrappers::BroadcastStream};

type Body = BoxBody<Bytes, Infallible>;

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Query string.
    pub query: String,
    /// JSON body (`null` when none).
    pub body: Value,
}

/// The fake API server. Cheap to clone: clones share the same state.
#[derive(Clone, Debug)]
pub struct FakeApiServer {
    /// Objects by collection path (`/api/v1/namespaces/ns/pods`) and name.
    objects: Arc<Mutex<BTreeMap<String, BTreeMap<String, Value>>>>,
    watch_events: broadcast::Sender<(String, Value)>,
    /// Watch requests received so far.
    pub watches: Arc<AtomicUsize>,
    /// Every request received.
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    resource_version: Arc<AtomicU64>,
}

impl Default for FakeApiServer {
    fn default() -> Self {
        Self::new()
    }
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"].as_str().unwrap_or_default().to_owned()
}

impl FakeApiServer {
    /// An empty server; add collections with [`FakeApiServer::collection`] or [`FakeApiServer::seed`].
    pub fn new() -> Self {
        Self {
            objects: Arc::default(),
            watch_events: broadcast::channel(256).0,
            watches: Arc::default(),
            requests: Arc::default(),
            resource_version: Arc::new(AtomicU64::new(1)),
        }
    }

    fn stamp(&self, mut object: Value) -> Value {
        let version = self.resource_version.fetch_add(1, Ordering::SeqCst) + 1;
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        object
    }

    /// Creates an empty collection.
    pub fn collection(&self, collection: &str) {
        self.objects.lock().unwrap().entry(collection.to_owned()).or_default();
    }

    /// Stores an object in `collection` (without telling watches).
    pub fn seed(&self, collection: &str, object: Value) {
        let object = self.stamp(object);
        self.objects
            .lock()
            .unwrap()
            .entry(collection.to_owned())
            .or_default()
            .insert(name_of(&object), object);
    }

    /// The stored objects of `collection`.
    pub fn stored(&self, collection: &str) -> Vec<Value> {
        self.objects
            .lock()
            .unwrap()
            .get(collection)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Stores (or deletes) an object and sends the watch event.
    pub fn push(&self, collection: &str, kind: &str, object: Value) {
        let object = self.stamp(object);
        {
            let mut objects = self.objects.lock().unwrap();
            let entry = objects.entry(collection.to_owned()).or_default();
            if kind == "DELETED" {
                entry.remove(&name_of(&object));
            } else {
                entry.insert(name_of(&object), object.clone());
            }
        }
        let _ = self
            .watch_events
            .send((collection.to_owned(), json!({ "type": kind, "object": object })));
    }

    /// Requests with `method` whose path starts with `path_prefix`.
    pub fn recorded(&self, method: &str, path_prefix: &str) -> Vec<Recorded> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.method == method && r.path.starts_with(path_prefix))
            .cloned()
            .collect()
    }

    /// Serves on a loopback port; returns the base URL.
    pub async fn start(self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let this = self.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let this = this.clone();
                        async move { Ok::<_, Infallible>(this.handle(request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        format!("http://{address}")
    }

    /// A kubeconfig (YAML) pointing at `url`, for processes started by a test.
    pub fn kubeconfig(url: &str, namespace: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: {namespace}\ncurrent-context: fake\nusers:\n- name: fake\n  user: {{}}\n"
        )
    }

    /// A kube client talking to this server.
    pub fn client(url: &str, namespace: &str) -> kube::Client {
        let mut config = kube::Config::new(url.parse().unwrap());
        config.default_namespace = namespace.into();
        kube::Client::try_from(config).unwrap()
    }

    async fn handle(&self, request: Request<hyper::body::Incoming>) -> Response<Body> {
        let method = request.method().as_str().to_owned();
        let path = request.uri().path().to_owned();
        let query = request.uri().query().unwrap_or_default().to_owned();
        let bytes = request.into_body().collect().await.unwrap().to_bytes();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        self.requests.lock().unwrap().push(Recorded {
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
            body: body.clone(),
        });
        if path.contains("/events") {
            return json_response(201, body);
        }
        let on_collection = self.objects.lock().unwrap().contains_key(&path);
        match method.as_str() {
            "GET" | "POST" if on_collection => self.handle_collection(&method, &path, &query, body),
            _ => self.handle_item(&method, &path, body),
        }
    }

    /// A list, a watch (GET) or a create (POST) on a collection path.
    fn handle_collection(&self, method: &str, path: &str, query: &str, body: Value) -> Response<Body> {
        match method {
            "GET" if query.split('&').any(|pair| pair == "watch=true" || pair == "watch=1") => self.watch(path),
            "GET" => {
                let items = self.stored(path);
                let version = self.resource_version.load(Ordering::SeqCst).to_string();
                json_response(
                    200,
                    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": version}, "items": items}),
                )
            }
            "POST" => {
                let object = self.stamp(body);
                self.objects
                    .lock()
                    .unwrap()
                    .get_mut(path)
                    .unwrap()
                    .insert(name_of(&object), object.clone());
                json_response(201, object)
            }
            _ => not_found(),
        }
    }

    /// The watch events of the collection at `path`, streamed as they come.
    fn watch(&self, path: &str) -> Response<Body> {
        let wanted = path.to_owned();
        let events = BroadcastStream::new(self.watch_events.subscribe()).filter_map(move |event| match event {
            Ok((collection, event)) if collection == wanted => Some(Ok(Frame::data(Bytes::from(format!("{event}\n"))))),
            _ => None,
        });
        self.watches.fetch_add(1, Ordering::SeqCst);
        Response::builder()
            .header("content-type", "application/json")
            .body(StreamBody::new(events).boxed())
            .unwrap()
    }

    /// A get, delete or (merge) patch of `<collection>/<name>[/status]`.
    fn handle_item(&self, method: &str, path: &str, body: Value) -> Response<Body> {
        let (item_path, status) = match path.strip_suffix("/status") {
            Some(p) => (p, true),
            None => (path, false),
        };
        let Some((collection, name)) = item_path.rsplit_once('/') else {
            return not_found();
        };
        let mut objects = self.objects.lock().unwrap();
        let Some(items) = objects.get_mut(collection) else {
            return not_found();
        };
        match method {
            "GET" => items
                .get(name)
                .cloned()
                .map_or_else(not_found, |o| json_response(200, o)),
            "DELETE" => items.remove(name).map_or_else(not_found, |o| json_response(200, o)),
            "PATCH" => match items.get_mut(name) {
                Some(object) => {
                    let patch = if status {
                        json!({"status": body["status"]})
                    } else {
                        body
                    };
                    // RFC 7386, as the API server applies `application/merge-patch+json`.
                    json_patch::merge(object, &patch);
                    json_response(200, object.clone())
                }
                None => not_found(),
            },
            _ => not_found(),
        }
    }
}

/// A JSON answer with `status`.
fn json_response(status: u16, body: Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .unwrap()
}

/// The API server's `404` Status.
fn not_found() -> Response<Body> {
    json_response(
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
    )
}
