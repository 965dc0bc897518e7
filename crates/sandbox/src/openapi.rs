//! The OpenAPI v3 documents `kubectl` fetches: the `/openapi/v3` index and one document per
//! group-version (`/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`).
//!
//! Owns pure builders only; the HTTP layer serves them. What kubectl 1.32 reads from them:
//! - server-side field validation support: a PATCH operation carrying the resource's
//!   `x-kubernetes-group-version-kind` and a `fieldValidation` query parameter
//!   (cli-runtime `queryParamVerifierV3`). Without it kubectl validates client-side against
//!   `/openapi/v2`, which this server does not serve (kubectl asks for protobuf only).
//! - `kubectl apply` patch type: a PATCH request body accepting
//!   `application/strategic-merge-patch+json` makes kubectl compute the patch from these
//!   schemas, which would need every `x-kubernetes-patch-strategy`/`-merge-key` of the Go
//!   types. Those are not available here (k8s-openapi drops them), so built-in PATCH bodies
//!   list only the JSON/merge/apply types: kubectl then falls back to its compiled-in Go
//!   types and sends exactly the strategic merge patch it would send to a real cluster.
//!   Custom resources list no strategic type, as on a real server (JSON merge patch).
//! - `kubectl explain`: component schemas tagged with `x-kubernetes-group-version-kind`
//!   (built-ins from k8s-openapi, custom resources from the CRD's `openAPIV3Schema`).
//!
//! `/openapi/v2` is not built: a 404 there makes kubectl fall back silently.
//! It must not touch storage or HTTP.

use k8s_openapi::api::admissionregistration::v1 as admissionregistration;
use k8s_openapi::api::coordination::v1 as coordination;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::api::scheduling::v1 as scheduling;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use super::registry::ResourceInfo;

const SCHEMAS: &str = "#/components/schemas/";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const WATCH_EVENT: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent";

const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// The `/openapi/v3` index: every served group-version with a `hash` that changes whenever
/// its document does (kubectl caches documents by URL).
pub fn v3_root(resources: &[ResourceInfo]) -> Value {
    let mut paths = Map::new();
    for (group, version) in group_versions(resources) {
        let Some(doc) = v3_group_version(&group, &version, resources) else {
            continue;
        };
        let key = gv_path(&group, &version);
        paths.insert(
            key.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", v3_etag(&doc))}),
        );
    }
    json!({ "paths": paths })
}

/// The document of one group-version, or `None` for a group-version nothing serves (404).
pub fn v3_group_version(group: &str, version: &str, resources: &[ResourceInfo]) -> Option<Value> {
    let served: Vec<&ResourceInfo> = resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if served.is_empty() {
        return None;
    }
    let mut generator = SchemaSettings::openapi3().into_generator();
    for name in [OBJECT_META, LIST_META, STATUS, DELETE_OPTIONS, PATCH] {
        add_meta_schema(&mut generator, name);
    }
    let mut kinds: Vec<(&ResourceInfo, Option<Value>)> = Vec::new();
    for info in &served {
        let custom = info.custom.as_ref().map(|c| c.schema.clone());
        if custom.is_none() && !add_builtin_schema(&mut generator, info) {
            tracing::debug!(kind = %info.kind, group, version, "no OpenAPI schema for built-in kind");
        }
        kinds.push((info, custom));
    }
    let mut schemas = generator.take_definitions(true);
    // WatchEvent's generic parameter gives it no useful generated schema; the real document
    // carries this fixed shape.
    schemas.insert(WATCH_EVENT.into(), watch_event_schema());
    for (info, custom) in &kinds {
        let name = schema_name(info);
        if let Some(crd_schema) = custom {
            schemas.insert(name.clone(), custom_resource_schema(crd_schema));
        }
        if let Some(Value::Object(schema)) = schemas.get_mut(&name) {
            schema.insert("x-kubernetes-group-version-kind".into(), json!([gvk(info)]));
        }
        if schemas.contains_key(&name) {
            schemas.insert(list_schema_name(info), list_schema(info, &name));
        }
    }

    let mut paths = Map::new();
    for info in &served {
        if schemas.contains_key(&schema_name(info)) {
            add_paths(&mut paths, info);
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// The `hash` of a document in the index and the value the server compares a request's
/// `?hash=` against: uppercase hex of a 128-bit FNV-1a over the document's JSON (the real
/// server uses SHA-512; clients treat it as opaque).
pub fn v3_etag(doc: &Value) -> String {
    let bytes = serde_json::to_vec(doc).unwrap_or_default();
    let mut hash: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for byte in bytes {
        hash ^= u128::from(byte);
        hash = hash.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013B);
    }
    format!("{hash:032X}")
}

/// `api/v1` for the core group, `apis/<group>/<version>` otherwise (the index keys).
pub fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn group_versions(resources: &[ResourceInfo]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = resources
        .iter()
        .map(|r| (r.group.clone(), r.version.clone()))
        .collect();
    out.sort();
    out.dedup();
    out
}

fn gvk(info: &ResourceInfo) -> Value {
    json!({"group": info.group, "kind": info.kind, "version": info.version})
}

/// Component name of a kind: the Go package path for built-ins
/// (`io.k8s.api.core.v1.Pod`), the reversed group for custom resources
/// (`org.opendilab.diengine.v2alpha1.DIJob`), as the apiserver names them.
fn schema_name(info: &ResourceInfo) -> String {
    if info.custom.is_some() {
        let reversed: Vec<&str> = info.group.split('.').rev().collect();
        return format!("{}.{}.{}", reversed.join("."), info.version, info.kind);
    }
    let package = match info.group.as_str() {
        "" => "io.k8s.api.core".to_string(),
        "apiextensions.k8s.io" => "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions".into(),
        g => format!("io.k8s.api.{}", g.trim_end_matches(".k8s.io")),
    };
    format!("{package}.{}.{}", info.version, info.kind)
}

fn list_schema_name(info: &ResourceInfo) -> String {
    let name = schema_name(info);
    format!("{name}List")
}

fn add_meta_schema(generator: &mut SchemaGenerator, name: &str) {
    match name {
        OBJECT_META => add::<meta::ObjectMeta>(generator),
        LIST_META => add::<meta::ListMeta>(generator),
        STATUS => add::<meta::Status>(generator),
        DELETE_OPTIONS => add::<meta::DeleteOptions>(generator),
        PATCH => add::<meta::Patch>(generator),
        _ => {}
    }
}

fn add<T: JsonSchema>(generator: &mut SchemaGenerator) {
    generator.subschema_for::<T>();
}

/// Adds the kind's schema (and everything it references); false for a kind without one.
fn add_builtin_schema(generator: &mut SchemaGenerator, info: &ResourceInfo) -> bool {
    match (
        info.group.as_str(),
        info.version.as_str(),
        info.kind.as_str(),
    ) {
        ("", "v1", "Namespace") => add::<core::Namespace>(generator),
        ("", "v1", "Node") => add::<core::Node>(generator),
        ("", "v1", "Pod") => add::<core::Pod>(generator),
        ("", "v1", "Service") => add::<core::Service>(generator),
        ("", "v1", "Endpoints") => add::<core::Endpoints>(generator),
        ("", "v1", "ConfigMap") => add::<core::ConfigMap>(generator),
        ("", "v1", "Secret") => add::<core::Secret>(generator),
        ("", "v1", "ServiceAccount") => add::<core::ServiceAccount>(generator),
        ("", "v1", "Event") => add::<core::Event>(generator),
        ("", "v1", "Binding") => add::<core::Binding>(generator),
        ("events.k8s.io", "v1", "Event") => add::<events::Event>(generator),
        ("coordination.k8s.io", "v1", "Lease") => add::<coordination::Lease>(generator),
        ("scheduling.k8s.io", "v1", "PriorityClass") => add::<scheduling::PriorityClass>(generator),
        ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration") => {
            add::<admissionregistration::MutatingWebhookConfiguration>(generator)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration") => {
            add::<admissionregistration::ValidatingWebhookConfiguration>(generator)
        }
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => {
            add::<apiextensions::CustomResourceDefinition>(generator)
        }
        _ => return false,
    }
    true
}

fn watch_event_schema() -> Value {
    json!({
        "description": "Event represents a single event to a watched resource.",
        "type": "object",
        "properties": {
            "object": {
                "description": "Object is:\n * If Type is Added or Modified: the new state of the object.\n * If Type is Deleted: the state of the object immediately before deletion.\n * If Type is Error: *Status is recommended; other types may make sense\n   depending on context.",
                "type": "object",
            },
            "type": {"type": "string", "default": ""},
        },
        "required": ["type", "object"],
    })
}

fn ref_to(name: &str) -> Value {
    json!({"$ref": format!("{SCHEMAS}{name}")})
}

/// A CRD's `openAPIV3Schema` as the apiserver publishes it: standard `apiVersion`, `kind`
/// and `metadata` (a reference to ObjectMeta) replacing whatever the CRD declared there.
fn custom_resource_schema(crd_schema: &Value) -> Value {
    let mut schema = crd_schema.as_object().cloned().unwrap_or_default();
    schema
        .entry("type")
        .or_insert_with(|| Value::String("object".into()));
    let properties = schema
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(props) = properties {
        props.insert(
            "apiVersion".into(),
            json!({"description": API_VERSION_DESCRIPTION, "type": "string"}),
        );
        props.insert(
            "kind".into(),
            json!({"description": KIND_DESCRIPTION, "type": "string"}),
        );
        props.insert(
            "metadata".into(),
            json!({
                "allOf": [ref_to(OBJECT_META)],
                "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
            }),
        );
    }
    Value::Object(schema)
}

fn list_schema(info: &ResourceInfo, item: &str) -> Value {
    json!({
        "description": format!("{} is a list of {}", info.list_kind, info.kind),
        "type": "object",
        "properties": {
            "apiVersion": {"description": API_VERSION_DESCRIPTION, "type": "string"},
            "items": {
                "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", info.plural),
                "type": "array",
                "items": {"allOf": [ref_to(item)], "default": {}},
            },
            "kind": {"description": KIND_DESCRIPTION, "type": "string"},
            "metadata": {
                "allOf": [ref_to(LIST_META)],
                "default": {},
                "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
            },
        },
        "required": ["items"],
        "x-kubernetes-group-version-kind": [{"group": info.group, "kind": info.list_kind, "version": info.version}],
    })
}

/// `Core`, `CoordinationV1`-style identifiers used in operation ids and tags.
fn group_identifier(group: &str) -> String {
    if group.is_empty() {
        return "core".into();
    }
    let trimmed = group.strip_suffix(".k8s.io").unwrap_or(group);
    let mut out = String::new();
    for (i, part) in trimmed.split(['.', '-']).enumerate() {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            if i == 0 {
                out.push(first.to_ascii_lowercase());
            } else {
                out.push(first.to_ascii_uppercase());
            }
            out.push_str(chars.as_str());
        }
    }
    out
}

struct Params;

impl Params {
    fn query(name: &str, description: &str, type_: &str) -> Value {
        json!({
            "name": name,
            "in": "query",
            "description": description,
            "schema": {"type": type_, "uniqueItems": true},
        })
    }

    fn dry_run() -> Value {
        Self::query(
            "dryRun",
            "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
            "string",
        )
    }

    fn field_manager(patch: bool) -> Value {
        let mut description = "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.".to_string();
        if patch {
            description.push_str(" This field is required for apply requests (application/apply-patch) but optional for non-apply patch types (JsonPatch, MergePatch, StrategicMergePatch).");
        }
        Self::query("fieldManager", &description, "string")
    }

    fn field_validation() -> Value {
        Self::query(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
            "string",
        )
    }

    fn write(patch: bool) -> Vec<Value> {
        let mut params = vec![
            Self::dry_run(),
            Self::field_manager(patch),
            Self::field_validation(),
        ];
        if patch {
            params.push(Self::query(
                "force",
                "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.",
                "boolean",
            ));
        }
        params
    }

    fn delete() -> Vec<Value> {
        vec![
            Self::dry_run(),
            Self::query(
                "gracePeriodSeconds",
                "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used. Defaults to a per object value if not specified. zero means delete immediately.",
                "integer",
            ),
            Self::query(
                "ignoreStoreReadErrorWithClusterBreakingPotential",
                "if set to true, it will trigger an unsafe deletion of the resource in case the normal deletion flow fails with a corrupt object error. A resource is considered corrupt if it can not be retrieved from the underlying storage successfully because of a) its data can not be transformed e.g. decryption failure, or b) it fails to decode into an object. NOTE: unsafe deletion ignores finalizer constraints, skips precondition checks, and removes the object from the storage. WARNING: This may potentially break the cluster if the workload associated with the resource being unsafe-deleted relies on normal deletion flow. Use only if you REALLY know what you are doing. The default value is false, and the user must opt in to enable it",
                "boolean",
            ),
            Self::query(
                "propagationPolicy",
                "Whether and how garbage collection will be performed. Either this field or OrphanDependents may be set, but not both. The default policy is decided by the existing finalizer set in the metadata.finalizers and the resource-specific default policy. Acceptable values are: 'Orphan' - orphan the dependents; 'Background' - allow the garbage collector to delete the dependents in the background; 'Foreground' - a cascading policy that deletes all dependents in the foreground.",
                "string",
            ),
        ]
    }

    fn list() -> Vec<Value> {
        vec![
            Self::query(
                "allowWatchBookmarks",
                "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion. Clients should not assume bookmarks are returned at any specific interval, nor may they assume the server will send any BOOKMARK event during a session. If this is not a watch, this field is ignored.",
                "boolean",
            ),
            Self::query(
                "continue",
                "The continue option should be set when retrieving more results from the server. Since this value is server defined, clients may only use the continue value from a previous query result with identical query parameters (except for the value of continue) and the server may reject a continue value it does not recognize.",
                "string",
            ),
            Self::query(
                "fieldSelector",
                "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
                "string",
            ),
            Self::query(
                "labelSelector",
                "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
                "string",
            ),
            Self::query(
                "limit",
                "limit is a maximum number of responses to return for a list call. If more items exist, the server will set the `continue` field on the list metadata to a value that can be used with the same initial query to retrieve the next set of results.",
                "integer",
            ),
            Self::query(
                "resourceVersion",
                "resourceVersion sets a constraint on what resource versions a request may be served from. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
                "string",
            ),
            Self::query(
                "resourceVersionMatch",
                "resourceVersionMatch determines how resourceVersion is applied to list calls. It is highly recommended that resourceVersionMatch be set for list calls where resourceVersion is set See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
                "string",
            ),
            Self::query(
                "sendInitialEvents",
                "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection.",
                "boolean",
            ),
            Self::query(
                "timeoutSeconds",
                "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
                "integer",
            ),
            Self::query(
                "watch",
                "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion.",
                "boolean",
            ),
        ]
    }

    fn path_params(info: &ResourceInfo, item: bool) -> Vec<Value> {
        let mut params = Vec::new();
        if item {
            params.push(json!({
                "name": "name",
                "in": "path",
                "description": format!("name of the {}", info.kind),
                "required": true,
                "schema": {"type": "string", "uniqueItems": true},
            }));
        }
        if info.namespaced {
            params.push(json!({
                "name": "namespace",
                "in": "path",
                "description": "object name and auth scope, such as for teams and projects",
                "required": true,
                "schema": {"type": "string", "uniqueItems": true},
            }));
        }
        params.push(Self::query(
            "pretty",
            "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).",
            "string",
        ));
        params
    }
}

fn content(schema_ref: &str, types: &[&str]) -> Value {
    let mut map = Map::new();
    for t in types {
        map.insert((*t).to_string(), json!({"schema": ref_to(schema_ref)}));
    }
    Value::Object(map)
}

const RESPONSE_TYPES: &[&str] = &["application/json", "application/yaml"];

fn responses(schema_ref: &str, codes: &[(&str, &str)]) -> Value {
    let mut map = Map::new();
    for (code, description) in codes {
        map.insert(
            (*code).to_string(),
            json!({"description": description, "content": content(schema_ref, RESPONSE_TYPES)}),
        );
    }
    map.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(map)
}

struct OperationIds {
    tag: String,
    suffix: String,
}

impl OperationIds {
    fn new(info: &ResourceInfo) -> Self {
        let group = group_identifier(&info.group);
        let mut version = info.version.clone();
        if let Some(first) = version.get(..1) {
            version = format!("{}{}", first.to_uppercase(), &version[1..]);
        }
        let mut group_upper = group.clone();
        if let Some(first) = group.get(..1) {
            group_upper = format!("{}{}", first.to_uppercase(), &group[1..]);
        }
        OperationIds {
            tag: format!("{group}_{}", info.version),
            suffix: format!("{group_upper}{version}"),
        }
    }

    fn id(&self, verb: &str, namespaced: bool, object: &str) -> String {
        let ns = if namespaced { "Namespaced" } else { "" };
        format!("{verb}{}{ns}{object}", self.suffix)
    }
}

struct Op<'a> {
    action: &'a str,
    description: String,
    id: String,
    params: Vec<Value>,
    body: Option<Value>,
    responses: Value,
}

fn operation(info: &ResourceInfo, ids: &OperationIds, op: Op<'_>) -> Value {
    let mut out = Map::new();
    out.insert("tags".into(), json!([ids.tag]));
    out.insert("description".into(), op.description.into());
    out.insert("operationId".into(), op.id.into());
    if !op.params.is_empty() {
        out.insert("parameters".into(), Value::Array(op.params));
    }
    if let Some(body) = op.body {
        out.insert("requestBody".into(), body);
    }
    out.insert("responses".into(), op.responses);
    out.insert("x-kubernetes-action".into(), op.action.into());
    out.insert("x-kubernetes-group-version-kind".into(), gvk(info));
    Value::Object(out)
}

fn add_paths(paths: &mut Map<String, Value>, info: &ResourceInfo) {
    let ids = OperationIds::new(info);
    let kind_ref = schema_name(info);
    let list_ref = list_schema_name(info);
    let base = info.base_path();
    let scoped = if info.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", info.plural)
    } else {
        format!("{base}/{}", info.plural)
    };
    let kind = info.kind.as_str();
    let ns = info.namespaced;
    let article = if kind.starts_with(['A', 'E', 'I', 'O', 'U']) {
        "an"
    } else {
        "a"
    };
    let body = |schema: &str| json!({"content": content(schema, &["*/*"]), "required": true});
    let patch_body = || {
        // See the module docs: strategic merge patch is deliberately not advertised.
        let types = [
            "application/apply-patch+yaml",
            "application/json-patch+json",
            "application/merge-patch+json",
        ];
        json!({"content": content(PATCH, &types), "required": true})
    };
    // An object's read, replace and partial update: the same three for the object and for its
    // status subresource, which differ only in the words of `target` and the id's kind.
    let object_ops = |map: &mut Map<String, Value>, target: &str, id_kind: &str| {
        let written = [("200", "OK"), ("201", "Created")];
        map.insert(
            "get".into(),
            operation(
                info,
                &ids,
                Op {
                    action: "get",
                    description: format!("read {target}"),
                    id: ids.id("read", ns, id_kind),
                    params: Vec::new(),
                    body: None,
                    responses: responses(&kind_ref, &[("200", "OK")]),
                },
            ),
        );
        map.insert(
            "put".into(),
            operation(
                info,
                &ids,
                Op {
                    action: "put",
                    description: format!("replace {target}"),
                    id: ids.id("replace", ns, id_kind),
                    params: Params::write(false),
                    body: Some(body(&kind_ref)),
                    responses: responses(&kind_ref, &written),
                },
            ),
        );
        map.insert(
            "patch".into(),
            operation(
                info,
                &ids,
                Op {
                    action: "patch",
                    description: format!("partially update {target}"),
                    id: ids.id("patch", ns, id_kind),
                    params: Params::write(true),
                    body: Some(patch_body()),
                    responses: responses(&kind_ref, &written),
                },
            ),
        );
    };

    let mut collection = Map::new();
    collection.insert(
        "get".into(),
        operation(
            info,
            &ids,
            Op {
                action: "list",
                description: format!("list or watch objects of kind {kind}"),
                id: ids.id("list", ns, kind),
                params: Params::list(),
                body: None,
                responses: responses(&list_ref, &[("200", "OK")]),
            },
        ),
    );
    collection.insert(
        "post".into(),
        operation(
            info,
            &ids,
            Op {
                action: "post",
                description: format!("create {article} {kind}"),
                id: ids.id("create", ns, kind),
                params: Params::write(false),
                body: Some(body(&kind_ref)),
                responses: responses(
                    &kind_ref,
                    &[("200", "OK"), ("201", "Created"), ("202", "Accepted")],
                ),
            },
        ),
    );
    collection.insert(
        "delete".into(),
        operation(
            info,
            &ids,
            Op {
                action: "deletecollection",
                description: format!("delete collection of {kind}"),
                id: ids.id("deletecollection", ns, kind),
                params: [Params::delete(), Params::list()].concat(),
                body: Some(json!({"content": content(DELETE_OPTIONS, &["*/*"])})),
                responses: responses(STATUS, &[("200", "OK")]),
            },
        ),
    );
    collection.insert(
        "parameters".into(),
        Value::Array(Params::path_params(info, false)),
    );
    paths.insert(scoped.clone(), Value::Object(collection));

    let mut item = Map::new();
    object_ops(&mut item, &format!("the specified {kind}"), kind);
    item.insert(
        "delete".into(),
        operation(
            info,
            &ids,
            Op {
                action: "delete",
                description: format!("delete {article} {kind}"),
                id: ids.id("delete", ns, kind),
                params: Params::delete(),
                body: Some(json!({"content": content(DELETE_OPTIONS, &["*/*"])})),
                responses: responses(&kind_ref, &[("200", "OK"), ("202", "Accepted")]),
            },
        ),
    );
    item.insert(
        "parameters".into(),
        Value::Array(Params::path_params(info, true)),
    );
    paths.insert(format!("{scoped}/{{name}}"), Value::Object(item));

    if info.subresources.iter().any(|s| s == "status") {
        let mut status = Map::new();
        object_ops(
            &mut status,
            &format!("status of the specified {kind}"),
            &format!("{kind}Status"),
        );
        status.insert(
            "parameters".into(),
            Value::Array(Params::path_params(info, true)),
        );
        paths.insert(format!("{scoped}/{{name}}/status"), Value::Object(status));
    }

    if info.namespaced {
        let mut all = Map::new();
        all.insert(
            "get".into(),
            operation(
                info,
                &ids,
                Op {
                    action: "list",
                    description: format!("list or watch objects of kind {kind}"),
                    id: format!("list{}{kind}ForAllNamespaces", ids.suffix),
                    params: Params::list(),
                    body: None,
                    responses: responses(&list_ref, &[("200", "OK")]),
                },
            ),
        );
        all.insert("parameters".into(), Value::Array(vec![Params::query(
            "pretty",
            "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).",
            "string",
        )]));
        paths.insert(format!("{base}/{}", info.plural), Value::Object(all));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{CustomResourceInfo, PrinterColumn, builtin_resources};
    use std::sync::Arc;

    fn dijob() -> ResourceInfo {
        ResourceInfo {
            group: "diengine.opendilab.org".into(),
            version: "v2alpha1".into(),
            kind: "DIJob".into(),
            list_kind: "DIJobList".into(),
            plural: "dijobs".into(),
            singular: "dijob".into(),
            short_names: vec!["dj".into()],
            namespaced: true,
            subresources: vec!["status".into()],
            categories: vec![],
            printer_columns: Vec::<PrinterColumn>::new(),
            custom: Some(Arc::new(CustomResourceInfo {
                schema: json!({
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "description": "DIJobSpec", "properties": {"priority": {"type": "string"}}},
                        "metadata": {"type": "object"},
                    }
                }),
                crd_name: "dijobs.diengine.opendilab.org".into(),
            })),
        }
    }

    fn all() -> Vec<ResourceInfo> {
        let mut r = builtin_resources();
        r.push(dijob());
        r
    }

    /// cli-runtime's `supportsQueryParamV3`: some PATCH operation for the GVK lists
    /// `fieldValidation` as a query parameter.
    fn supports_field_validation(doc: &Value, group: &str, version: &str, kind: &str) -> bool {
        doc["paths"].as_object().unwrap().values().any(|path| {
            let patch = &path["patch"];
            patch["x-kubernetes-group-version-kind"]
                == json!({"group": group, "version": version, "kind": kind})
                && patch["parameters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
        })
    }

    #[test]
    fn root_lists_every_group_version_with_its_hash() {
        let resources = all();
        let root = v3_root(&resources);
        let paths = root["paths"].as_object().unwrap();
        for key in [
            "api/v1",
            "apis/events.k8s.io/v1",
            "apis/coordination.k8s.io/v1",
            "apis/apiextensions.k8s.io/v1",
            "apis/diengine.opendilab.org/v2alpha1",
        ] {
            let url = paths[key]["serverRelativeURL"].as_str().unwrap();
            let (g, v) = match key.split('/').collect::<Vec<_>>()[..] {
                ["api", v] => ("", v),
                ["apis", g, v] => (g, v),
                _ => unreachable!(),
            };
            let doc = v3_group_version(g, v, &resources).unwrap();
            assert_eq!(url, format!("/openapi/v3/{key}?hash={}", v3_etag(&doc)));
        }
        assert!(v3_group_version("apps", "v1", &resources).is_none());
    }

    #[test]
    fn hash_changes_with_the_document() {
        let mut resources = all();
        let before = v3_root(&resources)["paths"]["apis/diengine.opendilab.org/v2alpha1"].clone();
        let core_before = v3_root(&resources)["paths"]["api/v1"].clone();
        let mut job = dijob();
        job.custom = Some(Arc::new(CustomResourceInfo {
            schema: json!({"type": "object", "properties": {"spec": {"type": "object"}}}),
            crd_name: "dijobs.diengine.opendilab.org".into(),
        }));
        resources.pop();
        resources.push(job);
        let root = v3_root(&resources);
        assert_ne!(
            root["paths"]["apis/diengine.opendilab.org/v2alpha1"],
            before
        );
        assert_eq!(root["paths"]["api/v1"], core_before);
        assert_eq!(v3_etag(&json!({"a": 1})).len(), 32);
    }

    #[test]
    fn builtins_support_server_side_field_validation() {
        let resources = all();
        let core = v3_group_version("", "v1", &resources).unwrap();
        for kind in ["Pod", "ConfigMap", "Service", "Namespace", "Secret", "Node"] {
            assert!(supports_field_validation(&core, "", "v1", kind), "{kind}");
        }
        let leases = v3_group_version("coordination.k8s.io", "v1", &resources).unwrap();
        assert!(supports_field_validation(
            &leases,
            "coordination.k8s.io",
            "v1",
            "Lease"
        ));
        assert!(
            core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/status"]["patch"].is_object()
        );
        assert!(core["paths"]["/api/v1/namespaces/{name}"]["patch"].is_object());
        assert!(core["paths"]["/api/v1/pods"]["get"].is_object());
    }

    #[test]
    fn patch_bodies_do_not_offer_strategic_merge() {
        // kubectl's gvkSupportsPatchOpenAPIV3 must answer false so it falls back to its
        // compiled-in Go types for built-ins and to JSON merge patch for custom resources.
        let resources = all();
        for (g, v) in [("", "v1"), ("diengine.opendilab.org", "v2alpha1")] {
            let doc = v3_group_version(g, v, &resources).unwrap();
            for path in doc["paths"].as_object().unwrap().values() {
                if let Some(content) = path["patch"]["requestBody"]["content"].as_object() {
                    assert!(content.contains_key("application/merge-patch+json"));
                    assert!(!content.contains_key("application/strategic-merge-patch+json"));
                }
            }
        }
    }

    #[test]
    fn components_carry_kinds_for_explain() {
        let resources = all();
        let core = v3_group_version("", "v1", &resources).unwrap();
        let schemas = core["components"]["schemas"].as_object().unwrap();
        let pod = &schemas["io.k8s.api.core.v1.Pod"];
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{"group": "", "kind": "Pod", "version": "v1"}])
        );
        assert!(pod["properties"]["spec"].is_object());
        assert!(schemas.contains_key("io.k8s.api.core.v1.PodSpec"));
        assert!(schemas.contains_key(OBJECT_META));
        assert_eq!(
            schemas["io.k8s.api.core.v1.PodList"]["x-kubernetes-group-version-kind"][0]["kind"],
            "PodList"
        );
        // Every reference resolves inside the document.
        let text = serde_json::to_string(&core).unwrap();
        for piece in text.split("\"$ref\":\"").skip(1) {
            let target = piece.split('"').next().unwrap();
            let name = target.strip_prefix(SCHEMAS).expect(target);
            assert!(schemas.contains_key(name), "dangling {target}");
        }
    }

    #[test]
    fn custom_resource_document() {
        let resources = all();
        let doc = v3_group_version("diengine.opendilab.org", "v2alpha1", &resources).unwrap();
        assert!(supports_field_validation(
            &doc,
            "diengine.opendilab.org",
            "v2alpha1",
            "DIJob"
        ));
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let job = &schemas["org.opendilab.diengine.v2alpha1.DIJob"];
        assert_eq!(
            job["x-kubernetes-group-version-kind"],
            json!([{"group": "diengine.opendilab.org", "kind": "DIJob", "version": "v2alpha1"}])
        );
        assert_eq!(
            job["properties"]["spec"]["properties"]["priority"]["type"],
            "string"
        );
        assert_eq!(
            job["properties"]["metadata"]["allOf"][0]["$ref"],
            format!("{SCHEMAS}{OBJECT_META}")
        );
        assert!(schemas.contains_key("org.opendilab.diengine.v2alpha1.DIJobList"));
        let item = &doc["paths"]["/apis/diengine.opendilab.org/v2alpha1/namespaces/{namespace}/dijobs/{name}"];
        assert_eq!(
            item["patch"]["operationId"],
            "patchDiengineOpendilabOrgV2alpha1NamespacedDIJob"
        );
        assert_eq!(
            item["patch"]["tags"],
            json!(["diengineOpendilabOrg_v2alpha1"])
        );
        assert!(doc["paths"]["/apis/diengine.opendilab.org/v2alpha1/dijobs"]["get"].is_object());
    }

    #[test]
    fn core_operation_ids_match_the_apiserver() {
        let resources = all();
        let core = v3_group_version("", "v1", &resources).unwrap();
        assert_eq!(
            core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]["operationId"],
            "patchCoreV1NamespacedPod"
        );
        assert_eq!(
            core["paths"]["/api/v1/namespaces/{name}"]["patch"]["operationId"],
            "patchCoreV1Namespace"
        );
        assert_eq!(
            core["paths"]["/api/v1/pods"]["get"]["operationId"],
            "listCoreV1PodForAllNamespaces"
        );
        let leases = v3_group_version("coordination.k8s.io", "v1", &resources).unwrap();
        assert_eq!(
            leases["paths"]["/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"]["put"]
                ["operationId"],
            "replaceCoordinationV1NamespacedLease"
        );
    }
}
