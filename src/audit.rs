//! Every Kubernetes API call the operator makes, counted by group, resource, verb and status
//! code: a tower layer under the operator's kube `Client`, so each API wrapper (kube-runtime's
//! watchers and Recorder, kube-lease-manager, the controller's writes) registers its calls here
//! without knowing it. The counts are the `diorch_kube_api_requests_total` metric, and the tests
//! compare the calls seen with the RBAC table in `rbac.rs`.
//!
//! Owns the request classification (the API server's own rules for a request's verb and
//! resource) and the layer; it must not change, delay or retry a request.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// One kind of API call, as RBAC sees it. Non-resource requests (`/version`, discovery) have
/// an empty resource and the HTTP method's verb.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ApiCall {
    pub group: String,
    /// `pods`, or `dijobs/status` for a subresource.
    pub resource: String,
    pub verb: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiRequestLabels {
    #[prometheus(flatten)]
    pub call: ApiCall,
    /// The HTTP status, or `error` when no response came (connection refused, timeout).
    pub code: String,
}

/// The request counts; clones share them.
#[derive(Clone, Debug, Default)]
pub struct ApiRequests(pub Family<ApiRequestLabels, Counter>);

impl ApiRequests {
    /// The layer that counts the requests of a client into these counts.
    pub fn layer(&self) -> AuditLayer {
        AuditLayer(self.clone())
    }
}

/// What a request to the API server is, by the API server's rules (`RequestInfoFactory`).
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> ApiCall {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return non_resource(method),
    };
    // `namespaces/<ns>/<resource>...`; `namespaces/<name>` is the Namespace object itself.
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        _ => rest,
    };
    let (resource, name, sub) = match rest {
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(*name), None),
        [resource, name, sub, ..] => (*resource, Some(*name), Some(*sub)),
        [] => return non_resource(method),
    };
    let watching = query.is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1" || kv == "watch")
    });
    let verb = match (method.as_str(), name.is_some()) {
        ("GET", _) if watching => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return non_resource(method),
    };
    ApiCall {
        group: group.to_string(),
        resource: match sub {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_string(),
        },
        verb: verb.to_string(),
    }
}

fn non_resource(method: &Method) -> ApiCall {
    ApiCall {
        group: String::new(),
        resource: String::new(),
        verb: method.as_str().to_ascii_lowercase(),
    }
}

/// Counts each request of the client it wraps.
#[derive(Clone, Debug)]
pub struct AuditLayer(ApiRequests);

impl<S> tower::Layer<S> for AuditLayer {
    type Service = Audit<S>;

    fn layer(&self, inner: S) -> Audit<S> {
        Audit {
            inner,
            requests: self.0.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Audit<S> {
    inner: S,
    requests: ApiRequests,
}

impl<S, B, R> tower::Service<Request<B>> for Audit<S>
where
    S: tower::Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let call = classify(
            request.method(),
            request.uri().path(),
            request.uri().query(),
        );
        let requests = self.requests.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let code = match &result {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "error".to_string(),
            };
            requests
                .0
                .get_or_create(&ApiRequestLabels { call, code })
                .inc();
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(method: Method, uri: &str) -> (String, String, String) {
        let (path, query) = match uri.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (uri, None),
        };
        let c = classify(&method, path, query);
        (c.group, c.resource, c.verb)
    }

    fn t(g: &str, r: &str, v: &str) -> (String, String, String) {
        (g.into(), r.into(), v.into())
    }

    #[test]
    fn requests_are_classified_as_the_api_server_authorizes_them() {
        assert_eq!(
            call(
                Method::GET,
                "/api/v1/pods?labelSelector=a%3Db&watch=true&resourceVersion=5"
            ),
            t("", "pods", "watch")
        );
        assert_eq!(
            call(Method::GET, "/api/v1/nodes?limit=500"),
            t("", "nodes", "list")
        );
        assert_eq!(
            call(Method::POST, "/api/v1/namespaces/default/pods"),
            t("", "pods", "create")
        );
        assert_eq!(
            call(
                Method::DELETE,
                "/api/v1/namespaces/default/pods/job-learner-0"
            ),
            t("", "pods", "delete")
        );
        assert_eq!(
            call(Method::DELETE, "/api/v1/namespaces/default/pods"),
            t("", "pods", "deletecollection")
        );
        assert_eq!(
            call(
                Method::PUT,
                "/apis/diengine.opendilab.org/v2alpha1/namespaces/ns/dijobs/j/status"
            ),
            t("diengine.opendilab.org", "dijobs/status", "update")
        );
        assert_eq!(
            call(
                Method::PATCH,
                "/apis/coordination.k8s.io/v1/namespaces/diorch-system/leases/diorch-leader?fieldManager=x&force=true"
            ),
            t("coordination.k8s.io", "leases", "patch")
        );
        assert_eq!(
            call(
                Method::GET,
                "/apis/coordination.k8s.io/v1/namespaces/diorch-system/leases/diorch-leader"
            ),
            t("coordination.k8s.io", "leases", "get")
        );
        // The namespace object itself, and requests that name no resource.
        assert_eq!(
            call(Method::GET, "/api/v1/namespaces/default"),
            t("", "namespaces", "get")
        );
        assert_eq!(call(Method::GET, "/version"), t("", "", "get"));
        assert_eq!(call(Method::GET, "/apis/apps/v1"), t("", "", "get"));
    }
}
