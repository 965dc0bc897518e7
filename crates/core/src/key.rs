//! Keys: a namespaced object's identity as one value ([`ObjectKey`]), and the boxed future the
//! core's ports return ([`BoxFuture`]).
//!
//! Owns: those two types. Must not touch: anything else in the core (every module may use
//! this one, so it uses none of them).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;

/// A boxed future that is `Send`, as the trait's methods return (the core has no `futures`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A namespaced object's identity: what `"namespace/name"` strings used to carry.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of an object's metadata (empty strings where a field is unset).
    pub fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> ObjectKey {
        ObjectKey::new(
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        )
    }
}

/// `namespace/name`, as kubectl and the logs write it.
impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Parses what [`Display`](fmt::Display) prints: the namespace is everything before the first
/// `/` (namespaces are DNS labels, so a key always splits back into what made it).
impl FromStr for ObjectKey {
    type Err = NotAKey;

    fn from_str(key: &str) -> Result<ObjectKey, NotAKey> {
        let (namespace, name) = key
            .split_once('/')
            .ok_or_else(|| NotAKey(key.to_string()))?;
        Ok(ObjectKey::new(namespace, name))
    }
}

/// A string that is not `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not namespace/name")]
pub struct NotAKey(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_print_as_namespace_slash_name() {
        let key = ObjectKey::new("ns", "job");
        assert_eq!(key.to_string(), "ns/job");
        let meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            namespace: Some("ns".into()),
            name: Some("job".into()),
            ..Default::default()
        };
        assert_eq!(ObjectKey::of(&meta), key);
        assert_eq!(ObjectKey::of(&Default::default()).to_string(), "/");
    }

    #[test]
    fn object_keys_parse_back_from_what_they_print() {
        for key in [
            ObjectKey::new("ns", "job"),
            ObjectKey::new("", "job"),
            ObjectKey::new("ns", ""),
            ObjectKey::default(),
        ] {
            assert_eq!(key.to_string().parse::<ObjectKey>(), Ok(key));
        }
        // Split at the first slash: the namespace never holds one.
        assert_eq!(
            "ns/a/b".parse::<ObjectKey>(),
            Ok(ObjectKey::new("ns", "a/b"))
        );
        assert_eq!("job".parse::<ObjectKey>(), Err(NotAKey("job".to_string())));
        assert_eq!(
            NotAKey("job".into()).to_string(),
            r#""job" is not namespace/name"#
        );
    }
}
