//! Defaulting (apiextensions-apiserver `pkg/apiserver/schema/defaulting`): fills absent fields and
//! non-nullable nulls from `default`s, in place.
//!
//! Must not prune or validate.

use serde_json::Value;

use super::node::{Additional, Node};

fn non_nullable_null(x: &Value, s: Option<&Node>) -> bool {
    x.is_null() && s.is_some_and(|s| !s.nullable)
}

pub(super) fn default_value(x: &mut Value, s: Option<&Node>) {
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
