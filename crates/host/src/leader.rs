//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! `leaderelection` does it: replicas serve webhooks, only the holder of the
//! Lease reconciles.
//!
//! A candidate takes the Lease when it does not exist, has no holder, or
//! has not changed for its `leaseDurationSeconds` as seen by this process's
//! own clock (no comparison of clocks between machines). Every write is a
//! replace guarded by the `resourceVersion` read just before, so two
//! candidates cannot both win. The leader renews every retry period; when no
//! renewal succeeded within the renew deadline, or another replica took the
//! Lease, leadership is lost and [`LeaderElector::hold`] returns.

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};
use tokio::time::Instant;

/// Leader election settings; [`LeaseOptions::new`] gives client-go's timings.
#[derive(Debug, Clone)]
pub struct LeaseOptions {
    /// Namespace of the Lease (the operator's).
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This candidate's identity (the Pod name, unique among replicas).
    pub identity: String,
    /// How long a Lease not renewed stays its holder's (15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before giving up (10 s).
    pub renew_deadline: Duration,
    /// Time between attempts to acquire or renew (2 s).
    pub retry_period: Duration,
}

impl LeaseOptions {
    /// Lease `name` in `namespace` for `identity`, with client-go's
    /// default timings (15 s, 10 s, 2 s).
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// A failed Lease call.
#[derive(Debug, thiserror::Error)]
#[error("Lease {namespace}/{name}: {action} failed: {source}")]
pub struct LeaseError {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// What was attempted.
    pub action: &'static str,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

/// What this candidate last saw in the Lease, and when it saw it change.
#[derive(Debug, PartialEq)]
struct Record {
    holder: String,
    renew_time: Option<String>,
    transitions: Option<i32>,
}

/// One candidate of the election.
pub struct LeaderElector {
    api: Api<Lease>,
    options: LeaseOptions,
    observed: Option<(Record, Instant)>,
}

impl LeaderElector {
    /// A candidate for `options`.
    pub fn new(client: Client, options: LeaseOptions) -> Self {
        Self {
            api: Api::namespaced(client, &options.namespace),
            options,
            observed: None,
        }
    }

    fn error(&self, action: &'static str) -> impl FnOnce(kube::Error) -> LeaseError + '_ {
        move |source| LeaseError {
            namespace: self.options.namespace.clone(),
            name: self.options.name.clone(),
            action,
            source,
        }
    }

    fn seconds(duration: Duration) -> i32 {
        i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// One attempt: `true` when this candidate holds the Lease afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaseError> {
        let now = MicroTime(Timestamp::now());
        let me = self.options.identity.clone();
        let Some(mut lease) = self.api.get_opt(&self.options.name).await.map_err(self.error("get"))? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.options.name.clone()),
                    namespace: Some(self.options.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(Self::seconds(self.options.lease_duration)),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                // Another candidate created it first.
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(e) => Err(self.error("create")(e)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let record = Record {
            holder: holder.clone(),
            renew_time: spec.renew_time.as_ref().map(|t| t.0.to_string()),
            transitions: spec.lease_transitions,
        };
        let observed_at = match &self.observed {
            Some((seen, at)) if *seen == record => *at,
            _ => {
                let at = Instant::now();
                self.observed = Some((record, at));
                at
            }
        };
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.options.lease_duration, Duration::from_secs);
        if !holder.is_empty() && holder != me && observed_at.elapsed() < duration {
            return Ok(false);
        }
        let mine = holder == me;
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(me),
            lease_duration_seconds: Some(Self::seconds(self.options.lease_duration)),
            acquire_time: if mine {
                spec.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + i32::from(!mine)),
            ..spec
        });
        // The resourceVersion read above guards the write.
        match self
            .api
            .replace(&self.options.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                if !mine {
                    tracing::info!(lease = %self.options.name, previous = %holder, "acquired the leader Lease");
                }
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(self.error("update")(e)),
        }
    }

    /// Waits until this candidate holds the Lease, trying every retry period.
    pub async fn acquire(&mut self) {
        tracing::info!(lease = %self.options.name, identity = %self.options.identity, "waiting for leadership");
        loop {
            match tokio::time::timeout(
                self.options.retry_period.max(Duration::from_secs(1)),
                self.try_acquire_or_renew(),
            )
            .await
            {
                Ok(Ok(true)) => return,
                Ok(Ok(false)) => {}
                Ok(Err(error)) => tracing::warn!(%error, "cannot acquire the leader Lease"),
                Err(_) => tracing::warn!("cannot acquire the leader Lease: no answer in time"),
            }
            tokio::time::sleep(self.options.retry_period).await;
        }
    }

    /// Renews the Lease every retry period while this candidate leads;
    /// returns why leadership was lost.
    ///
    /// As client-go's `renew`: each round starts one retry period after the
    /// last renewal and has the whole renew deadline to succeed, retrying
    /// every retry period; the wait between rounds is not charged to the
    /// deadline, so a slow but answering API server does not cost the Lease.
    pub async fn hold(&mut self) -> String {
        loop {
            tokio::time::sleep(self.options.retry_period).await;
            if let Err(reason) = self.renew_within_deadline().await {
                return reason;
            }
        }
    }

    /// One renewal round: `Ok` once renewed, `Err(reason)` when the renew
    /// deadline passed without a renewal or another replica took the Lease.
    async fn renew_within_deadline(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + self.options.renew_deadline;
        loop {
            let problem = match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => return Ok(()),
                Ok(Ok(false)) => return Err("another replica holds the leader Lease".to_owned()),
                Ok(Err(error)) => error.to_string(),
                Err(_) => "no answer in time".to_owned(),
            };
            tracing::warn!(%problem, "cannot renew the leader Lease");
            let next = Instant::now() + self.options.retry_period;
            if next >= deadline {
                // No time left for another attempt.
                return Err(format!(
                    "the leader Lease was not renewed within {} s: {problem}",
                    self.options.renew_deadline.as_secs()
                ));
            }
            tokio::time::sleep_until(next).await;
        }
    }

    /// Gives the Lease up (no holder) so that another replica takes over at
    /// once; on a clean shutdown, after reconciling has stopped.
    pub async fn release(&mut self) {
        let result = async {
            let Some(mut lease) = self.api.get_opt(&self.options.name).await.map_err(self.error("get"))? else {
                return Ok(());
            };
            let mut spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.options.identity.as_str()) {
                return Ok(());
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            lease.spec = Some(spec);
            self.api
                .replace(&self.options.name, &PostParams::default(), &lease)
                .await
                .map(|_| ())
                .map_err(self.error("release"))
        };
        match tokio::time::timeout(Duration::from_secs(2), result).await {
            Ok(Ok(())) => tracing::info!(lease = %self.options.name, "released the leader Lease"),
            Ok(Err(error)) => tracing::warn!(%error, "cannot release the leader Lease"),
            Err(_) => tracing::warn!("cannot release the leader Lease: no answer in time"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::{Arc, Mutex};

    use http::{Request, Response};
    use kube::client::Body;
    use serde_json::{Value, json};

    use super::*;

    /// A Lease API answering GET at once and PUT after `put_delay` (a slow
    /// but healthy API server), or never when `put_delay` is `None`.
    fn lease_api(put_delay: Option<Duration>) -> (Client, Arc<Mutex<u32>>) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let renewals = Arc::new(Mutex::new(0));
        let counted = renewals.clone();
        tokio::spawn(async move {
            let mut lease = json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "lead", "namespace": "ns", "resourceVersion": "1"},
                "spec": {"holderIdentity": "me", "leaseDurationSeconds": 4},
            });
            while let Some((request, respond)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let body = body.collect_bytes().await.unwrap();
                let counted = counted.clone();
                let answer = match parts.method {
                    http::Method::GET => lease.clone(),
                    http::Method::PUT => {
                        let Some(delay) = put_delay else {
                            // Never answered: keep the responder alive.
                            tokio::spawn(async move {
                                tokio::time::sleep(Duration::from_secs(3600)).await;
                                drop(respond);
                            });
                            continue;
                        };
                        let mut sent: Value = serde_json::from_slice(&body).unwrap();
                        let version: u64 = lease["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
                        sent["metadata"]["resourceVersion"] = json!((version + 1).to_string());
                        lease = sent.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            *counted.lock().unwrap() += 1;
                            respond.send_response(Response::new(Body::from(serde_json::to_vec(&sent).unwrap())));
                        });
                        continue;
                    }
                    other => panic!("unexpected {other} {}", parts.uri),
                };
                respond.send_response(Response::new(Body::from(serde_json::to_vec(&answer).unwrap())));
            }
        });
        (Client::new(service, "ns"), renewals)
    }

    fn options() -> LeaseOptions {
        LeaseOptions {
            lease_duration: Duration::from_secs(4),
            renew_deadline: Duration::from_secs(3),
            retry_period: Duration::from_secs(1),
            ..LeaseOptions::new("ns", "lead", "me")
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_but_answering_api_server_does_not_cost_the_lease() {
        // Each renewal takes 2.5 s of the 3 s renew deadline: the wait
        // between rounds must not be charged to the deadline.
        let (client, renewals) = lease_api(Some(Duration::from_millis(2500)));
        let mut elector = LeaderElector::new(client, options());
        let held = tokio::time::timeout(Duration::from_secs(60), elector.hold()).await;
        assert!(held.is_err(), "leadership lost: {:?}", held.ok());
        assert!(
            *renewals.lock().unwrap() >= 10,
            "renewed {} times",
            renewals.lock().unwrap()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_renewal_loses_the_lease_at_the_renew_deadline() {
        let (client, _) = lease_api(None);
        let mut elector = LeaderElector::new(client, options());
        let started = Instant::now();
        let reason = tokio::time::timeout(Duration::from_secs(60), elector.hold())
            .await
            .expect("hold returns");
        assert!(reason.contains("not renewed within 3 s"), "{reason}");
        // One retry period of waiting, then the 3 s deadline.
        assert_eq!(started.elapsed().as_secs(), 4);
    }
}
