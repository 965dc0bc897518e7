//! `diorch plugin configmap`'s inline component: whether a component fits a ConfigMap as it is,
//! compressed, or not at all (then a registry), and the inline data it prints, compressed and
//! signed as asked. `plugin check` prints the same advice.
//!
//! Owns: the ConfigMap size cap this command keeps to and its advice. Must not touch: the
//! ConfigMap format (`plugin::spec`) or the operator's limits, which it only reads.

use anyhow::Context as _;

use crate::plugin::spec;

/// Most component bytes a ConfigMap carries inline: the API server refuses objects over
/// ~1 MiB (etcd's 1.5 MiB request limit, less the base64 in JSON and the other fields).
pub const CONFIGMAP_INLINE_CAP: usize = 768 << 10;

/// Whether a component can travel inline in its ConfigMap, and how; else what to do instead.
pub fn inline_advice(bytes: &[u8]) -> String {
    use crate::plugin::compress::{Encoding, encode};
    if bytes.len() <= CONFIGMAP_INLINE_CAP {
        return "fits a ConfigMap as it is".to_string();
    }
    let registry = "push it to a registry (diorch plugin push) and name it with data.image \
                    (plugin configmap --image)";
    if bytes.len() > spec::INLINE_MAX_BYTES {
        return format!(
            "too big for a ConfigMap (over the {} bytes inline data may have once \
             decompressed): {registry}",
            spec::INLINE_MAX_BYTES
        );
    }
    // Both encodings, smallest first: ruzstd's encoder has one fast level, so gzip at its best
    // level packs some components (a 1.7 MiB QuickJS one: 0.62 MB against 0.88 MB) tighter.
    let mut packed: Vec<(usize, &str)> = [(Encoding::Zstd, "zstd"), (Encoding::Gzip, "gzip")]
        .into_iter()
        .filter_map(|(e, name)| encode(e, bytes).ok().map(|p| (p.len(), name)))
        .collect();
    packed.sort();
    match packed.first() {
        Some(&(len, name)) if len <= CONFIGMAP_INLINE_CAP => format!(
            "fits a ConfigMap compressed ({len} bytes with plugin configmap --compress {name})"
        ),
        Some(&(len, name)) => format!(
            "too big for a ConfigMap even compressed ({len} bytes with {name}; at most \
             {CONFIGMAP_INLINE_CAP}): {registry}"
        ),
        None => format!("too big for a ConfigMap as it is: {registry}"),
    }
}

/// The inline component of `plugin configmap`: compressed and signed as asked, or a clear
/// refusal when it cannot fit a ConfigMap, saying what to do instead.
pub(super) fn inline_component(
    file: &std::path::Path,
    compress: Option<crate::plugin::compress::Encoding>,
    sign: Option<&std::path::Path>,
) -> anyhow::Result<spec::ComponentSource> {
    let raw = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    if raw.len() > spec::INLINE_MAX_BYTES {
        anyhow::bail!(
            "{} is {} bytes: over the {} bytes an inline component may have once decompressed; \
             push it to a registry (diorch plugin push) and use --image",
            file.display(),
            raw.len(),
            spec::INLINE_MAX_BYTES
        );
    }
    let encoding = compress.unwrap_or(crate::plugin::compress::Encoding::Identity);
    let bytes = crate::plugin::compress::encode(encoding, &raw)?;
    if bytes.len() > CONFIGMAP_INLINE_CAP {
        let hint = match compress {
            None => {
                "compress it (--compress zstd) or push it to a registry (diorch plugin push) \
                     and use --image"
            }
            Some(_) => "push it to a registry (diorch plugin push) and use --image",
        };
        anyhow::bail!(
            "{} is {} bytes{}: too big for a ConfigMap (at most {CONFIGMAP_INLINE_CAP} here; \
             the API server refuses objects over ~1 MiB); {hint}",
            file.display(),
            bytes.len(),
            compress.map(|c| format!(" with {c}")).unwrap_or_default()
        );
    }
    let signature = match sign {
        Some(key) => {
            let text = std::fs::read(key).with_context(|| format!("reading {}", key.display()))?;
            let key = crate::oci::sign::SigningKey::from_pem(&text)
                .with_context(|| format!("{}", key.display()))?;
            Some(key.sign(&raw)?)
        }
        None => None,
    };
    Ok(spec::ComponentSource::Inline {
        bytes,
        encoding,
        signature,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_says_how_a_component_travels() {
        assert_eq!(inline_advice(&[1; 1000]), "fits a ConfigMap as it is");
        // Compresses well: fits compressed.
        let advice = inline_advice(&vec![7; 4 << 20]);
        assert!(
            advice.starts_with("fits a ConfigMap compressed ("),
            "{advice}"
        );
        // Random-looking bytes do not compress: a registry.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let noise: Vec<u8> = (0..(1 << 20))
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let advice = inline_advice(&noise);
        assert!(
            advice.contains("even compressed") && advice.contains("diorch plugin push"),
            "{advice}"
        );
        let advice = inline_advice(&vec![0; spec::INLINE_MAX_BYTES + 1]);
        assert!(
            advice.contains("over the") && advice.contains("data.image"),
            "{advice}"
        );
    }
}
