//! What the checks of one plugin share, and how they call it: under the
//! deadline, keeping the slowest call, recording into the report.

use std::{
    fmt::{Debug, Display},
    future::Future,
    pin::Pin,
    time::{Duration, Instant},
};

use cnpgi_core::{
    capabilities::{self, CapabilityError, OperatorRpc, ServiceType},
    patch::{parse_patch, patched},
    service::{Rpc, Service},
    status::{PluginStatusUpdate, previous_statuses, write_plugin_status},
};
use cnpgi_proto::identity::v1::ProbeRequest;
use serde_json::{Value, json};

use super::{options::ConformanceOptions, report::Report};
use crate::{capabilities::ServiceCapabilities, client::PluginClient};

/// What the RPCs that could act on the plugin's side (archive, back up,
/// restore, reconcile, patch) are sent instead of a Cluster or object.
pub(super) const GARBAGE: &[u8] = b"\x00not json";

/// The checks of one service, running: what each service's `checks` returns.
pub(super) type Running<'c> = Pin<Box<dyn Future<Output = ()> + Send + 'c>>;

/// What the plugin said of itself in Identity.
pub(super) struct Identity {
    pub(super) version: String,
    pub(super) services: Vec<ServiceType>,
}

/// A plugin's message, bounded and on one line, for a report.
fn short(message: &str) -> String {
    cnpgi_core::echo::bounded_string(message.replace('\n', " "))
}

/// The one context of a run: the plugin, the deadline, the report, what the
/// plugin said of itself, and the sample Cluster every call carries.
pub(super) struct Checker {
    pub(super) client: PluginClient,
    /// The name the plugin was found under.
    expected_name: String,
    pub(super) deadline: Duration,
    pub(super) strict: bool,
    /// The slowest call so far.
    slowest: Duration,
    pub(super) report: Report,
    /// The services advertised in Identity/GetPluginCapabilities.
    pub(super) services: Vec<ServiceType>,
    /// The RPCs advertised in Operator/GetCapabilities.
    pub(super) operator_rpcs: Vec<OperatorRpc>,
    /// The sample Cluster, with the plugin's `status.pluginStatus` entry
    /// once [`Checker::load`]ed.
    pub(super) cluster: Value,
    /// `cluster`, as sent.
    pub(super) cluster_bytes: Vec<u8>,
    /// What the plugin's ValidateClusterCreate said is wrong with `cluster`,
    /// when it refused it: its other calls may then refuse the Cluster too.
    pub(super) refused_by_validation: Option<String>,
}

impl Checker {
    pub(super) fn new(client: &PluginClient, expected_name: &str, options: &ConformanceOptions) -> Self {
        Self {
            client: client.clone(),
            expected_name: expected_name.to_owned(),
            deadline: options.deadline,
            strict: options.strict,
            slowest: Duration::ZERO,
            report: Report {
                plugin: expected_name.to_owned(),
                checks: Vec::new(),
            },
            services: Vec::new(),
            operator_rpcs: Vec::new(),
            cluster: sample_cluster(expected_name, options.cluster.as_ref()),
            cluster_bytes: Vec::new(),
            refused_by_validation: None,
        }
    }

    /// The name the plugin was found under.
    pub(super) fn expected_name(&self) -> &str {
        &self.expected_name
    }

    /// Takes in what the plugin said of itself, and writes its
    /// `status.pluginStatus` entry in the sample Cluster, as CloudNativePG
    /// does before calling it.
    pub(super) fn load(&mut self, identity: Identity, operator_rpcs: Vec<OperatorRpc>) {
        let previous = previous_statuses(&self.cluster)
            .get(self.expected_name.as_str())
            .cloned();
        write_plugin_status(
            &mut self.cluster,
            &[PluginStatusUpdate {
                name: self.expected_name.clone(),
                version: identity.version,
                capabilities: capabilities::service_names(&identity.services),
                operator_capabilities: capabilities::operator_rpc_names(&operator_rpcs),
                status: previous,
                // The other services' capabilities are read by their checks,
                // after this entry is written: left out, as CloudNativePG
                // leaves out empty lists.
                ..PluginStatusUpdate::default()
            }],
        );
        self.cluster_bytes = serde_json::to_vec(&self.cluster).unwrap_or_default();
        self.services = identity.services;
        self.operator_rpcs = operator_rpcs;
    }

    /// The last checks: still serving, and every call within the deadline.
    pub(super) async fn finish(mut self) -> Report {
        let client = self.client.clone();
        self.record_call(
            "still serving after every call",
            client.identity().probe(client.request(ProbeRequest {})),
            |_| Ok("Probe answers".into()),
        )
        .await;
        let timing = format!(
            "slowest {} ms (deadline {} ms)",
            self.slowest.as_millis(),
            self.deadline.as_millis()
        );
        self.report.record(
            "every call answered within the deadline",
            if self.slowest <= self.deadline {
                Ok(timing)
            } else {
                Err(timing)
            },
        );
        self.report
    }

    /// Runs `call` under the deadline, counting its time toward the slowest
    /// call; `Err` (the check's message) when it did not answer in time.
    async fn answer<T>(
        &mut self,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<Result<tonic::Response<T>, tonic::Status>, String> {
        let started = Instant::now();
        let answer = tokio::time::timeout(self.deadline, call).await;
        self.slowest = self.slowest.max(started.elapsed());
        answer.map_err(|_| format!("no answer within {} ms", self.deadline.as_millis()))
    }

    /// Runs `call` under the deadline, turning errors into text.
    pub(super) async fn timed<T>(
        &mut self,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, String> {
        match self.answer(call).await? {
            Err(status) => Err(format!("{:?}: {}", status.code(), status.message())),
            Ok(response) => Ok(response.into_inner()),
        }
    }

    /// Runs `call` under the deadline and records check `name`: the error,
    /// or what `judge` makes of the answer.
    pub(super) async fn record_call<T>(
        &mut self,
        name: impl Into<String>,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
        judge: impl FnOnce(T) -> Result<String, String>,
    ) {
        let result = self.timed(call).await.and_then(judge);
        let result = self.excused(result);
        self.report.record(name, result);
    }

    /// A call's outcome, with `INVALID_ARGUMENT` accepted when the plugin's
    /// own validation refused the Cluster: CloudNativePG would never have
    /// admitted it, and refusing it is what the plugin should do.
    pub(super) fn excused(&self, result: Result<String, String>) -> Result<String, String> {
        excuse(self.refused_by_validation.is_some(), result)
    }

    /// Garbage sent to an Operator or OperatorLifecycle RPC must be refused
    /// with an error; CNPG-I mandates no code, and `INVALID_ARGUMENT` is the
    /// recommended one.
    pub(super) async fn garbage_refused<T>(
        &mut self,
        name: &str,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) {
        match self.answer(call).await {
            Err(late) => self.report.record(name, Err(late)),
            Ok(Ok(_)) => self.report.record(name, Err("accepted garbage".into())),
            Ok(Err(status)) if status.code() == tonic::Code::InvalidArgument => {
                self.report.record(name, Ok("INVALID_ARGUMENT".into()))
            }
            Ok(Err(status)) => self.report.advise(
                name,
                format!(
                    "refused with {:?} ({}); INVALID_ARGUMENT is recommended",
                    status.code(),
                    status.message()
                ),
                self.strict,
            ),
        }
    }

    /// An advertised `rpc` of the later services sent what its
    /// [`Exercise`](cnpgi_core::service::Exercise) says it must refuse
    /// (garbage, or input it cannot serve): check `<Service/RPC>: <what> is
    /// refused`, as [`Checker::refuses`].
    pub(super) async fn refuses_as_described<T>(
        &mut self,
        rpc: &Rpc,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) {
        let Some((sent, expected)) = rpc.conformance.refusal() else {
            // A check asked of an RPC the table says is exercised otherwise:
            // reported, not skipped, so that the mismatch is seen.
            let reason = format!(
                "the service table exercises it as {:?}, not by a refusal",
                rpc.conformance
            );
            self.report.record(rpc.method, Err(reason));
            return;
        };
        self.refuses(&format!("{}: {sent} is refused", rpc.method), expected, call)
            .await;
    }

    /// An advertised RPC of the later services called with garbage (or with
    /// input it cannot serve): it must answer, and refuse; `UNIMPLEMENTED`
    /// means it is not served. `expected` passes; another code is a
    /// recommendation.
    pub(super) async fn refuses<T>(
        &mut self,
        name: &str,
        expected: tonic::Code,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) {
        match self.answer(call).await {
            Err(late) => self.report.record(name, Err(late)),
            Ok(Ok(_)) => self.report.record(name, Err("answered OK".into())),
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => self.report.record(
                name,
                Err(format!("advertised, but answers UNIMPLEMENTED: {}", status.message())),
            ),
            Ok(Err(status)) if status.code() == expected => {
                self.report.record(name, Ok(code_name(expected).to_owned()))
            }
            Ok(Err(status)) => self.report.advise(
                name,
                format!(
                    "refused with {} ({}); {} is recommended",
                    code_name(status.code()),
                    short(status.message()),
                    code_name(expected)
                ),
                self.strict,
            ),
        }
    }

    /// Asks one of the later services for its capabilities (`ask`): the
    /// answer when it is advertised and answers; else the failure, or
    /// whether the unadvertised service is absent, is recorded.
    pub(super) async fn service<A>(
        &mut self,
        service: &Service,
        ask: impl Future<Output = Result<tonic::Response<A>, tonic::Status>>,
    ) -> Option<A> {
        let label = service.label;
        let answer = self.timed(ask).await;
        if self.services.contains(&service.capability) {
            match answer {
                Ok(answer) => Some(answer),
                Err(reason) => {
                    let reason = if reason.starts_with("Unimplemented") {
                        "advertised, but answers UNIMPLEMENTED: the service is not served".to_owned()
                    } else {
                        reason
                    };
                    self.report.record(
                        format!("advertised {label} service answers GetCapabilities"),
                        Err(reason),
                    );
                    None
                }
            }
        } else {
            match absent(answer) {
                Ok(detail) => self
                    .report
                    .record(format!("unadvertised {label} service is absent"), Ok(detail)),
                Err(reason) => self.report.advise(
                    format!("unadvertised {label} service is absent"),
                    format!("{reason}: CloudNativePG never calls it"),
                    self.strict,
                ),
            }
            None
        }
    }

    /// Service `S`'s GetCapabilities asked and checked ([`Self::service`]),
    /// then its entries read and checked ([`Self::capabilities`]): the
    /// values the plugin advertises, `None` when there is no answer to check.
    pub(super) async fn advertised<S: ServiceCapabilities>(&mut self) -> Option<Vec<S::Value>> {
        let answer = self.service(S::SERVICE, S::call(&self.client)).await?;
        let values = consistent(S::entries(&answer), S::read, S::name);
        Some(self.capabilities(S::SERVICE, values, |values| names(values, S::name)))
    }

    pub(super) fn capabilities<T>(
        &mut self,
        service: &Service,
        read: Result<Vec<T>, String>,
        shown: impl Fn(&[T]) -> String,
    ) -> Vec<T> {
        let name = format!("advertised {} service answers GetCapabilities", service.label);
        match read {
            Ok(values) => {
                self.report.record(name, Ok(shown(&values)));
                values
            }
            Err(reason) => {
                self.report.record(name, Err(format!("inconsistent: {reason}")));
                Vec::new()
            }
        }
    }
}

fn sample_cluster(plugin: &str, given: Option<&Value>) -> Value {
    let mut cluster = given.cloned().unwrap_or_else(|| {
        json!({
            "apiVersion": "cnpgi.io/v1",
            "kind": "Cluster",
            "metadata": {"name": "conformance", "namespace": "default", "uid": "00000000-0000-4000-8000-00000000c0de"},
            "spec": {"instances": 1, "plugins": []}
        })
    });
    let plugins = cluster
        .pointer_mut("/spec/plugins")
        .and_then(Value::as_array_mut)
        .map(|plugins| {
            if !plugins.iter().any(|p| p["name"] == plugin) {
                plugins.push(json!({ "name": plugin }));
            }
        });
    if plugins.is_none() {
        cluster["spec"]["plugins"] = json!([{ "name": plugin }]);
    }
    cluster
}

/// [`Checker::excused`]: only `INVALID_ARGUMENT`, only for a refused Cluster.
fn excuse(refused_by_validation: bool, result: Result<String, String>) -> Result<String, String> {
    match result {
        Err(reason) if refused_by_validation && reason.starts_with("InvalidArgument:") => Ok(format!(
            "refuses the Cluster its validation refuses (INVALID_ARGUMENT: {})",
            short(reason.trim_start_matches("InvalidArgument:").trim())
        )),
        result => result,
    }
}

/// An unadvertised service's answer: `UNIMPLEMENTED` is expected.
pub(super) fn absent<T>(answer: Result<T, String>) -> Result<String, String> {
    match answer {
        Err(reason) if reason.starts_with("Unimplemented") => Ok("UNIMPLEMENTED".into()),
        Err(reason) => Err(format!("expected UNIMPLEMENTED, got {reason}")),
        Ok(_) => Err("answers although not advertised".into()),
    }
}

/// Checks a patch: valid RFC 6902, applies to `object`; returns the result.
pub(super) fn check_patch(object: &Value, patch: &[u8]) -> Result<Value, String> {
    parse_patch(patch)
        .and_then(|patch| patched(object, &patch))
        .map_err(|e| e.to_string())
}

/// The idempotence check of a patch: `twice`, the result of patching the
/// already patched `once`, must equal it; `changed` says otherwise.
pub(super) fn idempotent(twice: Result<Value, String>, once: &Value, changed: &str) -> Result<String, String> {
    match twice {
        Ok(twice) if twice == *once => Ok("no further change".into()),
        Ok(_) => Err(changed.to_owned()),
        Err(reason) => Err(reason),
    }
}

/// Reads a `GetCapabilities` answer: the known entries, or what is wrong
/// (unknown or missing types, duplicates, none at all).
pub(super) fn consistent<C, T: PartialEq + Debug, N: Display>(
    entries: &[C],
    read: impl Fn(&C) -> Result<T, CapabilityError>,
    name: impl Fn(&T) -> N,
) -> Result<Vec<T>, String> {
    let mut known = Vec::new();
    let mut problems = Vec::new();
    for entry in entries {
        match read(entry) {
            Ok(value) if known.contains(&value) => problems.push(format!("{} listed twice", name(&value))),
            Ok(value) => known.push(value),
            Err(error) => problems.push(error.to_string()),
        }
    }
    if entries.is_empty() {
        problems.push("the service is advertised, but no RPC or kind".to_owned());
    }
    if problems.is_empty() {
        Ok(known)
    } else {
        Err(problems.join("; "))
    }
}

/// Capability values by name, for a report: `A, B`.
pub(super) fn names<T, N: Display>(values: &[T], name: impl Fn(&T) -> N) -> String {
    values
        .iter()
        .map(|value| name(value).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A gRPC code as the specification names it (`INVALID_ARGUMENT`).
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_cluster_lists_the_plugin_once() {
        let built = sample_cluster("a.example.com", None);
        assert_eq!(built["spec"]["plugins"], json!([{"name": "a.example.com"}]));
        let given = json!({"spec": {"plugins": [{"name": "a.example.com", "parameters": {"x": "1"}}]}});
        assert_eq!(sample_cluster("a.example.com", Some(&given)), given);
        let without = sample_cluster("a.example.com", Some(&json!({"spec": {}})));
        assert_eq!(without["spec"]["plugins"], json!([{"name": "a.example.com"}]));
    }

    #[test]
    fn an_unadvertised_service_must_answer_unimplemented() {
        assert_eq!(
            absent::<()>(Err("Unimplemented: no".into())),
            Ok("UNIMPLEMENTED".into())
        );
        assert_eq!(
            absent::<()>(Err("Internal: boom".into())),
            Err("expected UNIMPLEMENTED, got Internal: boom".into())
        );
        assert_eq!(absent(Ok(())), Err("answers although not advertised".into()));
    }

    #[test]
    fn idempotence_compares_the_second_patch_with_the_first() {
        let once = json!({"a": 1});
        assert_eq!(
            idempotent(Ok(once.clone()), &once, "changed"),
            Ok("no further change".into())
        );
        assert_eq!(idempotent(Ok(json!({"a": 2})), &once, "changed"), Err("changed".into()));
        assert_eq!(idempotent(Err("boom".into()), &once, "changed"), Err("boom".into()));
    }

    #[test]
    fn capabilities_are_known_distinct_and_not_empty() {
        let read = |v: &i32| {
            if *v > 0 {
                Ok(*v)
            } else {
                Err(CapabilityError::Unknown(*v))
            }
        };
        let name = |v: &i32| if *v == 1 { "ONE" } else { "OTHER" };
        assert_eq!(consistent(&[1, 2], read, name), Ok(vec![1, 2]));
        assert_eq!(consistent(&[1, 1], read, name), Err("ONE listed twice".into()));
        assert!(consistent(&[0], read, name).is_err());
        assert_eq!(
            consistent(&[], read, name),
            Err("the service is advertised, but no RPC or kind".into())
        );
    }

    #[test]
    fn only_invalid_argument_for_a_refused_cluster_is_excused() {
        let refused = || Err::<String, String>("InvalidArgument: bad labels".into());
        assert!(excuse(true, refused()).unwrap().contains("bad labels"));
        assert_eq!(excuse(false, refused()), refused());
        for other in ["Internal: boom", "no answer within 1000 ms", "does not apply"] {
            assert_eq!(excuse(true, Err(other.into())), Err(other.into()), "{other}");
        }
        assert_eq!(excuse(true, Ok("applies".into())), Ok("applies".into()));
    }
}
