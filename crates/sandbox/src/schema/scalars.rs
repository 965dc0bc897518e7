//! kube-openapi's string and number validators: length limits, formats, multipleOf, minimum and
//! maximum (exclusive or not), with Go's rendering of the limits.
//!
//! Leaf checks only: must not recurse into nested values.

use std::cmp::Ordering;

use serde_json::Value;

use crate::gofmt::go_float;

use super::formats::format_ok;
use super::node::Node;
use super::render::is_json_integer;
use super::result::{Code, IN, Kind, OErr, Res, invalid_type_data};

pub(super) fn validate_string(n: &Node, path: &str, s: &str) -> Res {
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

pub(super) fn validate_format(n: &Node, path: &str, s: &str) -> Res {
    let Some(f) = n.format.as_deref() else {
        return Res::default();
    };
    if format_ok(&f.replace('-', ""), s) {
        return Res::default();
    }
    Res::err(invalid_type_data(path, f, s))
}

fn num_value(k: Kind) -> Value {
    match k {
        Kind::Int(i) => Value::from(i),
        Kind::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        _ => Value::Null,
    }
}

/// A minimum (`wrong` is `Less`) or maximum (`Greater`) of a number: when `k` is past `limit`,
/// or on it and the bound is `exclusive`, what it should be instead ("greater than or equal to
/// 3"). One rule for both bounds, mirrored by `wrong`.
fn past_bound(k: Kind, limit: f64, exclusive: bool, wrong: Ordering) -> Option<String> {
    let (order, shown) = match k {
        Kind::Int(i) => {
            let m = limit as i64;
            (Some(i.cmp(&m)), m.to_string())
        }
        Kind::Float(f) => (f.partial_cmp(&limit), go_float(limit)),
        _ => return None,
    };
    if order != Some(wrong) && !(exclusive && order == Some(Ordering::Equal)) {
        return None;
    }
    let side = if wrong == Ordering::Less {
        "greater than"
    } else {
        "less than"
    };
    Some(if exclusive {
        format!("{side} {shown}")
    } else {
        format!("{side} or equal to {shown}")
    })
}

pub(super) fn validate_number(n: &Node, path: &str, k: Kind) -> Res {
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
    let bounds = [
        (n.minimum, n.exclusive_minimum, Ordering::Less, &mut minimum),
        (
            n.maximum,
            n.exclusive_maximum,
            Ordering::Greater,
            &mut maximum,
        ),
    ];
    for (limit, exclusive, wrong, errors) in bounds {
        if let Some(limit) = limit
            && let Some(rel) = past_bound(k, limit, exclusive, wrong)
        {
            errors.add(OErr::new(
                Code::Other,
                path,
                Some(val.clone()),
                format!("{path} in {IN} should be {rel}"),
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
