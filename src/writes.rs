//! The name diorch writes under: every create, update and patch it sends carries the field
//! manager `diorch`, so an object's `managedFields` say which fields the operator wrote (and
//! `kubectl apply --server-side` reports conflicts with it by name). Owns the write parameters
//! and [`FieldManagerLayer`], which names the manager on the writes of code that builds its own
//! parameters (kube-runtime's Event `Recorder` sends none), and the writes whose answer no
//! caller reads ([`create_unread`]).

use std::task::{Context, Poll};

use http::{Method, Request, Uri};
use kube::api::{PatchParams, PostParams};

/// The field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "diorch";

/// Parameters of a create or replace, under [`FIELD_MANAGER`].
pub fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    }
}

/// Parameters of a (non-apply) patch, under [`FIELD_MANAGER`].
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Creates `object` in the collection at `collection` (an `Api`'s `resource_url`) under
/// [`FIELD_MANAGER`], without decoding the API server's answer (the object as stored,
/// `managedFields` and all, which no caller reads): decoding a created pod took more of the
/// operator's CPU than building and sending it. A refusal is an error as `Api::create`'s.
pub async fn create_unread(
    client: &kube::Client,
    collection: &str,
    object: &impl serde::Serialize,
) -> Result<(), kube::Error> {
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let mut request = kube::core::Request::new(collection)
        .create(&post_params(), body)
        .map_err(kube::Error::BuildRequest)?;
    // What kube's own `create` tags its request with.
    request.extensions_mut().insert("create");
    client.request_text(request).await.map(drop)
}

/// Adds `fieldManager=diorch` to every create, update or patch that names no manager, so that
/// no write of the operator's client goes out anonymous. Writes that name one are untouched.
#[derive(Clone, Copy, Debug, Default)]
pub struct FieldManagerLayer;

impl<S> tower::Layer<S> for FieldManagerLayer {
    type Service = FieldManager<S>;

    fn layer(&self, inner: S) -> FieldManager<S> {
        FieldManager { inner }
    }
}

#[derive(Clone, Debug)]
pub struct FieldManager<S> {
    inner: S,
}

impl<S, B> tower::Service<Request<B>> for FieldManager<S>
where
    S: tower::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        if let Some(uri) = with_field_manager(request.method(), request.uri()) {
            *request.uri_mut() = uri;
        }
        self.inner.call(request)
    }
}

/// `uri` with `fieldManager=diorch` added, for a write that names no manager; `None` otherwise.
fn with_field_manager(method: &Method, uri: &Uri) -> Option<Uri> {
    if !matches!(*method, Method::POST | Method::PUT | Method::PATCH) {
        return None;
    }
    let query = uri.query().unwrap_or_default();
    if query.split('&').any(|kv| kv.starts_with("fieldManager=")) {
        return None;
    }
    let path_and_query = if query.is_empty() {
        format!("{}?fieldManager={FIELD_MANAGER}", uri.path())
    } else {
        format!("{}?{query}&fieldManager={FIELD_MANAGER}", uri.path())
    };
    let mut parts = uri.clone().into_parts();
    // A path and query kube built, plus an ASCII parameter, is a valid one; if it ever were
    // not, the request goes out as it came.
    parts.path_and_query = Some(path_and_query.parse().ok()?);
    Uri::from_parts(parts).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube sends these as the `fieldManager` query parameter of the write.
    #[test]
    fn every_write_parameter_names_the_manager() {
        assert_eq!(post_params().field_manager.as_deref(), Some("diorch"));
        assert_eq!(patch_params().field_manager.as_deref(), Some("diorch"));
        assert!(!post_params().dry_run && !patch_params().dry_run);
        assert!(!patch_params().force);
    }

    #[test]
    fn anonymous_writes_get_the_manager_and_the_rest_are_left_alone() {
        let uri = |s: &str| s.parse::<Uri>().expect("uri");
        let add = |m: Method, s: &str| with_field_manager(&m, &uri(s)).map(|u| u.to_string());
        assert_eq!(
            add(Method::POST, "/apis/events.k8s.io/v1/namespaces/ns/events?").as_deref(),
            Some("/apis/events.k8s.io/v1/namespaces/ns/events?fieldManager=diorch")
        );
        assert_eq!(
            add(
                Method::PATCH,
                "https://h:6443/api/v1/namespaces/ns/pods/p?dryRun=All"
            )
            .as_deref(),
            Some("https://h:6443/api/v1/namespaces/ns/pods/p?dryRun=All&fieldManager=diorch")
        );
        assert_eq!(
            add(
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"
            )
            .as_deref(),
            Some("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l?fieldManager=diorch")
        );
        // A write that names its manager keeps it; reads and deletes are not writes with one.
        assert_eq!(
            add(Method::POST, "/api/v1/namespaces/ns/pods?&fieldManager=x"),
            None
        );
        assert_eq!(add(Method::GET, "/api/v1/pods"), None);
        assert_eq!(add(Method::DELETE, "/api/v1/namespaces/ns/pods/p"), None);
    }

    #[tokio::test]
    async fn the_layer_rewrites_the_request_the_client_sends() {
        use tower::{Layer as _, ServiceExt as _};
        let seen = tower::service_fn(|request: Request<()>| async move {
            Ok::<_, std::convert::Infallible>(request.uri().to_string())
        });
        let request = Request::post("/api/v1/namespaces/ns/events")
            .body(())
            .expect("request");
        let sent = FieldManagerLayer.layer(seen).oneshot(request).await;
        assert_eq!(
            sent.ok().as_deref(),
            Some("/api/v1/namespaces/ns/events?fieldManager=diorch")
        );
    }
}
