//! `cnpgi-hooks-plugin`: a CNPG-I plugin whose `ReconcilerHooks` answer
//! what its parameters in the Cluster say, so that a test can drive the
//! operator's reconciler through every answer against a real API server.
//! Built on the SDK's declarative API; served with `cnpgi-hooks-plugin
//! plugin --plugin-path DIR`.
//!
//! Parameters (its `spec.plugins[]` entry), each one answer:
//!
//! * `pre`: what `Pre` answers for a Cluster (default `continue`);
//! * `post`: what `Post` answers (default `continue`).
//!
//! An answer is `continue`, `terminate`, `requeue` (the operator picks the
//! delay), `requeue=<seconds>`, or `fail` (the hook fails with
//! `FAILED_PRECONDITION`). A bad value is refused by `ValidateClusterCreate`.
//!
//! With `CNPGI_HOOKS_LOG=FILE` in its environment, the plugin appends one
//! JSON line per hook call to FILE: `{"at": <Unix seconds>, "hook":
//! "pre"|"post", "cluster": "<namespace>/<name>", "generation": <n>,
//! "answer": "<answer>"}`, which is how a test sees when the operator called.

#![forbid(unsafe_code)]

use std::{
    fmt,
    io::Write,
    str::FromStr,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use cnpgi_pluginhelper::{
    capabilities::ReconcilerKind,
    parameters::Parameters,
    plugin::{Hook, Plugin, ReconcilerCall},
    proto::identity::v1::GetPluginMetadataResponse,
    tonic::Status,
};

/// The plugin name: its socket file and `spec.plugins[].name`.
const PLUGIN_NAME: &str = "hooks.e2e.cnpgi.io";

/// What one hook answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Continue,
    Terminate,
    Requeue(u64),
    Fail,
}

impl FromStr for Answer {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "continue" => Ok(Self::Continue),
            "terminate" => Ok(Self::Terminate),
            "requeue" => Ok(Self::Requeue(0)),
            "fail" => Ok(Self::Fail),
            other => other
                .strip_prefix("requeue=")
                .and_then(|seconds| seconds.parse().ok())
                .map(Self::Requeue)
                .ok_or_else(|| {
                    format!("{other:?} is not an answer: continue, terminate, requeue, requeue=<seconds> or fail")
                }),
        }
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Continue => f.write_str("continue"),
            Self::Terminate => f.write_str("terminate"),
            Self::Requeue(0) => f.write_str("requeue"),
            Self::Requeue(seconds) => write!(f, "requeue={seconds}"),
            Self::Fail => f.write_str("fail"),
        }
    }
}

/// The answers, per hook.
#[derive(Parameters, Debug, Clone)]
struct Answers {
    /// What `Pre` answers.
    #[param(from_str, default = "continue")]
    pre: Answer,
    /// What `Post` answers.
    #[param(from_str, default = "continue")]
    post: Answer,
}

/// Answers `hook` for `call` as its parameters say, and logs the call.
async fn answer(hook: &'static str, call: ReconcilerCall<Answers>) -> Result<Hook, Status> {
    let answer = if hook == "pre" {
        call.parameters.pre
    } else {
        call.parameters.post
    };
    log_call(hook, &call, answer)?;
    match answer {
        Answer::Continue => Ok(Hook::Continue),
        Answer::Terminate => Ok(Hook::Terminate),
        Answer::Requeue(seconds) => Ok(Hook::RequeueAfter(Duration::from_secs(seconds))),
        Answer::Fail => Err(Status::failed_precondition(format!(
            "the {hook} hook was told to fail by its parameters"
        ))),
    }
}

/// Appends the call to `$CNPGI_HOOKS_LOG`, when set.
fn log_call(hook: &str, call: &ReconcilerCall<Answers>, answer: Answer) -> Result<(), Status> {
    let Some(path) = std::env::var_os("CNPGI_HOOKS_LOG") else {
        return Ok(());
    };
    let metadata = &call.cluster.metadata;
    let line = serde_json::json!({
        "at": SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64(),
        "hook": hook,
        "cluster": format!(
            "{}/{}",
            metadata.namespace.as_deref().unwrap_or_default(),
            metadata.name.as_deref().unwrap_or_default()
        ),
        "generation": metadata.generation,
        "answer": answer.to_string(),
    });
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| writeln!(file, "{line}"))
        .map_err(|error| Status::internal(format!("cannot log the call to {}: {error}", path.display())))
}

fn plugin() -> Plugin<Answers> {
    Plugin::new(GetPluginMetadataResponse {
        name: PLUGIN_NAME.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        display_name: "ReconcilerHooks test plugin".into(),
        description: "Answers ReconcilerHooks as its parameters say".into(),
        ..Default::default()
    })
    .reconciler_pre(ReconcilerKind::Cluster, |call| answer("pre", call))
    .reconciler_post(ReconcilerKind::Cluster, |call| answer("post", call))
}

fn main() -> std::process::ExitCode {
    plugin().command().execute()
}
