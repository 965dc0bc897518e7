//! Decoding of `application/vnd.kubernetes.protobuf` request bodies for the few built-in kinds
//! that kubectl's typed clients write (client-go ≥ 1.31 sends core objects as protobuf and
//! never falls back to JSON): ConfigMap, Secret, Namespace, ServiceAccount and Service, as
//! created by `kubectl create configmap|secret|namespace|serviceaccount|service`.
//!
//! Pure functions: protobuf envelope (`k8s\0` + runtime.Unknown) → JSON `Value`. Field numbers
//! come from the Kubernetes `generated.proto` files. Responses are always JSON (clients accept
//! it). It must not know about HTTP or the store.

use serde_json::{Map, Value, json};

/// How one protobuf field maps to JSON.
#[derive(Clone, Copy)]
enum F {
    Str,
    Int,
    Bool,
    Time,
    Msg(&'static [(u32, &'static str, F)]),
    MapStr,
    MapBytes,
    RepStr,
    RepMsg(&'static [(u32, &'static str, F)]),
    IntOrString,
}

type Schema = &'static [(u32, &'static str, F)];

const OWNER_REF: Schema = &[
    (1, "kind", F::Str),
    (3, "name", F::Str),
    (4, "uid", F::Str),
    (5, "apiVersion", F::Str),
    (6, "controller", F::Bool),
    (7, "blockOwnerDeletion", F::Bool),
];

const OBJECT_META: Schema = &[
    (1, "name", F::Str),
    (2, "generateName", F::Str),
    (3, "namespace", F::Str),
    (5, "uid", F::Str),
    (6, "resourceVersion", F::Str),
    (7, "generation", F::Int),
    (8, "creationTimestamp", F::Time),
    (11, "labels", F::MapStr),
    (12, "annotations", F::MapStr),
    (13, "ownerReferences", F::RepMsg(OWNER_REF)),
    (14, "finalizers", F::RepStr),
];

const CONFIG_MAP: Schema = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "data", F::MapStr),
    (3, "binaryData", F::MapBytes),
    (4, "immutable", F::Bool),
];

const SECRET: Schema = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "data", F::MapBytes),
    (3, "type", F::Str),
    (4, "stringData", F::MapStr),
    (5, "immutable", F::Bool),
];

const NAMESPACE: Schema = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "spec", F::Msg(&[(1, "finalizers", F::RepStr)])),
];

const LOCAL_REF: Schema = &[(1, "name", F::Str)];

const SERVICE_ACCOUNT: Schema = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (3, "imagePullSecrets", F::RepMsg(LOCAL_REF)),
    (4, "automountServiceAccountToken", F::Bool),
];

const SERVICE_PORT: Schema = &[
    (1, "name", F::Str),
    (2, "protocol", F::Str),
    (3, "port", F::Int),
    (4, "targetPort", F::IntOrString),
    (5, "nodePort", F::Int),
    (6, "appProtocol", F::Str),
];

const SERVICE: Schema = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (
        2,
        "spec",
        F::Msg(&[
            (1, "ports", F::RepMsg(SERVICE_PORT)),
            (2, "selector", F::MapStr),
            (3, "clusterIP", F::Str),
            (4, "type", F::Str),
            (5, "externalIPs", F::RepStr),
            (7, "sessionAffinity", F::Str),
            (11, "externalName", F::Str),
            (18, "clusterIPs", F::RepStr),
        ]),
    ),
];

/// Why a protobuf body could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtoError {
    #[error("invalid protobuf body: {0}")]
    Malformed(&'static str),
    #[error("the diorch sandbox cannot decode {0} from protobuf; send application/json")]
    Unsupported(String),
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ProtoError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self
                .buf
                .split_first()
                .ok_or(ProtoError::Malformed("truncated varint"))?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ProtoError::Malformed("varint too long"))
    }

    fn bytes(&mut self) -> Result<&'a [u8], ProtoError> {
        let n = usize::try_from(self.varint()?).map_err(|_| ProtoError::Malformed("length"))?;
        if n > self.buf.len() {
            return Err(ProtoError::Malformed("truncated field"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// Next (field number, wire value); fixed-width values are skipped as `None`.
    fn field(&mut self) -> Result<Option<(u32, Wire<'a>)>, ProtoError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let num = u32::try_from(key >> 3).map_err(|_| ProtoError::Malformed("field number"))?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            2 => Wire::Bytes(self.bytes()?),
            1 => {
                self.skip(8)?;
                Wire::Skipped
            }
            5 => {
                self.skip(4)?;
                Wire::Skipped
            }
            _ => return Err(ProtoError::Malformed("unsupported wire type")),
        };
        Ok(Some((num, wire)))
    }

    fn skip(&mut self, n: usize) -> Result<(), ProtoError> {
        if n > self.buf.len() {
            return Err(ProtoError::Malformed("truncated field"));
        }
        self.buf = &self.buf[n..];
        Ok(())
    }
}

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Skipped,
}

fn text(b: &[u8]) -> Value {
    Value::String(String::from_utf8_lossy(b).into_owned())
}

fn base64(b: &[u8]) -> Value {
    serde_json::to_value(k8s_openapi::ByteString(b.to_vec())).unwrap_or(Value::Null)
}

fn map_entry(b: &[u8], bytes_value: bool) -> Result<(String, Value), ProtoError> {
    let mut r = Reader { buf: b };
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    while let Some((num, w)) = r.field()? {
        if let Wire::Bytes(x) = w {
            match num {
                1 => k = String::from_utf8_lossy(x).into_owned(),
                2 if bytes_value => v = base64(x),
                2 => v = text(x),
                _ => {}
            }
        }
    }
    if bytes_value && v == json!("") {
        v = base64(&[]);
    }
    Ok((k, v))
}

fn time(b: &[u8]) -> Result<Value, ProtoError> {
    let mut r = Reader { buf: b };
    let mut secs = 0i64;
    while let Some((num, w)) = r.field()? {
        if let (1, Wire::Varint(v)) = (num, w) {
            secs = v as i64;
        }
    }
    Ok(jiff::Timestamp::from_second(secs)
        .map(|t| json!(t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()))
        .unwrap_or(Value::Null))
}

fn int_or_string(b: &[u8]) -> Result<Value, ProtoError> {
    let mut r = Reader { buf: b };
    let (mut ty, mut int, mut s) = (0u64, 0i64, String::new());
    while let Some((num, w)) = r.field()? {
        match (num, w) {
            (1, Wire::Varint(v)) => ty = v,
            (2, Wire::Varint(v)) => int = v as i32 as i64,
            (3, Wire::Bytes(x)) => s = String::from_utf8_lossy(x).into_owned(),
            _ => {}
        }
    }
    Ok(if ty == 1 { json!(s) } else { json!(int) })
}

fn message(b: &[u8], schema: Schema) -> Result<Value, ProtoError> {
    let mut out = Map::new();
    let mut r = Reader { buf: b };
    while let Some((num, w)) = r.field()? {
        let Some(&(_, name, kind)) = schema.iter().find(|(n, _, _)| *n == num) else {
            continue;
        };
        let value = match (kind, w) {
            (F::Str, Wire::Bytes(x)) => text(x),
            (F::Int, Wire::Varint(v)) => json!(v as i64),
            (F::Bool, Wire::Varint(v)) => json!(v != 0),
            (F::Time, Wire::Bytes(x)) => time(x)?,
            (F::IntOrString, Wire::Bytes(x)) => int_or_string(x)?,
            (F::Msg(s), Wire::Bytes(x)) => message(x, s)?,
            (F::MapStr | F::MapBytes, Wire::Bytes(x)) => {
                let (k, v) = map_entry(x, matches!(kind, F::MapBytes))?;
                let entry = out.entry(name).or_insert_with(|| json!({}));
                if let Some(m) = entry.as_object_mut() {
                    m.insert(k, v);
                }
                continue;
            }
            (F::RepStr, Wire::Bytes(x)) => {
                push(&mut out, name, text(x));
                continue;
            }
            (F::RepMsg(s), Wire::Bytes(x)) => {
                push(&mut out, name, message(x, s)?);
                continue;
            }
            _ => continue,
        };
        out.insert(name.to_string(), value);
    }
    Ok(Value::Object(out))
}

fn push(out: &mut Map<String, Value>, name: &str, v: Value) {
    let entry = out.entry(name).or_insert_with(|| json!([]));
    if let Some(a) = entry.as_array_mut() {
        a.push(v);
    }
}

/// Decodes a `k8s\0`-prefixed protobuf body into the object's JSON form.
pub fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    let rest = body
        .strip_prefix(b"k8s\x00")
        .ok_or(ProtoError::Malformed("missing k8s magic prefix"))?;
    let mut r = Reader { buf: rest };
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    while let Some((num, w)) = r.field()? {
        match (num, w) {
            (1, Wire::Bytes(tm)) => {
                let mut t = Reader { buf: tm };
                while let Some((n, w)) = t.field()? {
                    match (n, w) {
                        (1, Wire::Bytes(x)) => api_version = String::from_utf8_lossy(x).into(),
                        (2, Wire::Bytes(x)) => kind = String::from_utf8_lossy(x).into(),
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(x)) => raw = x,
            _ => {}
        }
    }
    let schema = match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("v1", "Service") => SERVICE,
        _ => return Err(ProtoError::Unsupported(format!("{api_version}/{kind}"))),
    };
    let mut obj = message(raw, schema)?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(num: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![((num << 3) | 2) as u8, payload.len() as u8];
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn decodes_a_configmap_envelope() {
        let meta = [
            field(1, b"cfg"),
            field(11, &[field(1, b"app"), field(2, b"web")].concat()),
        ]
        .concat();
        let cm = [
            field(1, &meta),
            field(2, &[field(1, b"k"), field(2, b"v")].concat()),
        ]
        .concat();
        let type_meta = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let body = [b"k8s\x00".to_vec(), field(1, &type_meta), field(2, &cm)].concat();
        let obj = decode(&body).unwrap();
        assert_eq!(
            obj,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cfg", "labels": {"app": "web"}}, "data": {"k": "v"}})
        );
        let pod = [
            b"k8s\x00".to_vec(),
            field(1, &[field(1, b"v1"), field(2, b"Pod")].concat()),
        ]
        .concat();
        assert_eq!(decode(&pod), Err(ProtoError::Unsupported("v1/Pod".into())));
    }
}
