//! Strategic merge patch metadata: the `patchStrategy`/`patchMergeKey` struct tags of the served
//! built-in kinds (k8s.io/api v0.33). Only the paths that lead to a tagged field are listed: any
//! other field has no strategy, so its maps merge key by key and its lists are replaced, which
//! is what the Go lookup yields for an untagged field.
//!
//! Static tables and their lookup only: must not merge anything.

use super::strategic_directives::RETAIN_KEYS_STRATEGY;
use super::types::PatchError;

#[derive(Clone, Copy)]
pub(super) enum Schema {
    Struct(&'static [FieldMeta]),
    /// A struct (or map) field that needs no metadata below it.
    Opaque,
    /// A primitive element type (the elements of `finalizers`, `podCIDRs`).
    Primitive,
}

pub(super) struct FieldMeta {
    name: &'static str,
    strategy: &'static str,
    merge_key: &'static str,
    schema: Schema,
}

const fn field(
    name: &'static str,
    strategy: &'static str,
    merge_key: &'static str,
    schema: Schema,
) -> FieldMeta {
    FieldMeta {
        name,
        strategy,
        merge_key,
        schema,
    }
}

const fn merge_by(name: &'static str, merge_key: &'static str) -> FieldMeta {
    field(name, "merge", merge_key, Schema::Opaque)
}

const fn child(name: &'static str, fields: &'static [FieldMeta]) -> FieldMeta {
    field(name, "", "", Schema::Struct(fields))
}

const OBJECT_META: &[FieldMeta] = &[
    field("finalizers", "merge", "", Schema::Primitive),
    merge_by("ownerReferences", "uid"),
];
const CONTAINER: &[FieldMeta] = &[
    merge_by("env", "name"),
    merge_by("ports", "containerPort"),
    merge_by("volumeDevices", "devicePath"),
    merge_by("volumeMounts", "mountPath"),
];
const PVC_TEMPLATE: &[FieldMeta] = &[child("metadata", OBJECT_META)];
const EPHEMERAL_VOLUME: &[FieldMeta] = &[child("volumeClaimTemplate", PVC_TEMPLATE)];
const VOLUME: &[FieldMeta] = &[child("ephemeral", EPHEMERAL_VOLUME)];
const POD_SPEC: &[FieldMeta] = &[
    field("containers", "merge", "name", Schema::Struct(CONTAINER)),
    field(
        "ephemeralContainers",
        "merge",
        "name",
        Schema::Struct(CONTAINER),
    ),
    merge_by("hostAliases", "ip"),
    merge_by("imagePullSecrets", "name"),
    field("initContainers", "merge", "name", Schema::Struct(CONTAINER)),
    field("resourceClaims", "merge,retainKeys", "name", Schema::Opaque),
    merge_by("schedulingGates", "name"),
    merge_by("topologySpreadConstraints", "topologyKey"),
    field(
        "volumes",
        "merge,retainKeys",
        "name",
        Schema::Struct(VOLUME),
    ),
];
const POD_STATUS: &[FieldMeta] = &[
    merge_by("conditions", "type"),
    merge_by("hostIPs", "ip"),
    merge_by("podIPs", "ip"),
    field(
        "resourceClaimStatuses",
        "merge,retainKeys",
        "name",
        Schema::Opaque,
    ),
];
const POD: &[FieldMeta] = &[
    child("metadata", OBJECT_META),
    child("spec", POD_SPEC),
    child("status", POD_STATUS),
];
const SERVICE_SPEC: &[FieldMeta] = &[merge_by("ports", "port")];
const SERVICE_STATUS: &[FieldMeta] = &[merge_by("conditions", "type")];
const SERVICE: &[FieldMeta] = &[
    child("metadata", OBJECT_META),
    child("spec", SERVICE_SPEC),
    child("status", SERVICE_STATUS),
];
const SERVICE_ACCOUNT: &[FieldMeta] =
    &[child("metadata", OBJECT_META), merge_by("secrets", "name")];
const NODE_SPEC: &[FieldMeta] = &[field("podCIDRs", "merge", "", Schema::Primitive)];
const NODE_STATUS: &[FieldMeta] = &[
    merge_by("addresses", "type"),
    merge_by("conditions", "type"),
];
const NODE: &[FieldMeta] = &[
    child("metadata", OBJECT_META),
    child("spec", NODE_SPEC),
    child("status", NODE_STATUS),
];
const NAMESPACE_STATUS: &[FieldMeta] = &[merge_by("conditions", "type")];
const NAMESPACE: &[FieldMeta] = &[
    child("metadata", OBJECT_META),
    child("status", NAMESPACE_STATUS),
];
/// Kinds whose only tagged fields are in ObjectMeta.
const METADATA_ONLY: &[FieldMeta] = &[child("metadata", OBJECT_META)];
const WEBHOOK_CONFIGURATION: &[FieldMeta] =
    &[child("metadata", OBJECT_META), merge_by("webhooks", "name")];

pub(super) fn root_schema(api_version: &str, kind: &str) -> Option<Schema> {
    let fields = match (api_version, kind) {
        ("v1", "Pod") => POD,
        ("v1", "Service") => SERVICE,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("v1", "Node") => NODE,
        ("v1", "Namespace") => NAMESPACE,
        (
            "admissionregistration.k8s.io/v1",
            "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration",
        ) => WEBHOOK_CONFIGURATION,
        ("v1", "Endpoints" | "ConfigMap" | "Secret" | "Event")
        | ("events.k8s.io/v1", "Event")
        | ("coordination.k8s.io/v1", "Lease")
        | ("scheduling.k8s.io/v1", "PriorityClass")
        | ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => METADATA_ONLY,
        _ => return None,
    };
    Some(Schema::Struct(fields))
}

impl Schema {
    /// `LookupPatchMetadataForStruct`/`ForSlice`: the field's schema, strategy and merge key.
    pub(super) fn lookup(
        self,
        key: &str,
    ) -> Result<(Schema, &'static str, &'static str), PatchError> {
        match self {
            Schema::Struct(fields) => Ok(fields
                .iter()
                .find(|f| f.name == key)
                .map(|f| (f.schema, f.strategy, f.merge_key))
                .unwrap_or((Schema::Opaque, "", ""))),
            Schema::Opaque => Ok((Schema::Opaque, "", "")),
            Schema::Primitive => Err(PatchError::Internal(
                "merging an object in json but data type is not struct, instead is: string"
                    .to_string(),
            )),
        }
    }

    /// Go's `reflect.Kind` name of the element type, used in one error message.
    pub(super) fn name(self) -> &'static str {
        match self {
            Schema::Primitive => "string",
            Schema::Struct(_) | Schema::Opaque => "struct",
        }
    }
}

/// `extractRetainKeysPatchStrategy`: the strategy besides `retainKeys`.
pub(super) fn list_strategy(tag: &'static str) -> &'static str {
    tag.split(',')
        .find(|s| *s != RETAIN_KEYS_STRATEGY)
        .unwrap_or("")
}
