//! Tests of the HTTP layer's pure parts: routing, version priority and query decoding.

use crate::api_core::Api;

use super::discovery::version_rank;
use super::request::parse_query;
use super::routing::{Route, route};

#[test]
fn routes() {
    let api = Api::new(10);
    let ok = |p: &str| match route(&api, p) {
        Ok(Route::Resource(rp)) => (
            rp.info.plural.clone(),
            rp.namespace.clone(),
            rp.name.clone(),
            rp.sub.clone(),
            rp.watch_path,
        ),
        _ => panic!("no route for {p}"),
    };
    assert_eq!(ok("/api/v1/namespaces/d/pods").0, "pods");
    assert_eq!(ok("/api/v1/namespaces/d").2.as_deref(), Some("d"));
    assert_eq!(
        ok("/api/v1/namespaces/d/pods/p/status").3.as_deref(),
        Some("status")
    );
    assert_eq!(ok("/api/v1/namespaces/d/status").0, "namespaces");
    assert!(ok("/api/v1/watch/namespaces/d/pods").4);
    assert_eq!(
        ok("/apis/coordination.k8s.io/v1/namespaces/x/leases/l")
            .2
            .as_deref(),
        Some("l")
    );
    assert!(matches!(route(&api, "/apis/nope.io/v1/things"), Err(e) if e.code == 404));
    assert!(matches!(route(&api, "/api/v1/pods/p"), Err(e) if e.code == 404));
}

#[test]
fn version_priority() {
    let mut v = vec!["v1alpha1", "v2", "v1beta2", "v1", "v1beta1", "foo"];
    v.sort_by_key(|s| std::cmp::Reverse(version_rank(s)));
    assert_eq!(v, ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]);
}

#[test]
fn query_decoding() {
    let q = parse_query(Some("labelSelector=app%3Dweb%2Ctier+in+(a)&watch=1"));
    assert_eq!(q["labelSelector"], "app=web,tier in (a)");
    assert_eq!(q["watch"], "1");
}
