//! URL routing: what a path addresses (discovery, OpenAPI, version and health endpoints, or a
//! resource collection, object or subresource, with legacy `/watch/` paths).
//!
//! Parses paths only: must not handle the request.

use std::sync::Arc;

use crate::api_core::Api;
use crate::api_status::ApiError;
use crate::registry::ResourceInfo;

/// What a URL addresses.
pub(super) enum Route {
    Version,
    Health,
    ApiVersions,
    GroupList,
    Group(String),
    ResourceList(String, String),
    OpenApiRoot,
    OpenApiDoc(String),
    Resource(ResourcePath),
}

pub(super) struct ResourcePath {
    pub(super) info: Arc<ResourceInfo>,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
    pub(super) sub: Option<String>,
    pub(super) watch_path: bool,
}

pub(super) fn route(api: &Api, path: &str) -> Result<Route, ApiError> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Ok(Route::Version),
        [h, ..] if matches!(*h, "healthz" | "readyz" | "livez") => return Ok(Route::Health),
        ["api"] => return Ok(Route::ApiVersions),
        ["apis"] => return Ok(Route::GroupList),
        ["openapi", "v3"] => return Ok(Route::OpenApiRoot),
        ["openapi", "v3", rest @ ..] => return Ok(Route::OpenApiDoc(rest.join("/"))),
        ["apis", g] if api.registry.serves(g, None) => return Ok(Route::Group(g.to_string())),
        ["api", "v1"] => return Ok(Route::ResourceList(String::new(), "v1".into())),
        ["apis", g, v] if api.registry.serves(g, Some(v)) => {
            return Ok(Route::ResourceList(g.to_string(), v.to_string()));
        }
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::path_not_found()),
    };
    let (watch_path, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let find = |plural: &str| {
        api.resource(group, version, plural)
            .ok_or_else(ApiError::path_not_found)
    };
    let ns_info = |plural: &str| -> Option<Arc<ResourceInfo>> {
        api.resource(group, version, plural)
            .filter(|i| i.namespaced)
    };
    let rp = |info, ns: Option<&str>, name: Option<&str>, sub: Option<&str>| {
        Ok(Route::Resource(ResourcePath {
            info,
            namespace: ns.map(str::to_string),
            name: name.map(str::to_string),
            sub: sub.map(str::to_string),
            watch_path,
        }))
    };
    match rest {
        [plural] => rp(find(plural)?, None, None, None),
        ["namespaces", ns, plural, name] if ns_info(plural).is_some() => {
            rp(find(plural)?, Some(ns), Some(name), None)
        }
        ["namespaces", ns, plural, name, sub] if ns_info(plural).is_some() => {
            rp(find(plural)?, Some(ns), Some(name), Some(sub))
        }
        ["namespaces", ns, plural] if ns_info(plural).is_some() => {
            rp(find(plural)?, Some(ns), None, None)
        }
        [plural, name] => {
            let info = find(plural)?;
            if info.namespaced {
                return Err(ApiError::path_not_found());
            }
            rp(info, None, Some(name), None)
        }
        [plural, name, sub] => {
            let info = find(plural)?;
            if info.namespaced {
                return Err(ApiError::path_not_found());
            }
            rp(info, None, Some(name), Some(sub))
        }
        _ => Err(ApiError::path_not_found()),
    }
}
