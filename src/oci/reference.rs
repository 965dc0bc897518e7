//! OCI references (`registry.example:5000/policies/fair:v1@sha256:…`), parsed and validated
//! before any network I/O, in the distribution spec's grammar.
//!
//! Owns: the grammar and its bounds. Must not touch: the network.

use std::fmt;
use std::str::FromStr;

/// The registry a reference without a host names, as Docker resolves it.
pub const DOCKER_HUB: &str = "docker.io";
/// Where Docker Hub's registry API is served.
const DOCKER_HUB_API: &str = "registry-1.docker.io";
/// Longest reference accepted (the distribution spec caps a repository name at 255).
pub const MAX_REFERENCE_LEN: usize = 512;
const MAX_REPOSITORY_LEN: usize = 255;
const MAX_TAG_LEN: usize = 128;

/// A `sha256:<64 lowercase hex>` digest: the only algorithm accepted (the registries and tools
/// platform teams use all write sha256; a weaker one must not be a way around verification).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    pub fn of(bytes: &[u8]) -> Digest {
        use sha2::Digest as _;
        Digest(sha2::Sha256::digest(bytes).into())
    }

    /// The 64 hex digits alone.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl FromStr for Digest {
    type Err = ReferenceError;
    fn from_str(s: &str) -> Result<Digest, ReferenceError> {
        let bad = || ReferenceError(format!("digest {s:.80?} is not sha256:<64 lowercase hex>"));
        let hex = s.strip_prefix("sha256:").ok_or_else(bad)?;
        if hex.len() != 64
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Digest(out))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid OCI reference: {0}")]
pub struct ReferenceError(String);

/// A parsed reference: a registry, a repository, and a tag or a digest (a digest wins when
/// both are given, as with Docker: the tag is then only a label).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `host[:port]` as written (`docker.io` when none was).
    pub registry: String,
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<Digest>,
}

impl Reference {
    /// The host the registry API is served on (Docker Hub's differs from its name).
    pub fn api_host(&self) -> &str {
        if self.registry == DOCKER_HUB {
            DOCKER_HUB_API
        } else {
            &self.registry
        }
    }

    /// What to ask the registry for: the digest when pinned, else the tag (`latest` if none).
    pub fn manifest_reference(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".to_string(),
        }
    }

    /// The same repository at `digest` (what a tag resolved to).
    pub fn pinned(&self, digest: Digest) -> Reference {
        Reference {
            digest: Some(digest),
            ..self.clone()
        }
    }

    /// The same repository at `tag`, no digest.
    pub fn with_tag(&self, tag: &str) -> Reference {
        Reference {
            tag: Some(tag.to_string()),
            digest: None,
            ..self.clone()
        }
    }

    /// `registry/repository`, what cosign's payload names as the docker-reference.
    pub fn repository_path(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// One path component: `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
fn valid_component(c: &str) -> bool {
    let b = c.as_bytes();
    if b.is_empty() || !is_alnum(b[0]) || !is_alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if is_alnum(b[i]) {
            i += 1;
            continue;
        }
        // A separator: `.`, `_`, `__` or a run of `-`, always followed by an alphanumeric.
        let sep = match b[i] {
            b'.' => 1,
            b'_' if b.get(i + 1) == Some(&b'_') => 2,
            b'_' => 1,
            b'-' => b[i..].iter().take_while(|&&c| c == b'-').count(),
            _ => return false,
        };
        i += sep;
        if !b.get(i).copied().is_some_and(is_alnum) {
            return false;
        }
    }
    true
}

/// `host[:port]`: DNS labels or an IPv4 address, an optional numeric port, or `[v6]:port`.
fn valid_registry(host: &str) -> bool {
    let (name, port) = match host.rsplit_once(':') {
        Some((n, p)) if !n.ends_with(']') || host.starts_with('[') => (n, Some(p)),
        _ => (host, None),
    };
    if let Some(p) = port
        && (p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return false;
    }
    if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        return v6.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        })
}

fn valid_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_TAG_LEN
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

impl FromStr for Reference {
    type Err = ReferenceError;

    fn from_str(s: &str) -> Result<Reference, ReferenceError> {
        let err = |m: String| ReferenceError(m);
        if s.len() > MAX_REFERENCE_LEN {
            return Err(err(format!(
                "{} bytes; at most {MAX_REFERENCE_LEN}",
                s.len()
            )));
        }
        if s.is_empty() || s.trim() != s {
            return Err(err(format!("{s:.80?} is empty or has surrounding spaces")));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((rest, d)) => (rest, Some(d.parse::<Digest>()?)),
            None => (s, None),
        };
        // The tag follows the last ':' after the last '/' (a registry port has a '/' after it).
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => {
                let tag = &rest[last_slash + i + 1..];
                if !valid_tag(tag) {
                    return Err(err(format!(
                        "tag {tag:.80?} is not [A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}"
                    )));
                }
                (&rest[..last_slash + i], Some(tag.to_string()))
            }
            None => (rest, None),
        };
        // Docker's rule: the first component is a registry when it has a '.' or ':' or is
        // `localhost`.
        let (registry, repository) = match name.split_once('/') {
            Some((first, path))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), path.to_string())
            }
            _ if !name.contains('/') => (DOCKER_HUB.to_string(), format!("library/{name}")),
            _ => (DOCKER_HUB.to_string(), name.to_string()),
        };
        if !valid_registry(&registry) {
            return Err(err(format!("registry {registry:.80?} is not host[:port]")));
        }
        if repository.len() > MAX_REPOSITORY_LEN || !repository.split('/').all(valid_component) {
            return Err(err(format!(
                "repository {repository:.80?} is not lowercase path components \
                 ([a-z0-9] joined by '.', '_', '__' or '-')"
            )));
        }
        Ok(Reference {
            registry,
            repository,
            tag,
            digest,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parses_what_tools_write() {
        let r: Reference = format!("registry.example:5000/policies/fair:v1@{D}")
            .parse()
            .unwrap();
        assert_eq!(r.registry, "registry.example:5000");
        assert_eq!(r.repository, "policies/fair");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.digest.unwrap().to_string(), D);
        assert_eq!(r.manifest_reference(), D);
        assert_eq!(
            r.to_string(),
            format!("registry.example:5000/policies/fair:v1@{D}")
        );

        let r: Reference = "127.0.0.1:5000/binpack".parse().unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str()),
            ("127.0.0.1:5000", "binpack")
        );
        assert_eq!(r.manifest_reference(), "latest");

        let r: Reference = "localhost/a/b-c__d.e:1.0-rc_1".parse().unwrap();
        assert_eq!(r.registry, "localhost");
        assert_eq!(r.tag.as_deref(), Some("1.0-rc_1"));

        let r: Reference = "binpack:v2".parse().unwrap();
        assert_eq!(r.registry, DOCKER_HUB);
        assert_eq!(r.repository, "library/binpack");
        assert_eq!(r.api_host(), "registry-1.docker.io");
        let r: Reference = "team/binpack".parse().unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str()),
            (DOCKER_HUB, "team/binpack")
        );

        let r: Reference = "[::1]:5000/p".parse().unwrap();
        assert_eq!(r.registry, "[::1]:5000");
        let pinned = r.pinned(D.parse().unwrap());
        assert_eq!(pinned.to_string(), format!("[::1]:5000/p@{D}"));
    }

    #[test]
    fn refuses_what_is_not_a_reference() {
        for bad in [
            "",
            " r.example/p",
            "r.example/P",
            "r.example/p:",
            "r.example/p:-x",
            "r.example/p@sha256:abc",
            "r.example/p@sha512:0123",
            &format!(
                "r.example/p@{}",
                D.to_uppercase().replace("SHA256", "sha256")
            ),
            "r.example/p//q",
            "r.example/p-",
            "r.example/p..q",
            "r.example/p___q",
            "r.example:port/p",
            "r.example:123456/p",
            "-r.example/p",
            "r.example/p:tag/extra",
            &format!("r.example/{}", "a".repeat(300)),
            &format!("r.example/p:{}", "t".repeat(129)),
            &"x".repeat(MAX_REFERENCE_LEN + 1),
            "r.example/p\n",
            "r.example/p?x=1",
        ] {
            let e = bad.parse::<Reference>();
            assert!(e.is_err(), "{bad:?} parsed: {e:?}");
        }
    }

    #[test]
    fn digests() {
        let d: Digest = D.parse().unwrap();
        assert_eq!(d.to_string(), D);
        assert_eq!(
            Digest::of(b"").to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!("sha256:".parse::<Digest>().is_err());
        assert!(format!("{D}0").parse::<Digest>().is_err());
    }
}
