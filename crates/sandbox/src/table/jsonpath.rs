//! The minimal JSONPath of CRD printer columns (`.a.b`, `.a[0].b`, `.a[*].b`, `.a['x.y']`,
//! escaped dots), as the apiserver's CRD table convertor evaluates it.
//!
//! Evaluation only: rendering a match as a cell is `custom.rs`.

use serde_json::Value;

/// Evaluates a printer-column JSONPath (`.a.b`, `.a[0].b`, `.a[*].b`, `.a['x.y']`,
/// `.metadata.labels.x\.y`; surrounding `{}` tolerated). `None` when nothing matches or the
/// path cannot be parsed. A path with `[*]` yields an array of every match; the Table cell
/// uses only the first match, as the apiserver's CRD table convertor does.
pub fn eval_jsonpath(obj: &Value, path: &str) -> Option<Value> {
    let segments = parse_jsonpath(path)?;
    let results = find_results(obj, &segments);
    if segments.iter().any(|s| matches!(s, Segment::All)) {
        if results.is_empty() {
            return None;
        }
        return Some(Value::Array(results.into_iter().cloned().collect()));
    }
    results.first().map(|v| (*v).clone())
}

#[derive(Debug, PartialEq)]
pub(super) enum Segment {
    Field(String),
    Index(i64),
    All,
}

pub(super) fn parse_jsonpath(path: &str) -> Option<Vec<Segment>> {
    let trimmed = path.trim();
    let inner = trimmed
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(trimmed)
        .trim();
    let chars: Vec<char> = inner.chars().collect();
    let mut segments = Vec::new();
    let mut i = 0;
    // A leading `$` is the root, as in `{$.spec}`.
    if chars.first() == Some(&'$') {
        i = 1;
    }
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let mut name = String::new();
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        name.push(chars[i + 1]);
                        i += 2;
                    } else {
                        name.push(chars[i]);
                        i += 1;
                    }
                }
                if name.is_empty() {
                    // `.` alone is the current object; `..` (recursive descent) is unsupported.
                    if i < chars.len() && chars[i] == '.' {
                        return None;
                    }
                    continue;
                }
                segments.push(Segment::Field(name));
            }
            '[' => {
                let close = chars[i..].iter().position(|c| *c == ']')? + i;
                let body: String = chars[i + 1..close].iter().collect();
                let body = body.trim();
                if body == "*" {
                    segments.push(Segment::All);
                } else if let Some(key) = body
                    .strip_prefix('\'')
                    .and_then(|b| b.strip_suffix('\''))
                    .or_else(|| body.strip_prefix('"').and_then(|b| b.strip_suffix('"')))
                {
                    segments.push(Segment::Field(key.to_string()));
                } else {
                    segments.push(Segment::Index(body.parse().ok()?));
                }
                i = close + 1;
            }
            _ => return None,
        }
    }
    Some(segments)
}

pub(super) fn find_results<'a>(obj: &'a Value, segments: &[Segment]) -> Vec<&'a Value> {
    let mut current = vec![obj];
    for segment in segments {
        let mut next = Vec::new();
        for value in current {
            match segment {
                Segment::Field(name) => {
                    if let Some(v) = value.as_object().and_then(|m| m.get(name)) {
                        next.push(v);
                    }
                }
                Segment::Index(idx) => {
                    if let Some(items) = value.as_array() {
                        let len = items.len() as i64;
                        let at = if *idx < 0 { len + idx } else { *idx };
                        if (0..len).contains(&at) {
                            next.extend(items.get(at as usize));
                        }
                    }
                }
                Segment::All => match value {
                    Value::Array(items) => next.extend(items.iter()),
                    Value::Object(map) => next.extend(map.values()),
                    _ => {}
                },
            }
        }
        current = next;
    }
    current
}
