//! Parsing an `openAPIV3Schema` into `Node`s, with the structural-schema rules a v1 CRD must meet
//! (apiextensions-apiserver `ValidateStructural`) and the keywords forbidden inside value
//! validations; keeps only the string formats the apiserver checks.
//!
//! Must not look at objects: pruning, defaulting and validation are other files.

use serde_json::{Map, Value};

use super::errors::SchemaError;
use super::node::{Additional, Node, child_path};

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

pub(super) struct Compiler {
    pub(super) errors: Vec<String>,
    pub(super) has_cel: bool,
    pub(super) patterns: bool,
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

    /// The list of strings at `key` (none when absent): list-map keys and required properties.
    fn strings(
        obj: &Map<String, Value>,
        path: &str,
        key: &str,
    ) -> Result<Vec<String>, SchemaError> {
        let Some(list) = obj.get(key) else {
            return Ok(Vec::new());
        };
        let list = list
            .as_array()
            .ok_or_else(|| Self::malformed(&child_path(path, key), "must be a list"))?;
        list.iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| Self::malformed(&child_path(path, key), "must be strings"))
            })
            .collect()
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
    pub(super) fn node(
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
        n.list_map_keys
            .extend(Self::strings(obj, path, "x-kubernetes-list-map-keys")?);
        n.required.extend(Self::strings(obj, path, "required")?);
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
