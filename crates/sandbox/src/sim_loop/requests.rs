//! API requests with bounded concurrency: the backlog, the requests in flight, and executing each
//! request (binding, status patch, Event, delete with a UID precondition) through the `kube`
//! client, reporting its outcome back to the loop.
//!
//! Must not decide what to send.

use std::future::Future;
use std::pin::Pin;

use k8s_openapi::api::core::v1::{Binding, Event, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, Preconditions};
use serde_json::Value;

use super::pods::split_key;
use super::sim::Sim;
use super::types::{Done, Req};

pub(super) fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

impl Sim {
    pub(super) fn on_done(&mut self, done: Done) {
        match done {
            Done::Bind {
                key,
                uid,
                node,
                result,
            } => self.on_bind_done(key, uid, node, result),
            Done::KubeletStatus { key, result } => self.on_kubelet_status_done(key, result),
            Done::Other => {}
        }
    }

    pub(super) fn pump(&mut self) {
        while self.inflight.len() < self.cfg.sim_concurrency.max(1) {
            let Some(req) = self.backlog.pop_front() else {
                break;
            };
            let fut = execute(self.client.clone(), req);
            self.inflight.push(fut);
        }
    }
}

fn execute(client: kube::Client, req: Req) -> Pin<Box<dyn Future<Output = Done> + Send>> {
    Box::pin(async move {
        match req {
            Req::Bind { key, uid, node } => {
                let (ns, name) = split_key(&key);
                let api: Api<Pod> = Api::namespaced(client, ns);
                let binding = Binding {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        namespace: Some(ns.to_string()),
                        uid: Some(uid.clone()),
                        ..ObjectMeta::default()
                    },
                    target: ObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Node".into()),
                        name: Some(node.clone()),
                        ..ObjectReference::default()
                    },
                };
                let result = api
                    .create_subresource::<Binding, Value>(
                        "binding",
                        name,
                        &crate::field_manager::post_params(),
                        &binding,
                    )
                    .await
                    .map(|_| ());
                Done::Bind {
                    key,
                    uid,
                    node,
                    result,
                }
            }
            Req::Status { key, body, kubelet } => {
                let (ns, name) = split_key(&key);
                let api: Api<Pod> = Api::namespaced(client, ns);
                let result = api
                    .patch_status(
                        name,
                        &crate::field_manager::patch_params(),
                        &Patch::Merge(&body),
                    )
                    .await
                    .map(|_| ());
                if kubelet {
                    Done::KubeletStatus { key, result }
                } else {
                    if let Err(error) = result
                        && api_code(&error) != Some(404)
                    {
                        tracing::warn!(pod = %key, %error, "sandbox scheduler: status write failed");
                    }
                    Done::Other
                }
            }
            Req::Event(event) => {
                let ns = event.metadata.namespace.clone().unwrap_or_default();
                let api: Api<Event> = Api::namespaced(client, &ns);
                if let Err(error) = api
                    .create(&crate::field_manager::post_params(), &event)
                    .await
                {
                    tracing::debug!(%error, "sandbox cluster: event not written");
                }
                Done::Other
            }
            Req::Delete { key, uid } => {
                let (ns, name) = split_key(&key);
                let api: Api<Pod> = Api::namespaced(client, ns);
                let dp = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                if let Err(error) = api.delete(name, &dp).await
                    && !matches!(api_code(&error), Some(404 | 409))
                {
                    tracing::warn!(pod = %key, %error, "sandbox kubelet: delete failed");
                }
                Done::Other
            }
        }
    })
}
