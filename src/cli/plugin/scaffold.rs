//! `diorch plugin new`: a new plugin project in Rust, Python or JavaScript that builds with one
//! command (`./build.sh`: its tests on a sample, then the component) and passes as written.
//!
//! Owns: the project templates (`scaffold/`) and writing them out. Must not touch: the SDKs
//! themselves (a project refers to them by path: `plugins/` of a diorch checkout) or the host.

use std::path::{Path, PathBuf};

use crate::plugin::sample;

/// The languages a project can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

/// The two worlds, by the short names the command takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Policy,
    Mutator,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Policy => "policy",
            Kind::Mutator => "mutator",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    #[error(
        "{0:?} is not a valid plugin name: lowercase letters, digits and '-', starting with a \
         letter, at most 50 characters"
    )]
    Name(String),
    #[error("{0} exists and is not empty: choose another --dir, or remove it")]
    Exists(PathBuf),
    #[error(
        "no plugin SDKs at {0}: pass --sdk with the plugins/ folder of a diorch checkout \
         (it holds sdk/, policies/, sdk-python/ and sdk-js/)"
    )]
    NoSdk(PathBuf),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The plugins/ folder of the checkout this binary was built from, if it is still there.
pub fn default_sdk() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins")
}

fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 50
        && b[0].is_ascii_lowercase()
        && !name.ends_with('-')
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

/// The files of a project: (relative path, contents, executable).
fn files(lang: Lang, kind: Kind) -> Vec<(&'static str, &'static str, bool)> {
    match (lang, kind) {
        (Lang::Rust, _) => vec![
            (
                "Cargo.toml",
                include_str!("scaffold/rust/Cargo.toml.tmpl"),
                false,
            ),
            (
                "build.sh",
                include_str!("scaffold/rust/build.sh.tmpl"),
                true,
            ),
            (
                "src/lib.rs",
                match kind {
                    Kind::Policy => include_str!("scaffold/rust/policy.rs.tmpl"),
                    Kind::Mutator => include_str!("scaffold/rust/mutator.rs.tmpl"),
                },
                false,
            ),
        ],
        (Lang::Python, Kind::Policy) => vec![
            (
                "build.sh",
                include_str!("scaffold/python/build.sh.tmpl"),
                true,
            ),
            (
                "app.py",
                include_str!("scaffold/python/policy.py.tmpl"),
                false,
            ),
            (
                "test_app.py",
                include_str!("scaffold/python/test_policy.py.tmpl"),
                false,
            ),
        ],
        (Lang::Python, Kind::Mutator) => vec![
            (
                "build.sh",
                include_str!("scaffold/python/build.sh.tmpl"),
                true,
            ),
            (
                "app.py",
                include_str!("scaffold/python/mutator.py.tmpl"),
                false,
            ),
            (
                "test_app.py",
                include_str!("scaffold/python/test_mutator.py.tmpl"),
                false,
            ),
        ],
        (Lang::Js, Kind::Policy) => vec![
            ("build.sh", include_str!("scaffold/js/build.sh.tmpl"), true),
            (
                "package.json",
                include_str!("scaffold/js/package.json.tmpl"),
                false,
            ),
            (
                "index.js",
                include_str!("scaffold/js/policy.js.tmpl"),
                false,
            ),
            (
                "test/policy.test.js",
                include_str!("scaffold/js/policy.test.js.tmpl"),
                false,
            ),
        ],
        (Lang::Js, Kind::Mutator) => vec![
            ("build.sh", include_str!("scaffold/js/build.sh.tmpl"), true),
            (
                "package.json",
                include_str!("scaffold/js/package.json.tmpl"),
                false,
            ),
            (
                "index.js",
                include_str!("scaffold/js/mutator.js.tmpl"),
                false,
            ),
            (
                "test/mutator.test.js",
                include_str!("scaffold/js/mutator.test.js.tmpl"),
                false,
            ),
        ],
    }
}

/// Writes a new project for plugin `name` into `dir` (created; it must not hold files yet) and
/// returns the paths written. `sdk` is the plugins/ folder of a diorch checkout.
pub fn create(
    name: &str,
    lang: Lang,
    kind: Kind,
    dir: &Path,
    sdk: &Path,
) -> Result<Vec<PathBuf>, ScaffoldError> {
    if !valid_name(name) {
        return Err(ScaffoldError::Name(name.to_string()));
    }
    let sdk_marker = match lang {
        Lang::Rust => "sdk/Cargo.toml",
        Lang::Python => "sdk-python/pyproject.toml",
        Lang::Js => "sdk-js/package.json",
    };
    if !sdk.join(sdk_marker).is_file() {
        return Err(ScaffoldError::NoSdk(sdk.to_path_buf()));
    }
    // An absolute path: the project builds from wherever it is moved to on this machine.
    let sdk = std::fs::canonicalize(sdk).map_err(|_| ScaffoldError::NoSdk(sdk.to_path_buf()))?;
    if dir.read_dir().is_ok_and(|mut d| d.next().is_some()) {
        return Err(ScaffoldError::Exists(dir.to_path_buf()));
    }
    let fill = |t: &str| {
        t.replace("{{name}}", name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{world}}", kind.as_str())
            .replace("{{sdk}}", &sdk.to_string_lossy())
    };
    let mut out: Vec<(PathBuf, String, bool)> = files(lang, kind)
        .into_iter()
        .map(|(path, text, exec)| (dir.join(path), fill(text), exec))
        .collect();
    // The sample the tests run on: the same cluster `diorch plugin run` documents, and a pod
    // as the operator builds it.
    out.push((dir.join("sample.json"), sample_json(), false));
    if kind == Kind::Mutator {
        out.push((dir.join("sample-pod.json"), sample_pod_json(), false));
    }
    let write = |path: &Path, text: &str, exec: bool| -> std::io::Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)?;
        #[cfg(unix)]
        if exec {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
        }
        #[cfg(not(unix))]
        let _ = exec;
        Ok(())
    };
    for (path, text, exec) in &out {
        write(path, text, *exec).map_err(|source| ScaffoldError::Write {
            path: path.clone(),
            source,
        })?;
    }
    Ok(out.into_iter().map(|(p, _, _)| p).collect())
}

fn sample_json() -> String {
    // ok: a Snapshot is plain data (strings, numbers, lists) and always serializes.
    serde_json::to_string_pretty(&sample::snapshot()).unwrap_or_default() + "\n"
}

fn sample_pod_json() -> String {
    let (_, pod) = sample::pod("learner");
    // ok: a Pod built from a JSON literal always serializes.
    serde_json::to_string_pretty(&pod).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels() {
        for ok in ["a", "my-policy", "p2"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "My", "-a", "a-", "a_b", "1a", "a.b", &"a".repeat(51)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn writes_a_project_and_refuses_to_overwrite_one() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p");
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            for kind in [Kind::Policy, Kind::Mutator] {
                let _ = std::fs::remove_dir_all(&dir);
                let written = create("my-plugin", lang, kind, &dir, &default_sdk()).unwrap();
                for path in &written {
                    let text = std::fs::read_to_string(path).unwrap();
                    assert!(
                        !text.contains("{{"),
                        "{}: a placeholder is left",
                        path.display()
                    );
                }
                assert!(dir.join("build.sh").is_file());
                let build = std::fs::read_to_string(dir.join("build.sh")).unwrap();
                assert!(build.contains("my-plugin.wasm"), "{lang:?} {kind:?}");
                assert!(matches!(
                    create("my-plugin", lang, kind, &dir, &default_sdk()),
                    Err(ScaffoldError::Exists(_))
                ));
            }
        }
        assert!(matches!(
            create(
                "x",
                Lang::Rust,
                Kind::Policy,
                &tmp.path().join("q"),
                tmp.path()
            ),
            Err(ScaffoldError::NoSdk(_))
        ));
    }
}
