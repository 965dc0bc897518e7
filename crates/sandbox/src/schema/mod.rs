//! Structural-schema engine for custom resources: pruning, defaulting and validation of
//! `serde_json::Value` objects against a CRD version's `openAPIV3Schema`, with the field paths and
//! messages of a real kube-apiserver v1.33 (kube-openapi validator, apiextensions-apiserver
//! pruning/defaulting/list-type/embedded-resource checks), plus the ObjectMeta checks every kind gets.
//!
//! Owns only this logic; it holds no state and must not touch the store, the HTTP layer or CEL
//! (rules in `x-kubernetes-validations` are recorded here and evaluated by `cel`).
//!
//! Go iterates maps in random order, so a real server orders errors of sibling fields randomly;
//! here siblings are visited in sorted key order, which is one of the orders a real server can give.

use crate::gofmt::go_float;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// The kind of a field error, as `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorKind {
    Invalid,
    NotSupported,
    Required,
    Duplicate,
    Forbidden,
    TooLong,
    TooMany,
    TypeInvalid,
}

impl FieldErrorKind {
    /// The `reason` of a `StatusCause`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Invalid => "FieldValueInvalid",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Required => "FieldValueRequired",
            Self::Duplicate => "FieldValueDuplicate",
            Self::Forbidden => "FieldValueForbidden",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
            Self::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Self::Invalid | Self::TypeInvalid => "Invalid value",
            Self::NotSupported => "Unsupported value",
            Self::Required => "Required value",
            Self::Duplicate => "Duplicate value",
            Self::Forbidden => "Forbidden",
            Self::TooLong => "Too long",
            Self::TooMany => "Too many",
        }
    }
}

/// One field error, as `k8s.io/apimachinery/pkg/util/validation/field.Error`.
/// `bad_value: None` means the value is omitted from the message.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub kind: FieldErrorKind,
    pub field: String,
    pub bad_value: Option<Value>,
    pub detail: String,
}

impl FieldError {
    fn new(kind: FieldErrorKind, field: &str, bad_value: Option<Value>, detail: &str) -> Self {
        FieldError {
            kind,
            field: field.to_string(),
            bad_value,
            detail: detail.to_string(),
        }
    }

    /// The message without the field name (`field.Error.ErrorBody()`), used as a StatusCause message.
    pub fn body(&self) -> String {
        let mut s = self.kind.title().to_string();
        let omit = matches!(
            self.kind,
            FieldErrorKind::Required | FieldErrorKind::Forbidden | FieldErrorKind::TooLong
        );
        if !omit && let Some(v) = &self.bad_value {
            s.push_str(": ");
            s.push_str(&render_bad_value(v));
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// Why a schema cannot be compiled.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SchemaError {
    #[error("schema is not structural: {}", .0.join(", "))]
    NotStructural(Vec<String>),
    #[error("invalid schema at {path}: {reason}")]
    Malformed { path: String, reason: String },
}

/// How `metadata.name` is checked (`ValidateNameFunc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    Dns1123Subdomain,
    Dns1123Label,
    Dns1035Label,
    PathSegment,
}

#[derive(Debug, Clone)]
enum Additional {
    Allows(bool),
    Schema(Box<Node>),
}

/// One schema node: a structural node or a value-validation node (inside allOf/anyOf/oneOf/not).
#[derive(Debug, Clone, Default)]
struct Node {
    ty: Option<String>,
    /// Only formats the apiserver validates for CRDs are kept (others are stripped, as it does).
    format: Option<String>,
    nullable: bool,
    properties: BTreeMap<String, Node>,
    additional: Option<Additional>,
    items: Option<Box<Node>>,
    required: Vec<String>,
    enumv: Option<Vec<Value>>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    exclusive_minimum: bool,
    exclusive_maximum: bool,
    multiple_of: Option<f64>,
    min_length: Option<i64>,
    max_length: Option<i64>,
    min_items: Option<i64>,
    max_items: Option<i64>,
    min_properties: Option<i64>,
    max_properties: Option<i64>,
    unique_items: bool,
    pattern: Option<String>,
    default: Option<Value>,
    preserve_unknown: bool,
    int_or_string: bool,
    embedded: bool,
    list_type: Option<String>,
    list_map_keys: Vec<String>,
    all_of: Vec<Node>,
    any_of: Vec<Node>,
    one_of: Vec<Node>,
    not: Option<Box<Node>>,
}

impl Node {
    fn types(&self) -> Vec<&str> {
        if self.int_or_string {
            vec!["integer", "string"]
        } else {
            self.ty.iter().map(String::as_str).collect()
        }
    }
    fn additional_schema(&self) -> Option<&Node> {
        match &self.additional {
            Some(Additional::Schema(s)) => Some(s),
            _ => None,
        }
    }
    /// The schema a map key's value follows (`properties`, else `additionalProperties`).
    fn field_schema(&self, key: &str) -> Option<&Node> {
        self.properties
            .get(key)
            .or_else(|| self.additional_schema())
    }
}

/// A compiled structural schema (the `openAPIV3Schema` of one CRD version).
#[derive(Debug, Clone)]
pub struct StructuralSchema {
    root: Node,
    has_cel: bool,
    patterns: bool,
}

const SUPPORTED_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

struct Compiler {
    errors: Vec<String>,
    has_cel: bool,
    patterns: bool,
}

fn child_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

impl Compiler {
    fn malformed(path: &str, reason: impl Into<String>) -> SchemaError {
        SchemaError::Malformed {
            path: if path.is_empty() {
                "<root>".into()
            } else {
                path.into()
            },
            reason: reason.into(),
        }
    }

    fn int(v: &Value, path: &str, key: &str) -> Result<Option<i64>, SchemaError> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x
                .as_i64()
                .map(Some)
                .ok_or_else(|| Self::malformed(&child_path(path, key), "must be an integer")),
        }
    }
    fn num(v: &Value, path: &str, key: &str) -> Result<Option<f64>, SchemaError> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x
                .as_f64()
                .map(Some)
                .ok_or_else(|| Self::malformed(&child_path(path, key), "must be a number")),
        }
    }
    fn boolean(v: &Value, key: &str) -> bool {
        v.get(key).and_then(Value::as_bool).unwrap_or(false)
    }
    fn string(v: &Value, path: &str, key: &str) -> Result<Option<String>, SchemaError> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(Self::malformed(&child_path(path, key), "must be a string")),
        }
    }

    /// Parses one node. `structural` is false inside value validations (allOf/anyOf/oneOf/not),
    /// where the structural-schema rules forbid most keywords.
    fn node(
        &mut self,
        v: &Value,
        path: &str,
        structural: bool,
        int_or_string_parent: bool,
    ) -> Result<Node, SchemaError> {
        let obj = v
            .as_object()
            .ok_or_else(|| Self::malformed(path, "schema must be an object"))?;
        if obj.contains_key("$ref") {
            self.errors.push(format!(
                "{}: Forbidden: $ref is not allowed",
                child_path(path, "$ref")
            ));
        }
        let mut n = Node {
            ty: Self::string(v, path, "type")?.filter(|t| !t.is_empty()),
            nullable: Self::boolean(v, "nullable"),
            exclusive_minimum: Self::boolean(v, "exclusiveMinimum"),
            exclusive_maximum: Self::boolean(v, "exclusiveMaximum"),
            unique_items: Self::boolean(v, "uniqueItems"),
            preserve_unknown: Self::boolean(v, "x-kubernetes-preserve-unknown-fields"),
            int_or_string: Self::boolean(v, "x-kubernetes-int-or-string"),
            embedded: Self::boolean(v, "x-kubernetes-embedded-resource"),
            minimum: Self::num(v, path, "minimum")?,
            maximum: Self::num(v, path, "maximum")?,
            multiple_of: Self::num(v, path, "multipleOf")?,
            min_length: Self::int(v, path, "minLength")?,
            max_length: Self::int(v, path, "maxLength")?,
            min_items: Self::int(v, path, "minItems")?,
            max_items: Self::int(v, path, "maxItems")?,
            min_properties: Self::int(v, path, "minProperties")?,
            max_properties: Self::int(v, path, "maxProperties")?,
            pattern: Self::string(v, path, "pattern")?,
            list_type: Self::string(v, path, "x-kubernetes-list-type")?,
            default: obj.get("default").cloned(),
            ..Node::default()
        };
        if n.pattern.is_some() {
            self.patterns = true;
        }
        if let Some(f) = Self::string(v, path, "format")?
            && SUPPORTED_FORMATS.contains(&f.replace('-', "").as_str())
        {
            n.format = Some(f);
        }
        match obj.get("x-kubernetes-validations") {
            Some(Value::Array(a)) if !a.is_empty() => self.has_cel = true,
            _ => {}
        }
        if let Some(keys) = obj.get("x-kubernetes-list-map-keys") {
            let arr = keys.as_array().ok_or_else(|| {
                Self::malformed(
                    &child_path(path, "x-kubernetes-list-map-keys"),
                    "must be a list",
                )
            })?;
            for k in arr {
                let k = k.as_str().ok_or_else(|| {
                    Self::malformed(
                        &child_path(path, "x-kubernetes-list-map-keys"),
                        "must be strings",
                    )
                })?;
                n.list_map_keys.push(k.to_string());
            }
        }
        if let Some(req) = obj.get("required") {
            let arr = req
                .as_array()
                .ok_or_else(|| Self::malformed(&child_path(path, "required"), "must be a list"))?;
            for r in arr {
                let r = r.as_str().ok_or_else(|| {
                    Self::malformed(&child_path(path, "required"), "must be strings")
                })?;
                n.required.push(r.to_string());
            }
        }
        if let Some(e) = obj.get("enum") {
            let arr = e
                .as_array()
                .ok_or_else(|| Self::malformed(&child_path(path, "enum"), "must be a list"))?;
            n.enumv = Some(arr.clone());
        }
        if let Some(props) = obj.get("properties") {
            let props = props.as_object().ok_or_else(|| {
                Self::malformed(&child_path(path, "properties"), "must be an object")
            })?;
            for (k, pv) in props {
                let p = format!("{}[{k}]", child_path(path, "properties"));
                let child = self.node(pv, &p, structural, false)?;
                n.properties.insert(k.clone(), child);
            }
        }
        match obj.get("additionalProperties") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => n.additional = Some(Additional::Allows(*b)),
            Some(ap) => {
                let p = child_path(path, "additionalProperties");
                n.additional = Some(Additional::Schema(Box::new(
                    self.node(ap, &p, structural, false)?,
                )));
            }
        }
        match obj.get("items") {
            None | Some(Value::Null) => {}
            Some(Value::Array(_)) => self.errors.push(format!(
                "{}: Forbidden: items must be a schema object, not a list",
                child_path(path, "items")
            )),
            Some(it) => {
                let p = child_path(path, "items");
                n.items = Some(Box::new(self.node(it, &p, structural, false)?));
            }
        }
        for (key, dst) in [("allOf", 0), ("anyOf", 1), ("oneOf", 2)] {
            if let Some(list) = obj.get(key) {
                let arr = list
                    .as_array()
                    .ok_or_else(|| Self::malformed(&child_path(path, key), "must be a list"))?;
                let mut out = Vec::new();
                for (i, s) in arr.iter().enumerate() {
                    let p = format!("{}[{i}]", child_path(path, key));
                    out.push(self.node(s, &p, false, n.int_or_string)?);
                }
                match dst {
                    0 => n.all_of = out,
                    1 => n.any_of = out,
                    _ => n.one_of = out,
                }
            }
        }
        if let Some(not) = obj.get("not") {
            let p = child_path(path, "not");
            n.not = Some(Box::new(self.node(not, &p, false, false)?));
        }
        if structural {
            self.check_structural(&n, obj, path);
        } else {
            self.check_value_validation(&n, obj, path, int_or_string_parent);
        }
        Ok(n)
    }

    fn check_structural(&mut self, n: &Node, obj: &Map<String, Value>, path: &str) {
        let e = &mut self.errors;
        let at = |k: &str| child_path(path, k);
        if n.ty.is_none() && !n.int_or_string && !n.preserve_unknown {
            e.push(format!(
                "{}: Required value: must not be empty for specified fields",
                at("type")
            ));
        }
        if n.int_or_string && n.ty.is_some() {
            e.push(format!(
                "{}: Forbidden: must be empty if x-kubernetes-int-or-string is true",
                at("type")
            ));
        }
        if n.embedded && n.ty.as_deref() != Some("object") {
            e.push(format!(
                "{}: Required value: must be object if x-kubernetes-embedded-resource is true",
                at("type")
            ));
        }
        if n.ty.as_deref() == Some("array") && n.items.is_none() {
            e.push(format!(
                "{}: Required value: must be specified",
                at("items")
            ));
        }
        if !n.properties.is_empty() && n.additional_schema().is_some() {
            e.push(format!(
                "{}: Forbidden: additionalProperties and properties are mutual exclusive",
                at("additionalProperties")
            ));
        }
        if matches!(n.additional, Some(Additional::Allows(false))) {
            e.push(format!(
                "{}: Forbidden: must not be false",
                at("additionalProperties")
            ));
        }
        if obj.contains_key("patternProperties") || obj.contains_key("dependencies") {
            e.push(format!(
                "{path}: Forbidden: patternProperties and dependencies are not supported"
            ));
        }
    }

    fn check_value_validation(
        &mut self,
        n: &Node,
        obj: &Map<String, Value>,
        path: &str,
        int_or_string_parent: bool,
    ) {
        // The int-or-string idiom `anyOf: [{type: integer}, {type: string}]` is the one place
        // where a type is allowed inside a value validation.
        let type_ok =
            int_or_string_parent && matches!(n.ty.as_deref(), Some("integer") | Some("string"));
        let mut forbid = |key: &str, why: &str| {
            self.errors.push(format!(
                "{}: Forbidden: {why} to be structural",
                child_path(path, key)
            ));
        };
        if n.ty.is_some() && !type_ok {
            forbid("type", "must be empty");
        }
        if n.additional.is_some() {
            forbid("additionalProperties", "must be undefined");
        }
        if n.default.is_some() {
            forbid("default", "must be undefined");
        }
        for key in ["title", "description"] {
            if obj
                .get(key)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
            {
                forbid(key, "must be empty");
            }
        }
        if n.nullable {
            forbid("nullable", "must be false");
        }
        for (key, set) in [
            ("x-kubernetes-preserve-unknown-fields", n.preserve_unknown),
            ("x-kubernetes-embedded-resource", n.embedded),
            ("x-kubernetes-int-or-string", n.int_or_string),
        ] {
            if set {
                forbid(key, "must be false");
            }
        }
        if !n.list_map_keys.is_empty() {
            forbid("x-kubernetes-list-map-keys", "must be empty");
        }
        for key in ["x-kubernetes-list-type", "x-kubernetes-map-type"] {
            if obj.contains_key(key) {
                forbid(key, "must be undefined");
            }
        }
        if obj.contains_key("x-kubernetes-validations") {
            forbid("x-kubernetes-validations", "must be empty");
        }
    }
}

impl StructuralSchema {
    /// Compiles an `openAPIV3Schema`, rejecting schemas a v1 CRD could not have (non-structural).
    pub fn compile(schema: &Value) -> Result<Self, SchemaError> {
        let mut c = Compiler {
            errors: Vec::new(),
            has_cel: false,
            patterns: false,
        };
        let mut root = c.node(schema, "", true, false)?;
        if root.ty.as_deref() != Some("object") {
            c.errors
                .push("type: Invalid value: must be object at the root".into());
        }
        if root.additional.is_some() {
            c.errors
                .push("additionalProperties: Forbidden: must not be used at the root".into());
        }
        if let Some(meta) = root.properties.get("metadata") {
            let only_names = meta
                .properties
                .keys()
                .all(|k| k == "name" || k == "generateName");
            if !only_names || meta.default.is_some() || meta.additional.is_some() {
                c.errors.push(
                    "properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified".into(),
                );
            }
        }
        if !c.errors.is_empty() {
            return Err(SchemaError::NotStructural(c.errors));
        }
        prune_defaults(&mut root);
        Ok(StructuralSchema {
            root,
            has_cel: c.has_cel,
            patterns: c.patterns,
        })
    }

    /// True when some node has `x-kubernetes-validations` (CEL rules, evaluated by `cel`).
    pub fn has_cel(&self) -> bool {
        self.has_cel
    }

    /// True when some node has a `pattern`, which this engine does not check (no regex engine).
    pub fn has_unchecked_patterns(&self) -> bool {
        self.patterns
    }

    /// Drops fields the schema does not declare (unless x-kubernetes-preserve-unknown-fields), in
    /// place, and returns the sorted paths of what it dropped, as strict field validation reports
    /// them (`spec.foo`, `spec.tasks[0].bar`). Also drops nulls of non-nullable fields without a
    /// default, and unknown fields of embedded resources' ObjectMeta, as the apiserver's decoder does.
    /// At the root, `apiVersion`, `kind` and `metadata` are never touched.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut paths = Vec::new();
        let root = &self.root;
        prune_value(obj, Some(root), true, "", &mut paths);
        prune_nulls(obj, Some(root));
        coerce_embedded_meta(obj, Some(root), "", &mut paths);
        paths.sort();
        paths
    }

    /// Applies `default`s in place, as the apiserver does after decoding.
    pub fn apply_defaults(&self, obj: &mut Value) {
        default_value(obj, Some(&self.root));
    }

    /// Validates a whole object; an empty Vec means valid. Order: schema (kube-openapi) errors,
    /// then embedded-resource checks, then list-type set/map uniqueness, as the apiserver orders them.
    pub fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let res = validate_node(&self.root, "", obj);
        let mut out = to_field_errors(None, &res.errors);
        validate_embedded(&self.root, "", obj, &mut out);
        if let Value::Object(m) = obj {
            list_sets_and_maps_object(&self.root, "", m, &mut out);
        }
        out
    }

    /// Validates the `status` of an object as the `/status` subresource does: the status schema is
    /// validated on its own, so messages name `conditions[0].type` while paths are under `status.`.
    pub fn validate_status(&self, status: &Value) -> Vec<FieldError> {
        match self.root.properties.get("status") {
            Some(s) => to_field_errors(Some("status"), &validate_node(s, "", status).errors),
            None => Vec::new(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pruning and defaulting (apiextensions-apiserver pkg/apiserver/schema/{pruning,defaulting}).

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

fn key_path(parent: &str, key: &str) -> String {
    child_path(parent, key)
}

fn prune_value(x: &mut Value, s: Option<&Node>, is_root: bool, path: &str, out: &mut Vec<String>) {
    if let Some(s) = s
        && s.preserve_unknown
    {
        skip_prune(x, s, is_root, path, out);
        return;
    }
    match x {
        Value::Object(m) => {
            let Some(s) = s else {
                for k in m.keys() {
                    out.push(key_path(path, k));
                }
                m.clear();
                return;
            };
            let embedded = s.embedded || is_root;
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(prop) = s.properties.get(&k) {
                    if let Some(v) = m.get_mut(&k) {
                        prune_value(v, Some(prop), false, &key_path(path, &k), out);
                    }
                } else if let Some(add) = &s.additional {
                    if let Some(v) = m.get_mut(&k) {
                        let sub = match add {
                            Additional::Schema(n) => Some(n.as_ref()),
                            Additional::Allows(_) => None,
                        };
                        prune_value(v, sub, false, &key_path(path, &k), out);
                    }
                } else {
                    if !META_FIELDS.contains(&k.as_str()) || !path.is_empty() {
                        out.push(key_path(path, &k));
                    }
                    m.remove(&k);
                }
            }
        }
        Value::Array(a) => {
            let items = s.and_then(|s| s.items.as_deref());
            for (i, v) in a.iter_mut().enumerate() {
                prune_value(v, items, false, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn skip_prune(x: &mut Value, s: &Node, is_root: bool, path: &str, out: &mut Vec<String>) {
    match x {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                if (s.embedded || is_root) && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(prop) = s.properties.get(k) {
                    prune_value(v, Some(prop), false, &key_path(path, k), out);
                } else if let Some(Additional::Schema(add)) = &s.additional {
                    prune_value(v, Some(add), false, &key_path(path, k), out);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for (i, v) in a.iter_mut().enumerate() {
                    skip_prune(v, items, false, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// `PruneNonNullableNullsWithoutDefaults`: a null for a non-nullable field without a default is
/// treated as absent.
fn prune_nulls(x: &mut Value, s: Option<&Node>) {
    match x {
        Value::Object(m) => {
            let drop: Vec<String> = m
                .iter()
                .filter(|(k, v)| {
                    v.is_null()
                        && s.and_then(|s| s.field_schema(k))
                            .is_some_and(|f| !f.nullable && f.default.is_none())
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in drop {
                m.remove(&k);
            }
            for (k, v) in m.iter_mut() {
                prune_nulls(v, s.and_then(|s| s.field_schema(k)));
            }
        }
        Value::Array(a) => {
            let items = s.and_then(|s| s.items.as_deref());
            for v in a {
                prune_nulls(v, items);
            }
        }
        _ => {}
    }
}

const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Drops unknown ObjectMeta fields of embedded resources (the root's metadata is the server's).
fn coerce_embedded_meta(x: &mut Value, s: Option<&Node>, path: &str, out: &mut Vec<String>) {
    let Some(s) = s else { return };
    match x {
        Value::Object(m) => {
            if s.embedded
                && let Some(Value::Object(meta)) = m.get_mut("metadata")
            {
                let unknown: Vec<String> = meta
                    .keys()
                    .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
                    .cloned()
                    .collect();
                for k in unknown {
                    out.push(format!("{}.{k}", key_path(path, "metadata")));
                    meta.remove(&k);
                }
                if meta.get("creationTimestamp").is_some_and(Value::is_null) {
                    meta.remove("creationTimestamp");
                }
            }
            for (k, v) in m.iter_mut() {
                coerce_embedded_meta(v, s.field_schema(k), &key_path(path, k), out);
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter_mut().enumerate() {
                coerce_embedded_meta(v, s.items.as_deref(), &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// `PruneDefaults`: defaults are pruned against their own schema when the CRD is loaded.
fn prune_defaults(n: &mut Node) {
    if let Some(mut d) = n.default.take() {
        let mut ignored = Vec::new();
        let schema = n.clone();
        prune_value(&mut d, Some(&schema), false, "", &mut ignored);
        n.default = Some(d);
    }
    if let Some(Additional::Schema(a)) = &mut n.additional {
        prune_defaults(a);
    }
    if let Some(i) = &mut n.items {
        prune_defaults(i);
    }
    for p in n.properties.values_mut() {
        prune_defaults(p);
    }
}

fn non_nullable_null(x: &Value, s: Option<&Node>) -> bool {
    x.is_null() && s.is_some_and(|s| !s.nullable)
}

fn default_value(x: &mut Value, s: Option<&Node>) {
    let Some(s) = s else { return };
    match x {
        Value::Object(m) => {
            for (k, prop) in &s.properties {
                let Some(d) = &prop.default else { continue };
                let absent = m.get(k).is_none_or(|v| non_nullable_null(v, Some(prop)));
                if absent {
                    m.insert(k.clone(), d.clone());
                }
            }
            for (k, v) in m.iter_mut() {
                if let Some(prop) = s.properties.get(k) {
                    default_value(v, Some(prop));
                } else if let Some(Additional::Schema(add)) = &s.additional {
                    if non_nullable_null(v, Some(add))
                        && let Some(d) = &add.default
                    {
                        *v = d.clone();
                    }
                    default_value(v, Some(add));
                }
            }
        }
        Value::Array(a) => {
            let items = s.items.as_deref();
            for v in a {
                if non_nullable_null(v, items)
                    && let Some(d) = items.and_then(|i| i.default.as_ref())
                {
                    *v = d.clone();
                }
                default_value(v, items);
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Validation (kube-openapi pkg/validation/validate, converted as apiextensions' validation.go).

#[derive(Debug, Clone, Copy, PartialEq)]
enum Code {
    InvalidType,
    Required,
    TooLong,
    Enum,
    MaxItems,
    TooManyProperties,
    /// Every other `*errors.Validation` code (converted to `field.Invalid`).
    Other,
    /// A plain error (anyOf/oneOf/allOf/not): converted to `field.Invalid` at the root path.
    Composite,
}

#[derive(Debug, Clone)]
struct OErr {
    code: Code,
    name: String,
    /// `None` is Go's nil.
    value: Option<Value>,
    valid: Option<i64>,
    values: Vec<Value>,
    message: String,
}

impl OErr {
    fn new(code: Code, name: &str, value: Option<Value>, message: String) -> Self {
        OErr {
            code,
            name: name.to_string(),
            value,
            valid: None,
            values: Vec::new(),
            message,
        }
    }
}

/// `validate.Result`: errors deduplicated by message, and the match count anyOf/oneOf use to
/// pick the "best" failing alternative.
#[derive(Debug, Default)]
struct Res {
    errors: Vec<OErr>,
    matches: usize,
}

impl Res {
    fn err(e: OErr) -> Res {
        Res {
            errors: vec![e],
            matches: 0,
        }
    }
    fn add(&mut self, e: OErr) {
        if !self.errors.iter().any(|x| x.message == e.message) {
            self.errors.push(e);
        }
    }
    fn merge(&mut self, other: Res) {
        for e in other.errors {
            self.add(e);
        }
        self.matches += other.matches;
    }
    fn valid(&self) -> bool {
        self.errors.is_empty()
    }
}

/// The Go kind of a decoded JSON value, as the validators see it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Bool,
    Int(i64),
    Float(f64),
    Str,
    Slice,
    Map,
}

fn kind_of(v: &Value) -> Option<Kind> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(_) => Kind::Bool,
        Value::Number(n) => match n.as_i64() {
            Some(i) => Kind::Int(i),
            None => Kind::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(_) => Kind::Str,
        Value::Array(_) => Kind::Slice,
        Value::Object(_) => Kind::Map,
    })
}

const IN: &str = "body";

fn invalid_type(path: &str, ty: &str, got: &str) -> OErr {
    OErr::new(
        Code::InvalidType,
        path,
        Some(Value::String(got.to_string())),
        format!("{path} in {IN} must be of type {ty}: {}", go_quote(got)),
    )
}

fn is_json_integer(f: f64) -> bool {
    f.is_finite() && f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_992.0
}

fn validate_type(n: &Node, path: &str, data: &Value) -> Res {
    let types = n.types();
    let contains = |t: &str| types.contains(&t);
    let Some(kind) = kind_of(data) else {
        if !types.is_empty() && !contains("null") && !n.nullable {
            return Res::err(invalid_type(path, &types.join(","), "null"));
        }
        return Res {
            errors: vec![],
            matches: 1,
        };
    };
    let (sch_type, format) = match kind {
        Kind::Bool => ("boolean", ""),
        Kind::Str => ("string", ""),
        Kind::Int(_) => ("integer", "int64"),
        Kind::Float(_) => ("number", "float64"),
        Kind::Slice => ("array", ""),
        Kind::Map => ("object", ""),
    };
    let is_float_int = matches!(kind, Kind::Float(f) if is_json_integer(f)) && contains("integer");
    let is_int_float = sch_type == "integer" && contains("number");
    let fmt = n.format.as_deref().unwrap_or("");
    let string_like = matches!(kind, Kind::Str | Kind::Slice);
    if !(string_like
        || fmt.is_empty()
        || contains(sch_type)
        || format == fmt
        || is_float_int
        || is_int_float)
    {
        return Res::err(invalid_type(path, fmt, format));
    }
    if string_like && !(contains("number") || contains("integer") || fmt.is_empty()) {
        return Res {
            errors: vec![],
            matches: 1,
        };
    }
    if !(contains(sch_type) || is_float_int || is_int_float) {
        return Res::err(invalid_type(path, &types.join(","), sch_type));
    }
    Res {
        errors: vec![],
        matches: 1,
    }
}

fn composite(msg: String) -> OErr {
    OErr::new(Code::Composite, "", None, msg)
}

fn validate_schema_props(n: &Node, path: &str, data: &Value) -> Res {
    let mut main = Res::default();
    if !n.any_of.is_empty() {
        let mut best: Option<Res> = None;
        let mut first_success: Option<Res> = None;
        let mut succeeded = false;
        for s in &n.any_of {
            let r = validate_node(s, path, data);
            if r.valid() {
                best = None;
                succeeded = true;
                first_success = Some(r);
                break;
            }
            if best.as_ref().is_none_or(|b| r.matches > b.matches) {
                best = Some(r);
            }
        }
        if !succeeded {
            main.add(composite(format!(
                "{} must validate at least one schema (anyOf)",
                go_quote(path)
            )));
        }
        if let Some(b) = best {
            main.merge(b);
        } else if let Some(f) = first_success {
            main.merge(f);
        }
    }
    if !n.one_of.is_empty() {
        let mut best: Option<Res> = None;
        let mut first_success: Option<Res> = None;
        let mut validated = 0;
        for s in &n.one_of {
            let r = validate_node(s, path, data);
            if r.valid() {
                validated += 1;
                best = None;
                if first_success.is_none() {
                    first_success = Some(r);
                }
                continue;
            }
            if validated == 0 && best.as_ref().is_none_or(|b| r.matches > b.matches) {
                best = Some(r);
            }
        }
        if validated != 1 {
            let extra = if validated == 0 {
                "Found none valid".to_string()
            } else {
                format!("Found {validated} valid alternatives")
            };
            main.add(composite(format!(
                "{} must validate one and only one schema (oneOf). {extra}",
                go_quote(path)
            )));
            if let Some(b) = best {
                main.merge(b);
            }
        } else if let Some(f) = first_success {
            main.merge(f);
        }
    }
    if !n.all_of.is_empty() {
        let mut validated = 0;
        for s in &n.all_of {
            let r = validate_node(s, path, data);
            if r.valid() {
                validated += 1;
            }
            main.merge(r);
        }
        if validated != n.all_of.len() {
            let extra = if validated == 0 {
                ". None validated"
            } else {
                ""
            };
            main.add(composite(format!(
                "{} must validate all the schemas (allOf){extra}",
                go_quote(path)
            )));
        }
    }
    if let Some(not) = &n.not
        && validate_node(not, path, data).valid()
    {
        main.add(composite(format!(
            "{} must not validate the schema (not)",
            go_quote(path)
        )));
    }
    main.matches += 1;
    main
}

fn validate_string(n: &Node, path: &str, s: &str) -> Res {
    let len = s.chars().count() as i64;
    if let Some(max) = n.max_length
        && len > max
    {
        let mut e = OErr::new(
            Code::TooLong,
            path,
            Some(Value::String(s.into())),
            format!("{path} in {IN} should be at most {max} chars long"),
        );
        e.valid = Some(max);
        return Res::err(e);
    }
    if let Some(min) = n.min_length
        && len < min
    {
        return Res::err(OErr::new(
            Code::Other,
            path,
            Some(Value::String(s.into())),
            format!("{path} in {IN} should be at least {min} chars long"),
        ));
    }
    Res::default()
}

fn validate_format(n: &Node, path: &str, s: &str) -> Res {
    let Some(f) = n.format.as_deref() else {
        return Res::default();
    };
    if format_ok(&f.replace('-', ""), s) {
        return Res::default();
    }
    Res::err(invalid_type_data(path, f, s))
}

fn invalid_type_data(path: &str, format: &str, data: &str) -> OErr {
    OErr::new(
        Code::InvalidType,
        path,
        Some(Value::String(data.to_string())),
        format!(
            "{path} in {IN} must be of type {format}: {}",
            go_quote(data)
        ),
    )
}

fn num_value(k: Kind) -> Value {
    match k {
        Kind::Int(i) => Value::from(i),
        Kind::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        _ => Value::Null,
    }
}

fn validate_number(n: &Node, path: &str, k: Kind) -> Res {
    let mut res = Res::default();
    let val = num_value(k);
    let mut multiple = Res::default();
    let mut minimum = Res::default();
    let mut maximum = Res::default();
    if let Some(factor) = n.multiple_of {
        let positive_msg =
            |f: String| format!("factor MultipleOf declared for {path} must be positive: {f}");
        match k {
            Kind::Int(i) => {
                let fi = factor as i64;
                if fi <= 0 {
                    multiple.add(OErr::new(
                        Code::Other,
                        path,
                        Some(Value::from(fi)),
                        positive_msg(fi.to_string()),
                    ));
                } else if i % fi != 0 {
                    multiple.add(OErr::new(
                        Code::Other,
                        path,
                        Some(val.clone()),
                        format!("{path} in {IN} should be a multiple of {fi}"),
                    ));
                }
            }
            Kind::Float(f) => {
                if factor <= 0.0 {
                    multiple.add(OErr::new(
                        Code::Other,
                        path,
                        num_json(factor),
                        positive_msg(go_float(factor)),
                    ));
                } else {
                    let mult = if factor < 1.0 {
                        1.0 / factor * f
                    } else {
                        f / factor
                    };
                    if !is_json_integer(mult) {
                        multiple.add(OErr::new(
                            Code::Other,
                            path,
                            Some(val.clone()),
                            format!(
                                "{path} in {IN} should be a multiple of {}",
                                go_float(factor)
                            ),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    if let Some(min) = n.minimum {
        let excl = n.exclusive_minimum;
        let rel = if excl {
            "greater than"
        } else {
            "greater than or equal to"
        };
        let (fail, shown) = match k {
            Kind::Int(i) => {
                let m = min as i64;
                ((!excl && i < m) || (excl && i <= m), m.to_string())
            }
            Kind::Float(f) => ((!excl && f < min) || (excl && f <= min), go_float(min)),
            _ => (false, String::new()),
        };
        if fail {
            minimum.add(OErr::new(
                Code::Other,
                path,
                Some(val.clone()),
                format!("{path} in {IN} should be {rel} {shown}"),
            ));
        }
    }
    if let Some(max) = n.maximum {
        let excl = n.exclusive_maximum;
        let rel = if excl {
            "less than"
        } else {
            "less than or equal to"
        };
        let (fail, shown) = match k {
            Kind::Int(i) => {
                let m = max as i64;
                ((!excl && i > m) || (excl && i >= m), m.to_string())
            }
            Kind::Float(f) => ((!excl && f > max) || (excl && f >= max), go_float(max)),
            _ => (false, String::new()),
        };
        if fail {
            maximum.add(OErr::new(
                Code::Other,
                path,
                Some(val.clone()),
                format!("{path} in {IN} should be {rel} {shown}"),
            ));
        }
    }
    res.merge(multiple);
    res.merge(minimum);
    res.merge(maximum);
    res.matches += 1;
    res
}

fn num_json(f: f64) -> Option<Value> {
    Some(serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number))
}

fn validate_slice(n: &Node, path: &str, a: &[Value]) -> Res {
    let mut res = Res::default();
    if let Some(items) = &n.items {
        for (i, v) in a.iter().enumerate() {
            res.merge(validate_node(items, &format!("{path}[{i}]"), v));
        }
    }
    let size = a.len() as i64;
    if let Some(min) = n.min_items
        && size < min
    {
        res.add(OErr::new(
            Code::Other,
            path,
            Some(Value::from(size)),
            format!("{path} in {IN} should have at least {min} items"),
        ));
    }
    if let Some(max) = n.max_items
        && size > max
    {
        let mut e = OErr::new(
            Code::MaxItems,
            path,
            Some(Value::from(size)),
            format!("{path} in {IN} should have at most {max} items"),
        );
        e.valid = Some(max);
        res.add(e);
    }
    if n.unique_items {
        let dup = a.iter().enumerate().any(|(i, x)| a[..i].contains(x));
        if dup {
            res.add(OErr::new(
                Code::Other,
                path,
                None,
                format!("{path} in {IN} shouldn't contain duplicates"),
            ));
        }
    }
    res.matches += 1;
    res
}

/// Enum membership as kube-openapi decides it: the value converted to the enum value's Go type.
fn enum_matches(data: &Value, e: &Value) -> bool {
    match (data, e) {
        (Value::Null, _) | (_, Value::Null) => false,
        (Value::Number(a), Value::Number(b)) => {
            // Enum numbers come from the CRD as float64; the value converts to it.
            a.as_f64() == b.as_f64()
        }
        (Value::Number(a), Value::String(s)) => a
            .as_i64()
            .map(|i| {
                let c = u32::try_from(i)
                    .ok()
                    .and_then(char::from_u32)
                    .unwrap_or('\u{FFFD}');
                s.chars().eq(std::iter::once(c))
            })
            .unwrap_or(false),
        _ => data == e,
    }
}

fn validate_enum(n: &Node, path: &str, data: &Value) -> Res {
    let Some(values) = &n.enumv else {
        return Res::default();
    };
    if values.is_empty() || values.iter().any(|e| enum_matches(data, e)) {
        return Res::default();
    }
    let shown: Vec<String> = values.iter().map(go_v).collect();
    let mut e = OErr::new(
        Code::Enum,
        path,
        if data.is_null() {
            None
        } else {
            Some(data.clone())
        },
        format!("{path} in {IN} should be one of [{}]", shown.join(" ")),
    );
    e.values = values.clone();
    Res::err(e)
}

fn validate_object(n: &Node, path: &str, m: &Map<String, Value>) -> Res {
    let mut res = Res::default();
    let num = m.len() as i64;
    if let Some(min) = n.min_properties
        && num < min
    {
        res.add(OErr::new(
            Code::Other,
            path,
            Some(Value::from(num)),
            format!("{path} in {IN} should have at least {min} properties"),
        ));
    }
    if let Some(max) = n.max_properties
        && num > max
    {
        let mut e = OErr::new(
            Code::TooManyProperties,
            path,
            Some(Value::from(num)),
            format!("{path} in {IN} should have at most {max} properties"),
        );
        e.valid = Some(max);
        res.add(e);
    }
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    match &n.additional {
        Some(Additional::Allows(false)) => {
            for k in &keys {
                if !n.properties.contains_key(*k) {
                    res.add(OErr::new(
                        Code::Other,
                        path,
                        Some(Value::String((*k).clone())),
                        format!("{path}.{k} in {IN} is a forbidden property"),
                    ));
                }
            }
        }
        Some(Additional::Schema(add)) => {
            for k in &keys {
                if !n.properties.contains_key(*k)
                    && let Some(v) = m.get(*k)
                {
                    res.merge(validate_node(add, &format!("{path}.{k}"), v));
                }
            }
        }
        _ => {}
    }
    for (p, ps) in &n.properties {
        if let Some(v) = m.get(p) {
            res.merge(validate_node(ps, &child_path(path, p), v));
        }
    }
    for r in &n.required {
        if !m.contains_key(r) {
            let name = format!("{path}.{r}");
            res.add(OErr::new(
                Code::Required,
                &name,
                None,
                format!("{name} in {IN} is required"),
            ));
        }
    }
    res
}

/// `SchemaValidator.Validate`: every applicable validator runs, in kube-openapi's fixed order.
fn validate_node(n: &Node, path: &str, data: &Value) -> Res {
    let mut res = Res::default();
    let Some(kind) = kind_of(data) else {
        res.merge(validate_type(n, path, data));
        res.merge(validate_enum(n, path, data));
        return res;
    };
    let step = |res: &mut Res, r: Res| {
        res.merge(r);
        res.matches += 1;
    };
    if !n.types().is_empty() || n.format.is_some() {
        step(&mut res, validate_type(n, path, data));
    }
    step(&mut res, validate_schema_props(n, path, data));
    if let Value::String(s) = data {
        step(&mut res, validate_string(n, path, s));
        if n.format
            .as_deref()
            .is_some_and(|f| format_known(&f.replace('-', "")))
        {
            step(&mut res, validate_format(n, path, s));
        }
    }
    if matches!(kind, Kind::Int(_) | Kind::Float(_)) {
        step(&mut res, validate_number(n, path, kind));
    }
    if let Value::Array(a) = data {
        step(&mut res, validate_slice(n, path, a));
    }
    step(&mut res, validate_enum(n, path, data));
    if let Value::Object(m) = data {
        step(&mut res, validate_object(n, path, m));
    }
    res.matches += 1;
    res
}

/// `kubeOpenAPIResultToFieldErrors`.
fn to_field_errors(prefix: Option<&str>, errs: &[OErr]) -> Vec<FieldError> {
    let root = prefix.unwrap_or("<nil>");
    errs.iter()
        .map(|e| {
            let name = e.name.strip_prefix('.').unwrap_or(&e.name);
            let field = if e.code == Code::Composite || name.is_empty() {
                root.to_string()
            } else {
                match prefix {
                    Some(p) => format!("{p}.{name}"),
                    None => name.to_string(),
                }
            };
            let value_or_empty = || Some(e.value.clone().unwrap_or(Value::String(String::new())));
            match e.code {
                Code::Required => FieldError::new(FieldErrorKind::Required, &field, None, ""),
                Code::Enum => {
                    let values: Vec<String> = e
                        .values
                        .iter()
                        .map(|v| match v {
                            Value::String(s) => go_quote(s),
                            other => go_quote(&go_json(other)),
                        })
                        .collect();
                    let detail = if values.is_empty() {
                        String::new()
                    } else {
                        format!("supported values: {}", values.join(", "))
                    };
                    FieldError::new(
                        FieldErrorKind::NotSupported,
                        &field,
                        Some(e.value.clone().unwrap_or(Value::Null)),
                        &detail,
                    )
                }
                Code::TooLong => FieldError::new(
                    FieldErrorKind::TooLong,
                    &field,
                    None,
                    &format!("may not be more than {} bytes", e.valid.unwrap_or(-1)),
                ),
                Code::MaxItems | Code::TooManyProperties => FieldError::new(
                    FieldErrorKind::TooMany,
                    &field,
                    e.value.clone(),
                    &format!("must have at most {} items", e.valid.unwrap_or(-1)),
                ),
                Code::InvalidType => FieldError::new(
                    FieldErrorKind::TypeInvalid,
                    &field,
                    value_or_empty(),
                    &e.message,
                ),
                Code::Other => FieldError::new(
                    FieldErrorKind::Invalid,
                    &field,
                    value_or_empty(),
                    &e.message,
                ),
                Code::Composite => FieldError::new(
                    FieldErrorKind::Invalid,
                    &field,
                    Some(Value::String(String::new())),
                    &e.message,
                ),
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// String formats the apiserver checks for CRDs.

fn format_known(f: &str) -> bool {
    matches!(
        f,
        "byte"
            | "date"
            | "datetime"
            | "uuid"
            | "uuid3"
            | "uuid4"
            | "uuid5"
            | "ipv4"
            | "ipv6"
            | "cidr"
            | "mac"
            | "hostname"
            | "hexcolor"
            | "bsonobjectid"
            | "password"
    )
}

fn format_ok(f: &str, s: &str) -> bool {
    match f {
        "byte" => is_base64(s),
        "date" => is_date(s),
        "datetime" => is_datetime(s),
        "uuid" => is_uuid(s, None),
        "uuid3" => is_uuid(s, Some('3')),
        "uuid4" => is_uuid(s, Some('4')),
        "uuid5" => is_uuid(s, Some('5')),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::IpAddr>().is_ok(),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "hostname" => is_hostname(s),
        "hexcolor" => {
            let h = s.strip_prefix('#').unwrap_or(s);
            (h.len() == 3 || h.len() == 6) && h.chars().all(|c| c.is_ascii_hexdigit())
        }
        "bsonobjectid" => s.len() == 24 && s.chars().all(|c| c.is_ascii_hexdigit()),
        _ => true,
    }
}

fn is_base64(s: &str) -> bool {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(4) {
        return false;
    }
    let pad = b.iter().rev().take_while(|&&c| c == b'=').count();
    pad <= 2
        && b[..b.len() - pad]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
}

fn digits(s: &str, n: usize) -> Option<u32> {
    (s.len() == n && s.bytes().all(|c| c.is_ascii_digit())).then(|| s.parse().ok())?
}

fn is_date(s: &str) -> bool {
    let p: Vec<&str> = s.split('-').collect();
    if p.len() != 3 {
        return false;
    }
    match (digits(p[0], 4), digits(p[1], 2), digits(p[2], 2)) {
        (Some(_), Some(m), Some(d)) => (1..=12).contains(&m) && (1..=31).contains(&d),
        _ => false,
    }
}

fn is_datetime(s: &str) -> bool {
    // Every valid date-time is ASCII, and the byte offsets below are only char boundaries in
    // ASCII text (`2024-01-01T00:00:0é` once sliced inside the `é` and panicked).
    if !s.is_ascii() {
        return false;
    }
    let Some(t) = s.find(['T', 't', ' ']) else {
        return false;
    };
    let (date, rest) = (&s[..t], &s[t + 1..]);
    if !is_date(date) || rest.len() < 8 {
        return false;
    }
    let (hms, mut zone) = rest.split_at(8);
    let hp: Vec<&str> = hms.split(':').collect();
    if hp.len() != 3
        || digits(hp[0], 2).is_none_or(|h| h > 23)
        || digits(hp[1], 2).is_none_or(|m| m > 59)
        || digits(hp[2], 2).is_none_or(|x| x > 60)
    {
        return false;
    }
    if let Some(frac) = zone.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        zone = &frac[n..];
    }
    match zone {
        "Z" | "z" => true,
        z if (z.starts_with('+') || z.starts_with('-')) && z.len() == 6 => {
            digits(&z[1..3], 2).is_some() && &z[3..4] == ":" && digits(&z[4..6], 2).is_some()
        }
        _ => false,
    }
}

fn is_uuid(s: &str, version: Option<char>) -> bool {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    let groups: Vec<&str> = s.split('-').collect();
    let shape_ok = groups.len() == 1
        || (groups.len() == 5 && groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12]));
    if !shape_ok || hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return false;
    }
    match version {
        None => true,
        Some(v) => {
            let variant_ok = v == '3'
                || matches!(
                    hex.as_bytes()[16].to_ascii_lowercase(),
                    b'8' | b'9' | b'a' | b'b'
                );
            hex.as_bytes()[12] as char == v && variant_ok
        }
    }
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

fn is_mac(s: &str) -> bool {
    let hex_group = |g: &str, n: usize| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit());
    for sep in [':', '-'] {
        let g: Vec<&str> = s.split(sep).collect();
        if matches!(g.len(), 6 | 8 | 20) && g.iter().all(|x| hex_group(x, 2)) {
            return true;
        }
    }
    let g: Vec<&str> = s.split('.').collect();
    matches!(g.len(), 3 | 4 | 10) && g.iter().all(|x| hex_group(x, 4))
}

fn is_hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.trim_end_matches('.').split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

// ---------------------------------------------------------------------------------------------
// Embedded resources (schema/objectmeta/validation.go) and list types (schema/listtype).

fn validate_embedded(s: &Node, path: &str, x: &Value, out: &mut Vec<FieldError>) {
    match x {
        Value::Object(m) => {
            if s.embedded {
                validate_embedded_resource(path, m, out);
            }
            for (k, v) in m {
                if let Some(p) = s.properties.get(k) {
                    validate_embedded(p, &child_path(path, k), v, out);
                } else if let Some(add) = s.additional_schema() {
                    validate_embedded(add, &format!("{path}[{k}]"), v, out);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = &s.items {
                for (i, v) in a.iter().enumerate() {
                    validate_embedded(items, &format!("{path}[{i}]"), v, out);
                }
            }
        }
        _ => {}
    }
}

fn validate_embedded_resource(path: &str, m: &Map<String, Value>, out: &mut Vec<FieldError>) {
    use FieldErrorKind::*;
    let av = child_path(path, "apiVersion");
    let kd = child_path(path, "kind");
    if !m.contains_key("apiVersion") {
        out.push(FieldError::new(Required, &av, None, "must not be empty"));
    }
    if !m.contains_key("kind") {
        out.push(FieldError::new(Required, &kd, None, "must not be empty"));
    }
    for (k, v) in m {
        match k.as_str() {
            "apiVersion" => match v.as_str() {
                None => out.push(FieldError::new(
                    Invalid,
                    &av,
                    Some(v.clone()),
                    "must be a string",
                )),
                Some("") => out.push(FieldError::new(
                    Invalid,
                    &av,
                    Some(v.clone()),
                    "must not be empty",
                )),
                Some(s) if s.matches('/').count() > 1 => out.push(FieldError::new(
                    Invalid,
                    &av,
                    Some(v.clone()),
                    &format!("unexpected GroupVersion string: {s}"),
                )),
                Some(_) => {}
            },
            "kind" => match v.as_str() {
                None => out.push(FieldError::new(
                    Invalid,
                    &kd,
                    Some(v.clone()),
                    "must be a string",
                )),
                Some("") => out.push(FieldError::new(
                    Invalid,
                    &kd,
                    Some(v.clone()),
                    "must not be empty",
                )),
                Some(s) => {
                    let errs = is_dns1035_label(&s.to_lowercase());
                    if !errs.is_empty() {
                        out.push(FieldError::new(
                            Invalid,
                            &kd,
                            Some(v.clone()),
                            &format!(
                                "may have mixed case, but should otherwise match: {}",
                                errs.join(",")
                            ),
                        ));
                    }
                }
            },
            "metadata" => {
                let mp = child_path(path, "metadata");
                match v {
                    Value::Object(meta) => {
                        let mut meta = meta.clone();
                        if meta
                            .get("name")
                            .and_then(Value::as_str)
                            .is_none_or(str::is_empty)
                        {
                            meta.insert("name".into(), Value::String("fakename".into()));
                        }
                        let namespaced = meta
                            .get("namespace")
                            .and_then(Value::as_str)
                            .is_some_and(|n| !n.is_empty());
                        out.extend(object_meta_errors(
                            &Value::Object(meta),
                            NameRule::PathSegment,
                            Some(namespaced),
                            &mp,
                        ));
                    }
                    other => out.push(FieldError::new(
                        Invalid,
                        &mp,
                        Some(other.clone()),
                        "json: cannot unmarshal into Go value of type v1.ObjectMeta",
                    )),
                }
            }
            _ => {}
        }
    }
}

fn list_sets_and_maps_object(
    s: &Node,
    path: &str,
    m: &Map<String, Value>,
    out: &mut Vec<FieldError>,
) {
    if let Some(add) = s.additional_schema() {
        for (k, v) in m {
            list_sets_and_maps(add, &format!("{path}[{k}]"), v, out);
        }
    }
    for (k, v) in m {
        if let Some(p) = s.properties.get(k) {
            list_sets_and_maps(p, &child_path(path, k), v, out);
        }
    }
}

fn list_sets_and_maps(s: &Node, path: &str, x: &Value, out: &mut Vec<FieldError>) {
    match x {
        Value::Array(a) => {
            match s.list_type.as_deref() {
                Some("set") => {
                    for i in non_unique(a) {
                        out.push(FieldError::new(
                            FieldErrorKind::Duplicate,
                            &format!("{path}[{i}]"),
                            Some(a[i].clone()),
                            "",
                        ));
                    }
                }
                Some("map") => validate_list_map(s, path, a, out),
                _ => {}
            }
            if let Some(items) = &s.items {
                for (i, v) in a.iter().enumerate() {
                    list_sets_and_maps(items, &format!("{path}[{i}]"), v, out);
                }
            }
        }
        Value::Object(m) => list_sets_and_maps_object(s, path, m, out),
        _ => {}
    }
}

/// The indices of second occurrences (only the first repeat of each value is reported).
fn non_unique(a: &[Value]) -> Vec<usize> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    let mut out = Vec::new();
    for (i, x) in a.iter().enumerate() {
        // Scalars compare as Go interface values (int64 1 != float64 1); compounds as JSON text.
        let key = match x {
            Value::Object(_) | Value::Array(_) => format!("c{}", go_json(x)),
            Value::Number(n) if n.is_f64() => format!("f{}", go_json(x)),
            other => format!("s{}", go_json(other)),
        };
        match seen.iter_mut().find(|(k, _)| *k == key) {
            Some((_, times)) => {
                *times += 1;
                if *times == 2 {
                    out.push(i);
                }
            }
            None => seen.push((key, 1)),
        }
    }
    out
}

fn validate_list_map(s: &Node, path: &str, a: &[Value], out: &mut Vec<FieldError>) {
    for (i, x) in a.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            out.push(FieldError::new(
                FieldErrorKind::Invalid,
                &format!("{path}[{i}]"),
                Some(x.clone()),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    if a.len() <= 1 {
        return;
    }
    let keys: Vec<Value> = a
        .iter()
        .map(|x| {
            let mut key = Map::new();
            if let Value::Object(o) = x {
                for k in &s.list_map_keys {
                    if let Some(v) = o.get(k) {
                        key.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(key)
        })
        .collect();
    // With one key Go compares the bare key values (scalars by type); the reported value is the
    // same one-entry map either way.
    let compared: Vec<Value> = if s.list_map_keys.len() == 1 {
        let k = &s.list_map_keys[0];
        keys.iter()
            .map(|m| match m.get(k) {
                Some(v) => v.clone(),
                // An absent key is its own marker value, distinct from any JSON value.
                None => Value::Array(vec![Value::String("\u{0}unspecified".into())]),
            })
            .collect()
    } else {
        keys.clone()
    };
    for i in non_unique(&compared) {
        out.push(FieldError::new(
            FieldErrorKind::Duplicate,
            &format!("{path}[{i}]"),
            Some(keys[i].clone()),
            "",
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// ObjectMeta validation (apimachinery pkg/api/validation/objectmeta.go).

const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// `validation.RegexError`; note Go's double space before each " or ".
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let ex: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{fmt}')",
        ex.join(" or ")
    )
}

fn is_label_chars(s: &str, first: fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && first(b[0])
        && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn dns1123_label_ok(s: &str) -> bool {
    is_label_chars(s, |c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

fn dns1123_subdomain_ok(s: &str) -> bool {
    s.split('.').all(dns1123_label_ok)
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `IsDNS1123Subdomain`.
pub fn is_dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !dns1123_subdomain_ok(s) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `IsDNS1123Label`.
pub fn is_dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !dns1123_label_ok(s) {
        if dns1123_subdomain_ok(s) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsDNS1035Label`.
pub fn is_dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !is_label_chars(s, |c| c.is_ascii_lowercase()) {
        errs.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            "[a-z]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "abc-123"],
        ));
    }
    errs
}

fn qualified_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `IsQualifiedName` (label keys, annotation keys, finalizers).
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [n] => *n,
        [prefix, n] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *n
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !qualified_part_ok(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !value.is_empty() && !qualified_part_ok(value) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

fn mask_trailing_dash(name: &str) -> String {
    // As apimachinery does: drops two bytes and appends "a" (it only needs a valid ending).
    if name.len() > 1 && name.ends_with('-') {
        let cut = name.len() - 2;
        match name.get(..cut) {
            Some(head) => format!("{head}a"),
            None => "a".into(),
        }
    } else {
        name.to_string()
    }
}

fn name_errors(rule: NameRule, name: &str, prefix: bool) -> Vec<String> {
    if rule == NameRule::PathSegment {
        if !prefix {
            for bad in [".", ".."] {
                if name == bad {
                    return vec![format!("may not be '{bad}'")];
                }
            }
        }
        return ["/", "%"]
            .iter()
            .filter(|c| name.contains(*c))
            .map(|c| format!("may not contain '{c}'"))
            .collect();
    }
    let n = if prefix {
        mask_trailing_dash(name)
    } else {
        name.to_string()
    };
    match rule {
        NameRule::Dns1123Subdomain => is_dns1123_subdomain(&n),
        NameRule::Dns1123Label => is_dns1123_label(&n),
        _ => is_dns1035_label(&n),
    }
}

fn str_map(v: Option<&Value>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = match v {
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect(),
        _ => Vec::new(),
    };
    out.sort();
    out
}

fn object_meta_errors(
    meta: &Value,
    rule: NameRule,
    namespaced: Option<bool>,
    fld: &str,
) -> Vec<FieldError> {
    use FieldErrorKind::*;
    let mut errs = Vec::new();
    let at = |k: &str| format!("{fld}.{k}");
    let get_str = |k: &str| meta.get(k).and_then(Value::as_str).unwrap_or_default();
    let generate_name = get_str("generateName");
    if !generate_name.is_empty() {
        for m in name_errors(rule, generate_name, true) {
            errs.push(FieldError::new(
                Invalid,
                &at("generateName"),
                Some(generate_name.into()),
                &m,
            ));
        }
    }
    let name = get_str("name");
    if name.is_empty() {
        if generate_name.is_empty() {
            errs.push(FieldError::new(
                Required,
                &at("name"),
                None,
                "name or generateName is required",
            ));
        }
    } else {
        for m in name_errors(rule, name, false) {
            errs.push(FieldError::new(Invalid, &at("name"), Some(name.into()), &m));
        }
    }
    let namespace = get_str("namespace");
    match namespaced {
        Some(true) if namespace.is_empty() => {
            errs.push(FieldError::new(Required, &at("namespace"), None, ""))
        }
        Some(true) => {
            for m in is_dns1123_label(namespace) {
                errs.push(FieldError::new(
                    Invalid,
                    &at("namespace"),
                    Some(namespace.into()),
                    &m,
                ));
            }
        }
        Some(false) if !namespace.is_empty() => errs.push(FieldError::new(
            Forbidden,
            &at("namespace"),
            None,
            "not allowed on this type",
        )),
        _ => {}
    }
    if let Some(g) = meta.get("generation").and_then(Value::as_i64)
        && g < 0
    {
        errs.push(FieldError::new(
            Invalid,
            &at("generation"),
            Some(g.into()),
            "must be greater than or equal to 0",
        ));
    }
    for (k, v) in str_map(meta.get("labels")) {
        for m in is_qualified_name(&k) {
            errs.push(FieldError::new(
                Invalid,
                &at("labels"),
                Some(k.clone().into()),
                &m,
            ));
        }
        for m in is_valid_label_value(&v) {
            errs.push(FieldError::new(
                Invalid,
                &at("labels"),
                Some(v.clone().into()),
                &m,
            ));
        }
    }
    let annotations = str_map(meta.get("annotations"));
    for (k, _) in &annotations {
        for m in is_qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::new(
                Invalid,
                &at("annotations"),
                Some(k.clone().into()),
                &m,
            ));
        }
    }
    let total: usize = annotations.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::new(
            TooLong,
            &at("annotations"),
            None,
            &format!("may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
        ));
    }
    if let Some(Value::Array(refs)) = meta.get("ownerReferences") {
        let fp = at("ownerReferences");
        for r in refs {
            let s = |k: &str| {
                r.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let api_version = s("apiVersion");
            let version = match api_version.split('/').collect::<Vec<_>>().as_slice() {
                [v] => v.to_string(),
                [_, v] => v.to_string(),
                _ => String::new(),
            };
            if version.is_empty() {
                errs.push(FieldError::new(
                    Invalid,
                    &format!("{fp}.apiVersion"),
                    Some(api_version.into()),
                    "version must not be empty",
                ));
            }
            for (k, what) in [("kind", "kind"), ("name", "name"), ("uid", "uid")] {
                if s(k).is_empty() {
                    errs.push(FieldError::new(
                        Invalid,
                        &format!("{fp}.{k}"),
                        Some("".into()),
                        &format!("{what} must not be empty"),
                    ));
                }
            }
        }
    }
    if let Some(Value::Array(fins)) = meta.get("finalizers") {
        let fp = at("finalizers");
        for f in fins.iter().filter_map(Value::as_str) {
            for m in is_qualified_name(f) {
                errs.push(FieldError::new(Invalid, &fp, Some(f.into()), &m));
            }
        }
    }
    errs
}

/// The metadata checks every kind gets on create (`ValidateObjectMetaAccessor`, without the
/// namespace checks, which depend on scope): name (required unless generateName), name format,
/// generation, labels, annotations (keys and total size), ownerReferences, finalizers.
pub fn validate_object_meta(meta: &Value, rule: NameRule) -> Vec<FieldError> {
    object_meta_errors(meta, rule, None, "metadata")
}

/// As [`validate_object_meta`], plus the namespace rule for the resource's scope: required (and a
/// DNS-1123 label) when namespaced, forbidden when cluster-scoped.
pub fn validate_object_meta_scoped(
    meta: &Value,
    rule: NameRule,
    namespaced: bool,
) -> Vec<FieldError> {
    object_meta_errors(meta, rule, Some(namespaced), "metadata")
}

// ---------------------------------------------------------------------------------------------
// Go value rendering, as field.Error and kube-openapi print values.

/// `strconv.Quote`: how Go quotes strings in Kubernetes messages.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn number_v(n: &serde_json::Number) -> String {
    match n.as_i64() {
        Some(i) => i.to_string(),
        None => go_float(n.as_f64().unwrap_or(f64::NAN)),
    }
}

/// Go's `%v` of a decoded JSON value (used in kube-openapi's enum message).
fn go_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number_v(n),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_v).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{k}:{}", go_v(&m[k.as_str()])))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// Go's `%#v` of a decoded JSON value (nested in field.Error's fallback rendering).
fn go_sharp_v(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number_v(n),
        Value::String(s) => go_quote(s),
        Value::Array(a) => format!(
            "[]interface {{}}{{{}}}",
            a.iter().map(go_sharp_v).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", go_quote(k), go_sharp_v(&m[k.as_str()])))
                .collect();
            format!("map[string]interface {{}}{{{}}}", parts.join(", "))
        }
    }
}

/// `json.Marshal` of a decoded JSON value (sorted keys, floats without a trailing `.0`).
fn go_json(v: &Value) -> String {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => {
                let f = n.as_f64().unwrap_or(0.0);
                if is_json_integer(f) {
                    format!("{f:.0}")
                } else {
                    f.to_string()
                }
            }
        },
        Value::Array(a) => format!("[{}]", a.iter().map(go_json).collect::<Vec<_>>().join(",")),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| {
                    format!(
                        "{}:{}",
                        Value::String((*k).clone()),
                        go_json(&m[k.as_str()])
                    )
                })
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        other => other.to_string(),
    }
}

/// How field.Error renders a bad value.
fn render_bad_value(v: &Value) -> String {
    match v {
        Value::Null => go_quote("null"),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number_v(n),
        Value::String(s) => go_quote(s),
        other => go_sharp_v(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job_schema() -> StructuralSchema {
        StructuralSchema::compile(&json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["tasks"],
                    "properties": {
                        "cleanPodPolicy": {"type": "string", "enum": ["Running", "All", "None"], "default": "Running"},
                        "priority": {"type": "string", "nullable": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 5}},
                        "tasks": {
                            "type": "array",
                            "maxItems": 3,
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {
                                "type": "object",
                                "properties": {
                                    "name": {"type": "string", "minLength": 2},
                                    "type": {"type": "string", "default": "none"},
                                    "replicas": {"type": "integer", "format": "int32", "minimum": 1, "default": 1},
                                    "ratio": {"type": "number", "maximum": 1.5, "exclusiveMaximum": true},
                                    "port": {"x-kubernetes-int-or-string": true},
                                    "opts": {"type": "object", "properties": {"a": {"type": "integer", "default": 7}}, "default": {}},
                                    "template": {
                                        "type": "object",
                                        "x-kubernetes-embedded-resource": true,
                                        "x-kubernetes-preserve-unknown-fields": true
                                    }
                                }
                            }
                        },
                        "ids": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                },
                "status": {"type": "object", "properties": {"phase": {"type": "string", "enum": ["A"]}}}
            }
        }))
        .expect("compiles")
    }

    fn msgs(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn brief_messages() {
        let s = job_schema();
        let errs =
            s.validate(&json!({"spec": {"cleanPodPolicy": "Bad", "tasks": [{"replicas": 0}]}}));
        assert_eq!(
            msgs(&errs),
            vec![
                r#"spec.cleanPodPolicy: Unsupported value: "Bad": supported values: "Running", "All", "None""#,
                "spec.tasks[0].replicas: Invalid value: 0: spec.tasks[0].replicas in body should be greater than or equal to 1",
            ]
        );
        assert_eq!(errs[0].kind.reason(), "FieldValueNotSupported");
        let errs = s.validate(&json!({"spec": {}}));
        assert_eq!(msgs(&errs), vec!["spec.tasks: Required value"]);
        assert_eq!(errs[0].kind, FieldErrorKind::Required);
        // kube-openapi reports the JSON type name as the bad value, not the value itself.
        let errs = s.validate(&json!({"spec": {"tasks": [{"replicas": "x"}]}}));
        assert_eq!(
            msgs(&errs),
            vec![
                r#"spec.tasks[0].replicas: Invalid value: "string": spec.tasks[0].replicas in body must be of type integer: "string""#
            ]
        );
        assert_eq!(errs[0].kind.reason(), "FieldValueTypeInvalid");
    }

    #[test]
    fn numbers_strings_lists() {
        let s = job_schema();
        let errs = s.validate(&json!({"spec": {"tasks": [
            {"name": "a", "ratio": 1.5, "replicas": 2.0},
            {"name": "bb", "replicas": 1.5},
            {"name": "cc"}, {"name": "dd"}
        ], "labels": {"k": "toolong"}}}));
        assert_eq!(
            msgs(&errs),
            vec![
                "spec.labels.k: Too long: may not be more than 5 bytes",
                r#"spec.tasks[0].name: Invalid value: "a": spec.tasks[0].name in body should be at least 2 chars long"#,
                "spec.tasks[0].ratio: Invalid value: 1.5: spec.tasks[0].ratio in body should be less than 1.5",
                r#"spec.tasks[1].replicas: Invalid value: "number": spec.tasks[1].replicas in body must be of type integer: "number""#,
                "spec.tasks: Too many: 4: must have at most 3 items",
            ]
        );
    }

    #[test]
    fn int_or_string_and_null() {
        let s = job_schema();
        assert!(s.validate(&json!({"spec": {"tasks": [{"name": "aa", "port": 80}, {"name": "bb", "port": "http"}]}})).is_empty());
        let errs = s.validate(&json!({"spec": {"tasks": [{"port": true}]}}));
        assert_eq!(
            msgs(&errs),
            vec![
                r#"spec.tasks[0].port: Invalid value: "boolean": spec.tasks[0].port in body must be of type integer,string: "boolean""#
            ]
        );
        // nullable accepts null; a non-nullable null is an error unless pruned first.
        assert!(
            s.validate(&json!({"spec": {"tasks": [], "priority": null}}))
                .is_empty()
        );
        let mut obj = json!({"spec": {"tasks": [], "labels": null, "cleanPodPolicy": null}});
        let errs = s.validate(&obj);
        assert_eq!(
            msgs(&errs)[0],
            r#"spec.cleanPodPolicy: Invalid value: "null": spec.cleanPodPolicy in body must be of type string: "null""#
        );
        assert!(s.prune(&mut obj).is_empty());
        // labels (no default) is dropped; cleanPodPolicy keeps its null for defaulting.
        assert_eq!(obj, json!({"spec": {"tasks": [], "cleanPodPolicy": null}}));
        s.apply_defaults(&mut obj);
        assert_eq!(obj["spec"]["cleanPodPolicy"], "Running");
        assert!(s.validate(&obj).is_empty());
    }

    #[test]
    fn pruning_paths() {
        let s = job_schema();
        let mut obj = json!({
            "apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "bogus": 1},
            "foo": 1,
            "spec": {"bar": {"x": 1}, "tasks": [{"name": "aa", "zzz": true,
                "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "junk": 1}, "spec": {"any": 1}}}],
                "extra": {"kept": {"deep": 1}}},
            "status": {"phase": "A", "other": 2}
        });
        let paths = s.prune(&mut obj);
        assert_eq!(
            paths,
            vec![
                "foo",
                "spec.bar",
                "spec.tasks[0].template.metadata.junk",
                "spec.tasks[0].zzz",
                "status.other"
            ]
        );
        assert_eq!(obj["metadata"]["bogus"], 1, "root metadata is never pruned");
        assert_eq!(obj["spec"]["extra"]["kept"]["deep"], 1);
        assert_eq!(obj["spec"]["tasks"][0]["template"]["spec"]["any"], 1);
        assert!(obj.get("foo").is_none());
    }

    #[test]
    fn defaults_in_arrays_maps_and_default_objects() {
        let s = StructuralSchema::compile(&json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "tasks": {"type": "array", "items": {"type": "object", "properties": {
                        "replicas": {"type": "integer", "default": 1},
                        "opts": {"type": "object", "default": {"junk": 1}, "properties": {"a": {"type": "integer", "default": 7}}}
                    }}},
                    "byName": {"type": "object", "additionalProperties": {"type": "object", "properties": {"n": {"type": "integer", "default": 3}}}}
                }}
            }
        }))
        .unwrap();
        let mut obj = json!({"spec": {"tasks": [{}, {"replicas": 4, "opts": {"a": 1}}], "byName": {"x": {}}}});
        s.apply_defaults(&mut obj);
        assert_eq!(
            obj,
            json!({"spec": {"tasks": [{"replicas": 1, "opts": {"a": 7}}, {"replicas": 4, "opts": {"a": 1}}], "byName": {"x": {"n": 3}}}})
        );
    }

    #[test]
    fn list_map_and_set_duplicates() {
        let s = job_schema();
        let errs = s.validate(&json!({"spec": {"tasks": [{"name": "aa"}, {"name": "aa"}, {}], "ids": ["a", "b", "a", "a"]}}));
        assert_eq!(
            msgs(&errs),
            vec![
                r#"spec.ids[2]: Duplicate value: "a""#,
                r#"spec.tasks[1]: Duplicate value: map[string]interface {}{"name":"aa"}"#,
            ]
        );
        assert_eq!(errs[0].kind.reason(), "FieldValueDuplicate");
        let multi = StructuralSchema::compile(&json!({"type": "object", "properties": {"l": {
            "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["a", "b"],
            "items": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}}}}))
        .unwrap();
        let errs = multi.validate(
            &json!({"l": [{"a": "x", "b": 1}, {"a": "x", "b": 2}, {"b": 1, "a": "x"}, {}, {}]}),
        );
        assert_eq!(
            msgs(&errs),
            vec![
                r#"l[2]: Duplicate value: map[string]interface {}{"a":"x", "b":1}"#,
                "l[4]: Duplicate value: map[string]interface {}{}",
            ]
        );
    }

    #[test]
    fn embedded_resources() {
        let s = job_schema();
        let errs = s.validate(&json!({"spec": {"tasks": [{"name": "aa", "template": {"kind": "bad_kind", "metadata": {"name": "a/b", "labels": {"x": "-"}}}}]}}));
        let m = msgs(&errs);
        assert_eq!(
            m[0],
            "spec.tasks[0].template.apiVersion: Required value: must not be empty"
        );
        assert!(m[1].starts_with(r#"spec.tasks[0].template.kind: Invalid value: "bad_kind": may have mixed case, but should otherwise match: a DNS-1035 label"#), "{m:?}");
        assert_eq!(
            m[2],
            r#"spec.tasks[0].template.metadata.name: Invalid value: "a/b": may not contain '/'"#
        );
        assert!(m[3].starts_with(r#"spec.tasks[0].template.metadata.labels: Invalid value: "-": a valid label must be an empty string"#));
        assert_eq!(m.len(), 4);
    }

    #[test]
    fn metadata_rules() {
        let errs = validate_object_meta(&json!({}), NameRule::Dns1123Subdomain);
        assert_eq!(
            msgs(&errs),
            vec!["metadata.name: Required value: name or generateName is required"]
        );
        assert!(
            validate_object_meta(&json!({"generateName": "job-"}), NameRule::Dns1123Subdomain)
                .is_empty()
        );
        let errs = validate_object_meta(&json!({"name": "Bad_Name"}), NameRule::Dns1123Subdomain);
        assert_eq!(
            msgs(&errs),
            vec![
                r#"metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#
            ]
        );
        let errs = validate_object_meta(&json!({"name": "a.b"}), NameRule::Dns1123Label);
        assert_eq!(
            msgs(&errs),
            vec![r#"metadata.name: Invalid value: "a.b": must not contain dots"#]
        );
        assert!(validate_object_meta(&json!({"name": "1abc"}), NameRule::Dns1035Label).len() == 1);
        let errs = validate_object_meta(
            &json!({"name": "ok", "labels": {"/x": "v"}, "annotations": {"big": "x".repeat(262_142)}}),
            NameRule::Dns1123Subdomain,
        );
        assert_eq!(
            msgs(&errs),
            vec![
                r#"metadata.labels: Invalid value: "/x": prefix part must be non-empty"#,
                "metadata.annotations: Too long: may not be more than 262144 bytes",
            ]
        );
        assert_eq!(errs[1].kind.reason(), "FieldValueTooLong");
        let errs =
            validate_object_meta_scoped(&json!({"name": "a"}), NameRule::Dns1123Subdomain, true);
        assert_eq!(msgs(&errs), vec!["metadata.namespace: Required value"]);
    }

    #[test]
    fn non_structural_schemas_and_cel() {
        assert!(matches!(
            StructuralSchema::compile(&json!({"type": "object", "properties": {"a": {}}})),
            Err(SchemaError::NotStructural(_))
        ));
        assert!(
            StructuralSchema::compile(
                &json!({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}})
            )
            .is_err()
        );
        let ok = StructuralSchema::compile(&json!({"type": "object", "x-kubernetes-validations": [{"rule": "true"}],
            "properties": {"p": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}}}))
        .unwrap();
        assert!(ok.has_cel());
        assert!(!job_schema().has_cel());
    }

    #[test]
    fn value_rendering_and_composites() {
        let s = StructuralSchema::compile(&json!({"type": "object", "properties": {
            "e": {"type": "integer", "enum": [1, 2]},
            "o": {"type": "object", "properties": {"a": {"type": "string"}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
            "d": {"type": "string", "format": "date-time"}
        }}))
        .unwrap();
        let errs = s.validate(&json!({"e": 3, "o": {}, "d": "yesterday"}));
        assert_eq!(
            msgs(&errs),
            vec![
                r#"d: Invalid value: "yesterday": d in body must be of type date-time: "yesterday""#,
                r#"e: Unsupported value: 3: supported values: "1", "2""#,
                r#"<nil>: Invalid value: "": "o" must validate one and only one schema (oneOf). Found none valid"#,
                "o.a: Required value",
            ]
        );
        assert!(
            s.validate(&json!({"d": "2024-01-02T03:04:05Z", "o": {"a": "x"}}))
                .is_empty()
        );
        let e = FieldError::new(
            FieldErrorKind::Invalid,
            "x",
            Some(json!({"b": [1, null], "a": "q"})),
            "bad",
        );
        assert_eq!(
            e.to_string(),
            r#"x: Invalid value: map[string]interface {}{"a":"q", "b":[]interface {}{1, interface {}(nil)}}: bad"#
        );
    }

    #[test]
    fn status_validation_paths() {
        let errs = job_schema().validate_status(&json!({"phase": "B"}));
        assert_eq!(
            msgs(&errs),
            vec![r#"status.phase: Unsupported value: "B": supported values: "A""#]
        );
    }

    /// Format checks run on any string a client sends: never a panic, and a non-ASCII
    /// character never passes a format whose valid values are ASCII.
    mod format_props {
        use super::super::{format_known, format_ok};
        use proptest::prelude::*;

        const FORMATS: [&str; 16] = [
            "byte",
            "date",
            "datetime",
            "uuid",
            "uuid3",
            "uuid4",
            "uuid5",
            "ipv4",
            "ipv6",
            "cidr",
            "mac",
            "hostname",
            "hexcolor",
            "bsonobjectid",
            "password",
            "unknown",
        ];

        proptest! {
            #[test]
            fn any_unicode_string_is_checked_without_a_panic(
                s in "\\PC{0,40}",
                f in proptest::sample::select(FORMATS.to_vec()),
            ) {
                let ok = format_ok(f, &s);
                if ok && format_known(f) && f != "password" {
                    prop_assert!(s.is_ascii(), "{f} accepted {s:?}");
                }
            }

            #[test]
            fn date_times_with_a_character_cut_anywhere_are_refused_not_panicked_on(
                prefix in 0usize..25,
                c in "\\PC",
            ) {
                let valid = "2024-01-01T00:00:00.5+01:00";
                let cut = prefix.min(valid.len());
                let s = format!("{}{c}{}", &valid[..cut], &valid[cut..]);
                let ok = format_ok("datetime", &s);
                if !c.is_ascii() {
                    prop_assert!(!ok, "{s:?}");
                }
            }
        }

        #[test]
        fn the_reported_panic_is_a_refusal() {
            assert!(!format_ok("datetime", "2024-01-01T00:00:0\u{e9}"));
            assert!(!format_ok("datetime", "2024-01-01T00:00:00+1\u{e9}00"));
            assert!(format_ok("datetime", "2024-01-01T00:00:00+01:00"));
        }
    }
}
