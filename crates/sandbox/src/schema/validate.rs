//! Schema validation (kube-openapi `pkg/validation/validate`, as apiextensions' validation.go
//! converts it): the type check, anyOf/oneOf/allOf/not, arrays, enums, objects and
//! `validate_node`, which runs them in kube-openapi's fixed order.
//!
//! Must not prune or default; string and number checks are `scalars.rs`.

use serde_json::{Map, Value};

use super::formats::format_known;
use super::node::{Additional, Node, child_path};
use super::render::{go_quote, go_v, is_json_integer};
use super::result::{Code, IN, Kind, OErr, Res, composite, invalid_type, kind_of};
use super::scalars::{validate_format, validate_number, validate_string};

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

/// An array's items or an object's properties against the schema's minimum and maximum: the
/// same two checks and messages, only the unit and the too-many code differ.
struct Count {
    count: usize,
    min: Option<i64>,
    max: Option<i64>,
    unit: &'static str,
    too_many: Code,
}

impl Count {
    fn check(self, res: &mut Res, path: &str) {
        let Count {
            count,
            min,
            max,
            unit,
            too_many,
        } = self;
        let count = count as i64;
        if let Some(min) = min
            && count < min
        {
            res.add(OErr::new(
                Code::Other,
                path,
                Some(Value::from(count)),
                format!("{path} in {IN} should have at least {min} {unit}"),
            ));
        }
        if let Some(max) = max
            && count > max
        {
            let mut e = OErr::new(
                too_many,
                path,
                Some(Value::from(count)),
                format!("{path} in {IN} should have at most {max} {unit}"),
            );
            e.valid = Some(max);
            res.add(e);
        }
    }
}

fn validate_slice(n: &Node, path: &str, a: &[Value]) -> Res {
    let mut res = Res::default();
    if let Some(items) = &n.items {
        for (i, v) in a.iter().enumerate() {
            res.merge(validate_node(items, &format!("{path}[{i}]"), v));
        }
    }
    let size = Count {
        count: a.len(),
        min: n.min_items,
        max: n.max_items,
        unit: "items",
        too_many: Code::MaxItems,
    };
    size.check(&mut res, path);
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
    let num = Count {
        count: m.len(),
        min: n.min_properties,
        max: n.max_properties,
        unit: "properties",
        too_many: Code::TooManyProperties,
    };
    num.check(&mut res, path);
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
pub(super) fn validate_node(n: &Node, path: &str, data: &Value) -> Res {
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
