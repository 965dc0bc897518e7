//! Keyed signatures for WebAssembly components stored in OCI registries, compatible with
//! cosign's key-based mode (`cosign sign --key`, `cosign verify --key`, `sign-blob`,
//! `verify-blob`), offline: no transparency log, no Fulcio certificates.
//!
//! Owns: public-key parsing (SPKI PEM: ECDSA P-256 and P-384, Ed25519), signing keys (ECDSA
//! P-256 and Ed25519, unencrypted PKCS#8 or SEC1 PEM), signing and verification of
//! base64 signatures as cosign writes them, and cosign's "simple signing" payload (building it,
//! checking it names the expected manifest digest, the `sha256-<hex>.sig` tag).
//! Must not touch: the network, registries, Kubernetes; callers fetch the signature layer and
//! its annotation and hand the bytes here. Key material is never printed: errors carry short
//! reasons and keys show only their fingerprint.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P384_SHA384_ASN1, EcdsaKeyPair,
    Ed25519KeyPair, KeyPair as _, UnparsedPublicKey,
};
use rustls_pki_types::pem::{self, PemObject as _};
use rustls_pki_types::{PrivatePkcs8KeyDer, PrivateSec1KeyDer, SubjectPublicKeyInfoDer};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use x509_parser::oid_registry::{
    OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_NIST_EC_P384, OID_PKCS1_RSAENCRYPTION,
    OID_PKCS1_RSASSAPSS, OID_SIG_ED25519,
};
use x509_parser::prelude::FromDer as _;
use x509_parser::x509::SubjectPublicKeyInfo;

/// Media type of the layer that carries the simple-signing payload in a `.sig` manifest.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// Layer annotation holding the base64 signature of that payload.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// Key files and Secret values are a few hundred bytes; the cap keeps a wrong file (a binary, a
/// log) from being scanned at length.
const MAX_PEM_BYTES: usize = 64 * 1024;
/// A DER ECDSA P-384 signature is at most 104 bytes (140 in base64); 4 KiB is generous.
const MAX_SIGNATURE_TEXT_BYTES: usize = 4 * 1024;
/// cosign's payloads are about 250 bytes; anything much larger is not one of them.
pub const MAX_PAYLOAD: usize = 64 * 1024;
/// Rotation needs two or three keys at once; a bound keeps verification cost predictable.
const MAX_BUNDLE_KEYS: usize = 16;
/// The only `critical.type` cosign writes and accepts.
const SIMPLE_SIGNING_TYPE: &str = "cosign container image signature";

/// SPKI DER up to the BIT STRING contents for id-ecPublicKey with namedCurve prime256v1; the
/// 65-byte uncompressed point follows.
const SPKI_P256_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
/// SPKI DER up to the BIT STRING contents for Ed25519 (OID 1.3.101.112, no parameters); the
/// 32-byte public key follows.
const SPKI_ED25519_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];
/// PKCS#8 AlgorithmIdentifier for id-ecPublicKey/prime256v1, used to wrap a SEC1 key into the
/// PKCS#8 form ring loads.
const PKCS8_P256_ALGORITHM: [u8; 21] = [
    0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48,
    0xce, 0x3d, 0x03, 0x01, 0x07,
];

/// Why a key, signature or payload was refused. Messages are short and never contain key
/// material or payload dumps; text taken from the input is shortened and sanitized.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("{what} is larger than {limit} bytes")]
    TooLarge { what: &'static str, limit: usize },
    #[error("malformed PEM: {0}")]
    Pem(&'static str),
    #[error("no -----BEGIN {0}----- block found")]
    NoPemBlock(&'static str),
    #[error("expected one PEM block, found {0}")]
    SeveralPemBlocks(usize),
    #[error("expected a {expected} PEM block, found {found}")]
    WrongPemBlock {
        expected: &'static str,
        found: String,
    },
    #[error("a private key was given where a public key (-----BEGIN PUBLIC KEY-----) is expected")]
    PrivateKeyGiven,
    #[error("{found} public keys given, at most {max} are allowed")]
    TooManyKeys { found: usize, max: usize },
    #[error(
        "unsupported key algorithm: {0}; supported are ECDSA P-256 (cosign's default), ECDSA P-384 and Ed25519"
    )]
    UnsupportedAlgorithm(String),
    #[error(
        "unsupported private key: {0}; signing keys must be ECDSA P-256 (cosign's default) or Ed25519"
    )]
    UnsupportedSigningKey(&'static str),
    #[error("invalid key: {0}")]
    InvalidKey(String),
    #[error("{0}")]
    EncryptedKey(&'static str),
    #[error("invalid signature encoding: {0}")]
    SignatureEncoding(&'static str),
    #[error("signature does not verify with key {0}")]
    BadSignature(String),
    #[error("signing failed")]
    Signing,
    #[error("key generation failed")]
    KeyGeneration,
    #[error("invalid manifest digest {0:?}: expected sha256:<64 hex> or sha512:<128 hex>")]
    InvalidDigest(String),
    #[error("malformed simple-signing payload: {0}")]
    Payload(String),
    #[error("simple-signing payload has type {0:?}, expected \"{SIMPLE_SIGNING_TYPE}\"")]
    PayloadType(String),
    #[error("signature is for manifest {signed}, not for {expected}")]
    DigestMismatch { signed: String, expected: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Algorithm {
    EcdsaP256Sha256,
    EcdsaP384Sha384,
    Ed25519,
}

impl Algorithm {
    fn name(self) -> &'static str {
        match self {
            Algorithm::EcdsaP256Sha256 => "ecdsa-p256-sha256",
            Algorithm::EcdsaP384Sha384 => "ecdsa-p384-sha384",
            Algorithm::Ed25519 => "ed25519",
        }
    }
}

/// A verification key: ECDSA P-256 (verified with SHA-256), ECDSA P-384 (SHA-384) or Ed25519,
/// the hash per curve as cosign's default verifier picks it.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    algorithm: Algorithm,
    /// The SubjectPublicKeyInfo DER as given; the fingerprint is over these bytes.
    spki: Vec<u8>,
    /// The uncompressed EC point or the raw Ed25519 key, as ring takes it.
    key: Vec<u8>,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublicKey")
            .field("algorithm", &self.algorithm.name())
            .field("fingerprint", &self.fingerprint())
            .finish()
    }
}

impl PublicKey {
    /// Parses exactly one `-----BEGIN PUBLIC KEY-----` block (SPKI), as `cosign public-key`,
    /// `cosign generate-key-pair` (`cosign.pub`) and `openssl ec -pubout` write it. Text
    /// outside the block is ignored.
    pub fn from_pem(text: &[u8]) -> Result<PublicKey, SignError> {
        let labels = pem_labels(text, "public key PEM")?;
        match labels.len() {
            0 => return Err(SignError::NoPemBlock("PUBLIC KEY")),
            1 => {}
            n => return Err(SignError::SeveralPemBlocks(n)),
        }
        let mut keys = public_keys_from_pem(text, &labels)?;
        keys.pop().ok_or(SignError::NoPemBlock("PUBLIC KEY"))
    }

    /// Parses a SubjectPublicKeyInfo DER.
    fn from_spki_der(der: &[u8]) -> Result<PublicKey, SignError> {
        let (rest, spki) = SubjectPublicKeyInfo::from_der(der)
            .map_err(|_| SignError::InvalidKey("not a DER SubjectPublicKeyInfo".into()))?;
        if !rest.is_empty() {
            return Err(SignError::InvalidKey(
                "trailing bytes after the SubjectPublicKeyInfo".into(),
            ));
        }
        if spki.subject_public_key.unused_bits != 0 {
            return Err(SignError::InvalidKey(
                "public key BIT STRING has unused bits".into(),
            ));
        }
        let oid = &spki.algorithm.algorithm;
        let key: &[u8] = &spki.subject_public_key.data;
        let algorithm = if *oid == OID_KEY_TYPE_EC_PUBLIC_KEY {
            // Only named curves: explicit curve parameters are a known source of confusion
            // attacks, and cosign never writes them.
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok())
                .ok_or_else(|| SignError::InvalidKey("EC key without a named curve".into()))?;
            let (algorithm, point_len) = if curve == OID_EC_P256 {
                (Algorithm::EcdsaP256Sha256, 65)
            } else if curve == OID_NIST_EC_P384 {
                (Algorithm::EcdsaP384Sha384, 97)
            } else {
                let id = curve.to_id_string();
                let name = match id.as_str() {
                    "1.3.132.0.35" => " (P-521)",
                    "1.3.132.0.10" => " (secp256k1)",
                    _ => "",
                };
                return Err(SignError::UnsupportedAlgorithm(format!(
                    "elliptic curve {}{name}",
                    short(&id)
                )));
            };
            // ring verifies only uncompressed points; saying so here beats a bare "does not
            // verify" later.
            if key.len() != point_len || key.first() != Some(&0x04) {
                return Err(SignError::InvalidKey(
                    "EC public key is not an uncompressed point of its curve".into(),
                ));
            }
            algorithm
        } else if *oid == OID_SIG_ED25519 {
            if spki.algorithm.parameters.is_some() {
                return Err(SignError::InvalidKey(
                    "Ed25519 key with algorithm parameters".into(),
                ));
            }
            if key.len() != 32 {
                return Err(SignError::InvalidKey(
                    "Ed25519 public key is not 32 bytes".into(),
                ));
            }
            Algorithm::Ed25519
        } else if *oid == OID_PKCS1_RSAENCRYPTION || *oid == OID_PKCS1_RSASSAPSS {
            return Err(SignError::UnsupportedAlgorithm("RSA".into()));
        } else {
            return Err(SignError::UnsupportedAlgorithm(format!(
                "public key algorithm {}",
                short(&oid.to_id_string())
            )));
        };
        Ok(PublicKey {
            algorithm,
            spki: der.to_vec(),
            key: key.to_vec(),
        })
    }

    /// Verifies `signature_b64` (standard base64 of a DER ECDSA signature or of a raw 64-byte
    /// Ed25519 signature, as `cosign sign-blob` prints and the signature annotation holds) over
    /// `message`. Whitespace, including line breaks from `base64` wrapping, is ignored.
    pub fn verify(&self, message: &[u8], signature_b64: &str) -> Result<(), SignError> {
        if signature_b64.len() > MAX_SIGNATURE_TEXT_BYTES {
            return Err(SignError::TooLarge {
                what: "signature text",
                limit: MAX_SIGNATURE_TEXT_BYTES,
            });
        }
        let compact: String = signature_b64
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        if compact.is_empty() {
            return Err(SignError::SignatureEncoding("empty signature"));
        }
        let signature = STANDARD
            .decode(compact.as_bytes())
            .map_err(|_| SignError::SignatureEncoding("not standard base64"))?;
        let algorithm: &'static dyn ring::signature::VerificationAlgorithm = match self.algorithm {
            Algorithm::EcdsaP256Sha256 => &ECDSA_P256_SHA256_ASN1,
            Algorithm::EcdsaP384Sha384 => &ECDSA_P384_SHA384_ASN1,
            Algorithm::Ed25519 => {
                if signature.len() != 64 {
                    return Err(SignError::SignatureEncoding(
                        "an Ed25519 signature is 64 bytes",
                    ));
                }
                &ring::signature::ED25519
            }
        };
        UnparsedPublicKey::new(algorithm, &self.key)
            .verify(message, &signature)
            .map_err(|_| SignError::BadSignature(self.fingerprint()))
    }

    /// `sha256:<hex>` of the SubjectPublicKeyInfo DER: names the key in status lines and logs
    /// without showing it.
    pub fn fingerprint(&self) -> String {
        format!("sha256:{}", hex(&Sha256::digest(&self.spki)))
    }

    /// `ecdsa-p256-sha256`, `ecdsa-p384-sha384` or `ed25519`.
    pub fn algorithm(&self) -> &'static str {
        self.algorithm.name()
    }

    /// The key as a `-----BEGIN PUBLIC KEY-----` block with 64-character lines.
    pub fn to_pem(&self) -> String {
        pem_encode("PUBLIC KEY", &self.spki)
    }
}

/// Parses every `-----BEGIN PUBLIC KEY-----` block of a file or Secret value holding several
/// keys (rotation: a signature verifying with any one of them is valid). At least one and at
/// most 16 keys; any other block, a private key included, is refused.
pub fn keys_from_pem_bundle(text: &[u8]) -> Result<Vec<PublicKey>, SignError> {
    let labels = pem_labels(text, "public key bundle")?;
    if labels.is_empty() {
        return Err(SignError::NoPemBlock("PUBLIC KEY"));
    }
    if labels.len() > MAX_BUNDLE_KEYS {
        return Err(SignError::TooManyKeys {
            found: labels.len(),
            max: MAX_BUNDLE_KEYS,
        });
    }
    public_keys_from_pem(text, &labels)
}

/// Decodes the PUBLIC KEY blocks of `text`, whose BEGIN labels are `labels`; any other label
/// is refused, so nothing in the text is silently skipped.
fn public_keys_from_pem(text: &[u8], labels: &[String]) -> Result<Vec<PublicKey>, SignError> {
    for label in labels {
        if label.contains("PRIVATE KEY") {
            return Err(SignError::PrivateKeyGiven);
        }
        if label != "PUBLIC KEY" {
            return Err(SignError::WrongPemBlock {
                expected: "PUBLIC KEY",
                found: short(label),
            });
        }
    }
    let mut keys = Vec::with_capacity(labels.len());
    for der in SubjectPublicKeyInfoDer::pem_slice_iter(text) {
        let der = der.map_err(pem_error)?;
        keys.push(PublicKey::from_spki_der(der.as_ref())?);
    }
    // The PEM reader is stricter than the label scan (e.g. about indented BEGIN lines); a
    // block it did not read must not go unnoticed.
    if keys.len() != labels.len() {
        return Err(SignError::Pem("a PUBLIC KEY block could not be read"));
    }
    Ok(keys)
}

enum Signer {
    EcdsaP256(EcdsaKeyPair),
    Ed25519(Ed25519KeyPair),
}

/// A private key for signing: ECDSA P-256 (what [`SigningKey::generate`] makes, cosign's
/// default) or Ed25519.
pub struct SigningKey {
    signer: Signer,
    /// Unencrypted PKCS#8 DER, kept for [`SigningKey::private_pem`].
    pkcs8: Vec<u8>,
    public: PublicKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("algorithm", &self.public.algorithm())
            .field("fingerprint", &self.public.fingerprint())
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A fresh ECDSA P-256 key from the system's random generator.
    pub fn generate() -> Result<SigningKey, SignError> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
            .map_err(|_| SignError::KeyGeneration)?;
        Self::from_pkcs8_der(pkcs8.as_ref())
    }

    /// Loads an unencrypted private key: PKCS#8 `-----BEGIN PRIVATE KEY-----` holding an ECDSA
    /// P-256 or Ed25519 key (`openssl genpkey`, `openssl pkcs8 -topk8 -nocrypt`), or SEC1
    /// `-----BEGIN EC PRIVATE KEY-----` holding a P-256 key (`openssl ecparam -genkey -name
    /// prime256v1`, whose `EC PARAMETERS` block is ignored). Encrypted keys are refused,
    /// cosign's own format included.
    pub fn from_pem(text: &[u8]) -> Result<SigningKey, SignError> {
        let labels = pem_labels(text, "private key PEM")?;
        if let Some(label) = labels.iter().find(|l| l.contains("ENCRYPTED")) {
            return Err(SignError::EncryptedKey(
                if label.contains("SIGSTORE") || label.contains("COSIGN") {
                    "cosign's encrypted private key format is not supported; create a key with \
                     `diorch plugin keygen` or give an unencrypted PKCS#8 key \
                     (-----BEGIN PRIVATE KEY-----)"
                } else {
                    "encrypted private keys are not supported; decrypt it with \
                     `openssl pkcs8 -in key.pem -out plain.pem` (unencrypted PKCS#8) or create one \
                     with `diorch plugin keygen`"
                },
            ));
        }
        // openssl ecparam writes the curve as a separate block before the key; the key itself
        // names its curve, so that block carries nothing we need.
        let keys: Vec<&String> = labels.iter().filter(|l| *l != "EC PARAMETERS").collect();
        let label = match keys.as_slice() {
            [] => return Err(SignError::NoPemBlock("PRIVATE KEY")),
            [label] => label.as_str(),
            several => return Err(SignError::SeveralPemBlocks(several.len())),
        };
        match label {
            "PRIVATE KEY" => {
                let der = PrivatePkcs8KeyDer::from_pem_slice(text).map_err(pem_error)?;
                Self::from_pkcs8_der(der.secret_pkcs8_der())
            }
            "EC PRIVATE KEY" => {
                let der = PrivateSec1KeyDer::from_pem_slice(text).map_err(pem_error)?;
                let pkcs8 = sec1_p256_to_pkcs8(der.secret_sec1_der())?;
                // ring refuses a curve other than P-256 named inside the key as the wrong
                // algorithm, which surfaces as "neither P-256 nor Ed25519"; say what it is.
                Self::from_pkcs8_der(&pkcs8).map_err(|e| match e {
                    SignError::UnsupportedSigningKey(_) => {
                        SignError::UnsupportedSigningKey("an EC key on a curve other than P-256")
                    }
                    other => other,
                })
            }
            "RSA PRIVATE KEY" => Err(SignError::UnsupportedSigningKey("RSA")),
            "PUBLIC KEY" => Err(SignError::WrongPemBlock {
                expected: "PRIVATE KEY",
                found: "a PUBLIC KEY (the private key is needed to sign)".into(),
            }),
            other => Err(SignError::WrongPemBlock {
                expected: "PRIVATE KEY",
                found: short(other),
            }),
        }
    }

    fn from_pkcs8_der(pkcs8: &[u8]) -> Result<SigningKey, SignError> {
        let rng = SystemRandom::new();
        let (signer, spki) =
            match EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8, &rng) {
                Ok(pair) => {
                    let spki = [&SPKI_P256_PREFIX[..], pair.public_key().as_ref()].concat();
                    (Signer::EcdsaP256(pair), spki)
                }
                // ring says WrongAlgorithm when the AlgorithmIdentifier is not P-256; only then
                // is Ed25519 worth trying, otherwise its message would hide the real problem.
                Err(e) if e.to_string() == "WrongAlgorithm" => {
                    // v1 too: `openssl genpkey -algorithm ED25519` writes PKCS#8 v1 (no public
                    // key), from which ring derives the public key.
                    match Ed25519KeyPair::from_pkcs8_maybe_unchecked(pkcs8) {
                        Ok(pair) => {
                            let spki =
                                [&SPKI_ED25519_PREFIX[..], pair.public_key().as_ref()].concat();
                            (Signer::Ed25519(pair), spki)
                        }
                        Err(e) if e.to_string() == "WrongAlgorithm" => {
                            return Err(SignError::UnsupportedSigningKey(
                                "neither ECDSA P-256 nor Ed25519",
                            ));
                        }
                        Err(e) => {
                            return Err(SignError::InvalidKey(format!(
                                "Ed25519 key rejected: {e}"
                            )));
                        }
                    }
                }
                Err(e) => {
                    return Err(SignError::InvalidKey(format!("P-256 key rejected: {e}")));
                }
            };
        Ok(SigningKey {
            signer,
            pkcs8: pkcs8.to_vec(),
            public: PublicKey::from_spki_der(&spki)?,
        })
    }

    /// The key as unencrypted PKCS#8 `-----BEGIN PRIVATE KEY-----` text. This is the secret:
    /// write it only to a file with owner-only permissions or to a Secret.
    pub fn private_pem(&self) -> String {
        pem_encode("PRIVATE KEY", &self.pkcs8)
    }

    /// The public key as `-----BEGIN PUBLIC KEY-----` (SPKI) text, what `cosign.pub` holds.
    pub fn public_pem(&self) -> String {
        self.public.to_pem()
    }

    pub fn public_key(&self) -> PublicKey {
        self.public.clone()
    }

    /// Signs `message` and returns standard base64 of the DER ECDSA signature (SHA-256) or of
    /// the raw Ed25519 signature: what `cosign sign-blob --key` prints and what `cosign
    /// verify-blob --key` and `cosign verify --key` accept.
    pub fn sign(&self, message: &[u8]) -> Result<String, SignError> {
        let signature = match &self.signer {
            Signer::EcdsaP256(pair) => pair
                .sign(&SystemRandom::new(), message)
                .map_err(|_| SignError::Signing)?,
            Signer::Ed25519(pair) => pair.sign(message),
        };
        Ok(STANDARD.encode(signature.as_ref()))
    }
}

/// Wraps a SEC1 `ECPrivateKey` DER into a PKCS#8 v1 `PrivateKeyInfo` for P-256, which ring
/// loads (ring checks that the curve named inside, if any, is P-256 and that the public key is
/// present and matches).
fn sec1_p256_to_pkcs8(sec1: &[u8]) -> Result<Vec<u8>, SignError> {
    let mut body = vec![0x02, 0x01, 0x00];
    body.extend_from_slice(&PKCS8_P256_ALGORITHM);
    body.push(0x04);
    der_length(sec1.len(), &mut body)?;
    body.extend_from_slice(sec1);
    let mut out = vec![0x30];
    der_length(body.len(), &mut out)?;
    out.extend_from_slice(&body);
    Ok(out)
}

/// Appends a DER length. Keys are far below 64 KiB, so two length bytes suffice.
fn der_length(len: usize, out: &mut Vec<u8>) -> Result<(), SignError> {
    match len {
        0..=0x7f => out.push(len as u8),
        0x80..=0xff => out.extend_from_slice(&[0x81, len as u8]),
        0x100..=0xffff => out.extend_from_slice(&[0x82, (len >> 8) as u8, len as u8]),
        _ => return Err(SignError::InvalidKey("EC private key too large".into())),
    }
    Ok(())
}

#[derive(Serialize, Deserialize)]
struct SimpleSigning {
    critical: Critical,
    // cosign writes null here; annotations added with `cosign sign -a` land here as an object.
    #[serde(default)]
    optional: Option<serde_json::Map<String, serde_json::Value>>,
}

// `critical` means "must be understood": an unknown field there could change what the
// signature claims, so it is refused rather than ignored.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Critical {
    identity: Identity,
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Identity {
    #[serde(rename = "docker-reference")]
    docker_reference: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

/// The payload cosign signs for an image (sigstore/cosign `specs/SIGNATURE_SPEC.md`), as
/// compact JSON in cosign's field order. A tag or digest on `docker_reference` is dropped
/// (`registry:5000/ns/repo:tag` → `registry:5000/ns/repo`); the name is otherwise used as
/// given, so pass it fully qualified (cosign writes `index.docker.io/library/x` for `x`).
pub fn simple_signing_payload(docker_reference: &str, manifest_digest: &str) -> Vec<u8> {
    let payload = SimpleSigning {
        critical: Critical {
            identity: Identity {
                docker_reference: repository_of(docker_reference).to_string(),
            },
            image: Image {
                docker_manifest_digest: manifest_digest.to_string(),
            },
            kind: SIMPLE_SIGNING_TYPE.to_string(),
        },
        optional: None,
    };
    // Serializing structs of strings cannot fail; an empty payload would fail verification
    // rather than panic.
    serde_json::to_vec(&payload).unwrap_or_default()
}

/// `registry/repo:tag@sha256:…` → `registry/repo`; a colon before the last `/` is a port.
fn repository_of(reference: &str) -> &str {
    let without_digest = reference.split_once('@').map_or(reference, |(r, _)| r);
    match without_digest.rfind(':') {
        Some(colon) if !without_digest[colon..].contains('/') => &without_digest[..colon],
        _ => without_digest,
    }
}

/// Checks a (signature-verified) simple-signing payload: its shape, its type, and that
/// `critical.image.docker-manifest-digest` is exactly `manifest_digest`, so a valid signature
/// of another image is not accepted for this one. Verify the signature over these exact bytes
/// first; this only reads what they claim.
///
/// `critical.identity.docker-reference` is deliberately not compared: `cosign verify` does not
/// require it to match by default either, and components are copied between registries and
/// repositories without being signed again. The digest is what binds the signature to content.
pub fn check_payload(payload: &[u8], manifest_digest: &str) -> Result<(), SignError> {
    if payload.len() > MAX_PAYLOAD {
        return Err(SignError::TooLarge {
            what: "simple-signing payload",
            limit: MAX_PAYLOAD,
        });
    }
    // Without this, an empty expected digest would match an empty signed one.
    if !is_manifest_digest(manifest_digest) {
        return Err(SignError::InvalidDigest(short(manifest_digest)));
    }
    let parsed: SimpleSigning = serde_json::from_slice(payload).map_err(|e| {
        SignError::Payload(match e.classify() {
            // Data errors name the missing or unexpected field, which is what helps.
            serde_json::error::Category::Data => short(&e.to_string()),
            _ => format!("not JSON (line {}, column {})", e.line(), e.column()),
        })
    })?;
    if parsed.critical.kind != SIMPLE_SIGNING_TYPE {
        return Err(SignError::PayloadType(short(&parsed.critical.kind)));
    }
    let signed = &parsed.critical.image.docker_manifest_digest;
    if signed != manifest_digest {
        return Err(SignError::DigestMismatch {
            signed: short(signed),
            expected: manifest_digest.to_string(),
        });
    }
    Ok(())
}

/// The tag cosign stores an image's signatures under: `sha256:<hex>` → `sha256-<hex>.sig`.
/// `None` for anything but a well-formed lowercase sha256 digest.
pub fn signature_tag(manifest_digest: &str) -> Option<String> {
    let hex = manifest_digest.strip_prefix("sha256:")?;
    is_lower_hex(hex, 64).then(|| format!("sha256-{hex}.sig"))
}

fn is_manifest_digest(digest: &str) -> bool {
    match digest.split_once(':') {
        Some(("sha256", hex)) => is_lower_hex(hex, 64),
        Some(("sha512", hex)) => is_lower_hex(hex, 128),
        _ => false,
    }
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The labels of the `-----BEGIN <label>-----` lines in `text`, after the size check. Counting
/// them ourselves catches blocks the PEM reader would skip silently (unknown labels such as
/// cosign's encrypted key).
fn pem_labels(text: &[u8], what: &'static str) -> Result<Vec<String>, SignError> {
    if text.len() > MAX_PEM_BYTES {
        return Err(SignError::TooLarge {
            what,
            limit: MAX_PEM_BYTES,
        });
    }
    Ok(text
        .split(|b| *b == b'\n' || *b == b'\r')
        .filter_map(|line| {
            let label = line
                .trim_ascii()
                .strip_prefix(b"-----BEGIN ")?
                .strip_suffix(b"-----")?;
            Some(String::from_utf8_lossy(label).into_owned())
        })
        .collect())
}

/// A short reason without the offending bytes (the PEM reader's errors may quote lines).
fn pem_error(e: pem::Error) -> SignError {
    SignError::Pem(match e {
        pem::Error::MissingSectionEnd { .. } => "a block has no END line",
        pem::Error::IllegalSectionStart { .. } => "malformed BEGIN line",
        pem::Error::Base64Decode(_) => "invalid base64 inside a block",
        pem::Error::NoItemsFound => "no readable block",
        pem::Error::SectionTooLarge => "block too large",
        _ => "unreadable PEM",
    })
}

fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    // Base64 is ASCII, so 64-byte chunks are whole characters.
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    out
}

/// Input text quoted in an error: printable ASCII only, at most 100 characters, so a hostile
/// payload or file cannot flood logs or inject control sequences.
fn short(s: &str) -> String {
    const MAX: usize = 100;
    let mut out: String = s
        .chars()
        .take(MAX)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    if s.chars().count() > MAX {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const OTHER_DIGEST: &str =
        "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

    // Fixtures made once with OpenSSL 3.0 (`openssl ecparam -genkey -name secp384r1`,
    // `openssl ec -pubout`, `openssl dgst -sha384 -sign`, and the same for prime256v1 with
    // -sha256; `openssl genpkey -algorithm ED25519`, `openssl pkeyutl -sign -rawin`), each
    // checked with `openssl dgst -verify` / `pkeyutl -verify` before being embedded.
    const OPENSSL_P384_PUB: &str = "-----BEGIN PUBLIC KEY-----
MHYwEAYHKoZIzj0CAQYFK4EEACIDYgAEpvn1NW2auyEUe/jk+mM/0FSXGoGq58L2
ikZ4eS/OhqcCFFhqQX3hjJQ++MgoCazZItcZzZjXtzZMzDp9CiOjHDTI9Kt2dD5A
lUp0BHLZvnM2vJgbXFnpbCtjhA4ym9DC
-----END PUBLIC KEY-----
";
    const OPENSSL_P384_MSG: &[u8] = b"diorch p-384 fixture message";
    const OPENSSL_P384_SIG: &str = "MGUCMHrZXOn944xvRA/IclaJvsn3dgoO19lnLYIpFXhrjtLEnxWiVV+cFcpJN/12LdK9xAIxAOyH3+QT+iwQN0XEKwkMPsb1glMB80F0Ihe9UEvctNFefCx/60dY1D3n/eS4o5mjCw==";

    // `openssl ecparam -genkey -name prime256v1` output, EC PARAMETERS block included.
    const OPENSSL_P256_SEC1: &str = "-----BEGIN EC PARAMETERS-----
BggqhkjOPQMBBw==
-----END EC PARAMETERS-----
-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIOnwij2KEHbEFRwOgTPxc/rr2R7G3zRlvKFVvmKglrbqoAoGCCqGSM49
AwEHoUQDQgAEvHfww+dsnzCackr30qAzZ7VJfFZ8GVo76JgAdEuQTCpabB6Zh9lx
3s4DFojoykpRKzYk1qrbqDcG/WhY1tMLCg==
-----END EC PRIVATE KEY-----
";
    // The same key after `openssl pkcs8 -topk8 -nocrypt`.
    const OPENSSL_P256_PKCS8: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg6fCKPYoQdsQVHA6B
M/Fz+uvZHsbfNGW8oVW+YqCWtuqhRANCAAS8d/DD52yfMJpySvfSoDNntUl8VnwZ
WjvomAB0S5BMKlpsHpmH2XHezgMWiOjKSlErNiTWqtuoNwb9aFjW0wsK
-----END PRIVATE KEY-----
";
    const OPENSSL_P256_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEvHfww+dsnzCackr30qAzZ7VJfFZ8
GVo76JgAdEuQTCpabB6Zh9lx3s4DFojoykpRKzYk1qrbqDcG/WhY1tMLCg==
-----END PUBLIC KEY-----
";
    const OPENSSL_P256_MSG: &[u8] = b"diorch p-256 fixture message";
    const OPENSSL_P256_SIG: &str = "MEQCIE2Knkl3ruDYSOh6VhXKeEMqJBve07JzQhPofADRKDtrAiBm8qXSr6SgYEHWQRDkiuQ3x0l64bQZZjTI4pOQkY70Kw==";

    // PKCS#8 v1 (no public key inside), as `openssl genpkey -algorithm ED25519` writes it.
    const OPENSSL_ED25519_KEY: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIEc8otmFm8snV6ZPugGSTbr1FV2ADbOjV+q5cL9bHTRL
-----END PRIVATE KEY-----
";
    const OPENSSL_ED25519_PUB: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEA2KgE16EyGE2zFbCA8qu9w915O735cnXvc5raiIJ809Q=
-----END PUBLIC KEY-----
";
    const OPENSSL_ED25519_MSG: &[u8] = b"diorch ed25519 fixture message";
    const OPENSSL_ED25519_SIG: &str =
        "i0zEeQbJwoS6r+AM10PWMNcaL5TiljkOkGkS4k88rIw2LdYlj6FFdQCa68CqfgVddlrkWA/6lg1igGG5kqlADQ==";

    const OPENSSL_RSA_PUB: &str = "-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAuz+VtqDMgswb7c6Bc++5
oWqcOJWxDuikuqxLShVKRFJ/W8AnMK6qgjzHOmZnDjXyZ3kcElejSxcnIc/lSjvW
UOdxiG6CLWqllC3ynKB8D0WEMVWEldyi8sjgvps6MQwq+mtorPJcuXc0JegCbdBH
B3p/Gf48nEUgL1mJYeNuBUTLFwqyvp+8xifTz9Bg5/bo15YFpzOzkm1fBBtUbENJ
iFMQ2ZP+jYx52FxbuCodoq2EDLCxtf6CYwbGj2DNC34U/BLgkJ3xZP95yFEhTNRk
v0sUKj5lV2CEGXY0pl64pHJ+36ES2Cjv221RmIN+I3lhU+KyL37kdy6dh8fkD0FQ
EQIDAQAB
-----END PUBLIC KEY-----
";
    const OPENSSL_P521_PUB: &str = "-----BEGIN PUBLIC KEY-----
MIGbMBAGByqGSM49AgEGBSuBBAAjA4GGAAQBwRi/nwzyS3uag18tXFSCEqLwHOUW
4ZfgBTK0zFlswaI1EMr2/KwVmRBZ2iolgfQZX5Y11pa6hNiXDROjdl8DeloAqEku
Ke4pXHzMvE9bWtkmjloVNqv+lqM0z8AP8F7qXpU1baPT0nc4IvZ77SACMrw/vDF8
fLNHmj0J5UKT6lRMh/o=
-----END PUBLIC KEY-----
";
    // The P-256 fixture key with its point compressed (`openssl ec -conv_form compressed`).
    const OPENSSL_P256_COMPRESSED_PUB: &str = "-----BEGIN PUBLIC KEY-----
MDkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDIgACvHfww+dsnzCackr30qAzZ7VJfFZ8
GVo76JgAdEuQTCo=
-----END PUBLIC KEY-----
";
    const OPENSSL_ENCRYPTED_PKCS8: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----
MIGbMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAgNCOnaZd/amwICCAAw
DAYIKoZIhvcNAgkFADAdBglghkgBZQMEASoEEPV3m2WeZealw5PeNSRS0a8EQBwQ
9cPiLAkzFL9pejYVcR+hrNyaJEqL/6iQpG8vAd5OqJZ6sXR0+MQxJ4p9Bv7C2wFw
vyFiZDn8FBP7FN1Bd/c=
-----END ENCRYPTED PRIVATE KEY-----
";

    fn ed25519_key() -> SigningKey {
        SigningKey::from_pem(OPENSSL_ED25519_KEY.as_bytes()).expect("ed25519 fixture loads")
    }

    #[test]
    fn p256_generate_sign_verify_round_trip() {
        let key = SigningKey::generate().expect("generate");
        let public = key.public_key();
        assert_eq!(public.algorithm(), "ecdsa-p256-sha256");
        let sig = key.sign(b"component bytes").expect("sign");
        public.verify(b"component bytes", &sig).expect("verifies");
        // Whitespace around (and line breaks inside, as `base64` wraps) are tolerated.
        let wrapped = format!("  {}\n{}\n", &sig[..40], &sig[40..]);
        public
            .verify(b"component bytes", &wrapped)
            .expect("wrapped verifies");
    }

    #[test]
    fn ed25519_sign_verify_round_trip_matches_openssl() {
        let key = ed25519_key();
        let public = key.public_key();
        assert_eq!(public.algorithm(), "ed25519");
        assert_eq!(key.public_pem(), OPENSSL_ED25519_PUB);
        // Ed25519 is deterministic: the same key and message give openssl's exact signature.
        let sig = key.sign(OPENSSL_ED25519_MSG).expect("sign");
        assert_eq!(sig, OPENSSL_ED25519_SIG);
        public
            .verify(
                b"another message",
                &key.sign(b"another message").expect("sign"),
            )
            .expect("verifies");
        let from_openssl = PublicKey::from_pem(OPENSSL_ED25519_PUB.as_bytes()).expect("parse");
        from_openssl
            .verify(OPENSSL_ED25519_MSG, OPENSSL_ED25519_SIG)
            .expect("openssl sig");
    }

    #[test]
    fn flipped_message_byte_fails() {
        for key in [SigningKey::generate().expect("generate"), ed25519_key()] {
            let mut message = b"the exact payload".to_vec();
            let sig = key.sign(&message).expect("sign");
            message[3] ^= 0x01;
            let err = key.public_key().verify(&message, &sig).unwrap_err();
            assert!(matches!(err, SignError::BadSignature(_)), "{err}");
        }
    }

    #[test]
    fn flipped_signature_byte_fails() {
        let key = SigningKey::generate().expect("generate");
        let sig = key.sign(b"m").expect("sign");
        let mut raw = STANDARD.decode(&sig).expect("b64");
        let last = raw.len() - 1;
        raw[last] ^= 0x01;
        assert!(
            key.public_key()
                .verify(b"m", &STANDARD.encode(&raw))
                .is_err()
        );
    }

    #[test]
    fn signature_by_another_key_fails() {
        let signer = SigningKey::generate().expect("generate");
        let other = SigningKey::generate().expect("generate");
        let sig = signer.sign(b"m").expect("sign");
        let err = other.public_key().verify(b"m", &sig).unwrap_err();
        assert!(
            err.to_string().contains(&other.public_key().fingerprint()),
            "{err}"
        );
        // Across algorithms too: an ECDSA signature is not an Ed25519 one.
        assert!(ed25519_key().public_key().verify(b"m", &sig).is_err());
    }

    #[test]
    fn pem_round_trip_of_public_and_private_keys() {
        let key = SigningKey::generate().expect("generate");
        let public_pem = key.public_pem();
        assert!(public_pem.starts_with("-----BEGIN PUBLIC KEY-----\n"));
        assert!(public_pem.lines().all(|l| l.len() <= 64));
        let public = PublicKey::from_pem(public_pem.as_bytes()).expect("public parses");
        assert_eq!(public, key.public_key());
        assert_eq!(public.to_pem(), public_pem);

        let private_pem = key.private_pem();
        assert!(private_pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
        assert!(private_pem.lines().all(|l| l.len() <= 64));
        let reloaded = SigningKey::from_pem(private_pem.as_bytes()).expect("private parses");
        assert_eq!(reloaded.public_key(), key.public_key());
        assert_eq!(reloaded.private_pem(), private_pem);
        let sig = reloaded.sign(b"m").expect("sign");
        public
            .verify(b"m", &sig)
            .expect("reloaded key signs for the same public key");

        let ed = ed25519_key();
        let ed_again = SigningKey::from_pem(ed.private_pem().as_bytes()).expect("ed reload");
        assert_eq!(ed_again.public_key(), ed.public_key());
    }

    #[test]
    fn debug_shows_no_key_material() {
        let key = SigningKey::generate().expect("generate");
        let shown = format!("{key:?} {:?}", key.public_key());
        assert!(shown.contains(&key.public_key().fingerprint()));
        // A derived Debug would print `pkcs8: [48, 129, ...]` or the key pair's fields.
        assert!(!shown.contains("pkcs8") && !shown.contains('['), "{shown}");
        let private_pem = key.private_pem();
        let mut body = private_pem.lines().filter(|l| !l.starts_with("-----"));
        assert!(body.all(|line| !shown.contains(line)), "{shown}");
    }

    #[test]
    fn openssl_p384_key_and_signature_verify() {
        let key = PublicKey::from_pem(OPENSSL_P384_PUB.as_bytes()).expect("p384 parses");
        assert_eq!(key.algorithm(), "ecdsa-p384-sha384");
        key.verify(OPENSSL_P384_MSG, OPENSSL_P384_SIG)
            .expect("openssl p384 sig");
        assert!(
            key.verify(b"diorch p-384 fixture messagf", OPENSSL_P384_SIG)
                .is_err()
        );
        assert_eq!(key.to_pem(), OPENSSL_P384_PUB);
    }

    #[test]
    fn openssl_p256_sec1_key_loads_and_matches_its_signature() {
        let public = PublicKey::from_pem(OPENSSL_P256_PUB.as_bytes()).expect("p256 parses");
        public
            .verify(OPENSSL_P256_MSG, OPENSSL_P256_SIG)
            .expect("openssl p256 sig");
        let key = SigningKey::from_pem(OPENSSL_P256_SEC1.as_bytes()).expect("sec1 loads");
        // Our SPKI encoding is byte-for-byte openssl's.
        assert_eq!(key.public_pem(), OPENSSL_P256_PUB);
        assert_eq!(key.public_key().fingerprint(), public.fingerprint());
        let sig = key.sign(b"signed by a sec1 key").expect("sign");
        public
            .verify(b"signed by a sec1 key", &sig)
            .expect("verifies");
        // Saved as PKCS#8, it is the same key openssl converts it to.
        let pkcs8 = SigningKey::from_pem(OPENSSL_P256_PKCS8.as_bytes()).expect("pkcs8 loads");
        assert_eq!(pkcs8.public_key(), public);
        let again = SigningKey::from_pem(key.private_pem().as_bytes()).expect("reload");
        assert_eq!(again.public_key(), public);
    }

    #[test]
    fn fingerprint_is_sha256_of_spki() {
        let key = PublicKey::from_pem(OPENSSL_P256_PUB.as_bytes()).expect("parse");
        let der =
            SubjectPublicKeyInfoDer::from_pem_slice(OPENSSL_P256_PUB.as_bytes()).expect("der");
        assert_eq!(
            key.fingerprint(),
            format!("sha256:{}", hex(&Sha256::digest(der.as_ref())))
        );
        assert_eq!(key.fingerprint().len(), 7 + 64);
    }

    #[test]
    fn rsa_and_other_curves_refused_clearly() {
        let err = PublicKey::from_pem(OPENSSL_RSA_PUB.as_bytes()).unwrap_err();
        assert!(matches!(err, SignError::UnsupportedAlgorithm(_)), "{err}");
        assert!(err.to_string().contains("RSA"), "{err}");
        let err = PublicKey::from_pem(OPENSSL_P521_PUB.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("P-521"), "{err}");
        let err = PublicKey::from_pem(OPENSSL_P256_COMPRESSED_PUB.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("uncompressed"), "{err}");
        let err = PublicKey::from_pem(
            b"-----BEGIN RSA PUBLIC KEY-----\nAAAA\n-----END RSA PUBLIC KEY-----\n",
        )
        .unwrap_err();
        assert!(matches!(err, SignError::WrongPemBlock { .. }), "{err}");
    }

    #[test]
    fn garbage_and_oversized_pem_refused() {
        assert!(matches!(
            PublicKey::from_pem(b"not a key at all").unwrap_err(),
            SignError::NoPemBlock(_)
        ));
        assert!(PublicKey::from_pem(b"").is_err());
        let bad_b64 = "-----BEGIN PUBLIC KEY-----\n!!!!\n-----END PUBLIC KEY-----\n";
        assert!(matches!(
            PublicKey::from_pem(bad_b64.as_bytes()).unwrap_err(),
            SignError::Pem(_)
        ));
        let not_spki = format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            STANDARD.encode(b"definitely not DER")
        );
        assert!(matches!(
            PublicKey::from_pem(not_spki.as_bytes()).unwrap_err(),
            SignError::InvalidKey(_)
        ));
        let unterminated = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n";
        assert!(PublicKey::from_pem(unterminated.as_bytes()).is_err());

        let mut huge = OPENSSL_P256_PUB.as_bytes().to_vec();
        huge.resize(MAX_PEM_BYTES + 1, b'\n');
        assert!(matches!(
            PublicKey::from_pem(&huge).unwrap_err(),
            SignError::TooLarge { .. }
        ));
        assert!(matches!(
            SigningKey::from_pem(&huge).unwrap_err(),
            SignError::TooLarge { .. }
        ));
        assert!(matches!(
            keys_from_pem_bundle(&huge).unwrap_err(),
            SignError::TooLarge { .. }
        ));
    }

    #[test]
    fn several_blocks_or_private_key_refused_where_one_public_key_is_expected() {
        let two = format!("{OPENSSL_P256_PUB}{OPENSSL_P384_PUB}");
        assert!(matches!(
            PublicKey::from_pem(two.as_bytes()).unwrap_err(),
            SignError::SeveralPemBlocks(2)
        ));
        assert!(matches!(
            PublicKey::from_pem(OPENSSL_P256_PKCS8.as_bytes()).unwrap_err(),
            SignError::PrivateKeyGiven
        ));
        // Comments around the block are fine.
        let commented = format!("# signing key of team A\n{OPENSSL_P256_PUB}\n# end\n");
        PublicKey::from_pem(commented.as_bytes()).expect("comments ignored");
    }

    #[test]
    fn unsupported_private_keys_refused_with_advice() {
        let cosign = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJrZGYiOnt9fQ==\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n";
        let err = SigningKey::from_pem(cosign.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("diorch plugin keygen"), "{err}");
        let old_cosign = cosign.replace("SIGSTORE", "COSIGN");
        let err = SigningKey::from_pem(old_cosign.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("cosign"), "{err}");
        let err = SigningKey::from_pem(OPENSSL_ENCRYPTED_PKCS8.as_bytes()).unwrap_err();
        assert!(matches!(err, SignError::EncryptedKey(_)), "{err}");
        let err = SigningKey::from_pem(OPENSSL_P256_PUB.as_bytes()).unwrap_err();
        assert!(matches!(err, SignError::WrongPemBlock { .. }), "{err}");
        let err = SigningKey::from_pem(b"garbage").unwrap_err();
        assert!(matches!(err, SignError::NoPemBlock(_)), "{err}");
        let both = format!("{OPENSSL_P256_PKCS8}{OPENSSL_ED25519_KEY}");
        assert!(matches!(
            SigningKey::from_pem(both.as_bytes()).unwrap_err(),
            SignError::SeveralPemBlocks(2)
        ));
        // The P-384 fixture key after `openssl pkcs8 -topk8 -nocrypt`: it verifies here but
        // cannot sign, and says so.
        let p384_pkcs8 = "-----BEGIN PRIVATE KEY-----
MIG2AgEAMBAGByqGSM49AgEGBSuBBAAiBIGeMIGbAgEBBDB+swTQ0mPfd5dNF8eh
ujQTSdyfhlCNY3A9cOuhj8GcTv/fh6Oy/+kmxgR0XglWmNShZANiAASm+fU1bZq7
IRR7+OT6Yz/QVJcagarnwvaKRnh5L86GpwIUWGpBfeGMlD74yCgJrNki1xnNmNe3
NkzMOn0KI6McNMj0q3Z0PkCVSnQEctm+cza8mBtcWelsK2OEDjKb0MI=
-----END PRIVATE KEY-----
";
        let err = SigningKey::from_pem(p384_pkcs8.as_bytes()).unwrap_err();
        assert!(matches!(err, SignError::UnsupportedSigningKey(_)), "{err}");
        let rsa = "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n";
        let err = SigningKey::from_pem(rsa.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("RSA"), "{err}");
    }

    #[test]
    fn bad_signature_text_refused() {
        let key = SigningKey::generate().expect("generate").public_key();
        let oversized = "A".repeat(MAX_SIGNATURE_TEXT_BYTES + 1);
        assert!(matches!(
            key.verify(b"m", &oversized).unwrap_err(),
            SignError::TooLarge { .. }
        ));
        assert!(matches!(
            key.verify(b"m", "not base64 !!").unwrap_err(),
            SignError::SignatureEncoding(_)
        ));
        assert!(matches!(
            key.verify(b"m", "  \n").unwrap_err(),
            SignError::SignatureEncoding(_)
        ));
        let ed = ed25519_key().public_key();
        assert!(matches!(
            ed.verify(b"m", &STANDARD.encode([0u8; 63])).unwrap_err(),
            SignError::SignatureEncoding(_)
        ));
    }

    #[test]
    fn payload_round_trip() {
        let payload = simple_signing_payload("ghcr.io/acme/policies/binpack:v1", DIGEST);
        let expected = format!(
            "{{\"critical\":{{\"identity\":{{\"docker-reference\":\"ghcr.io/acme/policies/binpack\"}},\"image\":{{\"docker-manifest-digest\":\"{DIGEST}\"}},\"type\":\"cosign container image signature\"}},\"optional\":null}}"
        );
        assert_eq!(String::from_utf8(payload.clone()).expect("utf8"), expected);
        check_payload(&payload, DIGEST).expect("payload checks");

        let key = SigningKey::generate().expect("generate");
        let sig = key.sign(&payload).expect("sign");
        key.public_key().verify(&payload, &sig).expect("verifies");

        // cosign `-a key=value` annotations land in `optional`; they are allowed.
        let annotated = expected.replace(
            "\"optional\":null",
            "\"optional\":{\"creator\":\"ci\",\"n\":1}",
        );
        check_payload(annotated.as_bytes(), DIGEST).expect("optional fields allowed");
        // The identity is not required to match the place the component is read from.
        let copied = expected.replace("ghcr.io/acme", "mirror.internal:5000/copy");
        check_payload(copied.as_bytes(), DIGEST).expect("reference not compared");
    }

    #[test]
    fn payload_reference_drops_tag_and_digest_keeps_port() {
        for (input, repo) in [
            ("ghcr.io/a/b:v1", "ghcr.io/a/b"),
            ("ghcr.io/a/b@sha256:abc", "ghcr.io/a/b"),
            ("ghcr.io/a/b:v1@sha256:abc", "ghcr.io/a/b"),
            ("localhost:5000/a/b", "localhost:5000/a/b"),
            ("localhost:5000/a/b:tag", "localhost:5000/a/b"),
        ] {
            assert_eq!(repository_of(input), repo, "{input}");
        }
    }

    #[test]
    fn payload_naming_another_digest_refused() {
        let payload = simple_signing_payload("ghcr.io/a/b", OTHER_DIGEST);
        let err = check_payload(&payload, DIGEST).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, SignError::DigestMismatch { .. }), "{message}");
        assert!(
            message.contains(DIGEST) && message.contains(OTHER_DIGEST),
            "{message}"
        );
        // An empty or malformed expected digest never matches anything.
        let empty = simple_signing_payload("ghcr.io/a/b", "");
        assert!(matches!(
            check_payload(&empty, "").unwrap_err(),
            SignError::InvalidDigest(_)
        ));
    }

    #[test]
    fn payload_with_wrong_type_or_shape_refused() {
        let payload =
            String::from_utf8(simple_signing_payload("ghcr.io/a/b", DIGEST)).expect("utf8");
        let wrong_type = payload.replace(
            "cosign container image signature",
            "atomic container signature",
        );
        assert!(matches!(
            check_payload(wrong_type.as_bytes(), DIGEST).unwrap_err(),
            SignError::PayloadType(_)
        ));
        let extra_critical = payload.replace("\"type\"", "\"extra\":1,\"type\"");
        assert!(matches!(
            check_payload(extra_critical.as_bytes(), DIGEST).unwrap_err(),
            SignError::Payload(_)
        ));
        let missing_image = format!(
            "{{\"critical\":{{\"identity\":{{\"docker-reference\":\"x\"}},\"type\":\"{SIMPLE_SIGNING_TYPE}\"}}}}"
        );
        let err = check_payload(missing_image.as_bytes(), DIGEST).unwrap_err();
        assert!(err.to_string().contains("image"), "{err}");
        assert!(matches!(
            check_payload(b"{not json", DIGEST).unwrap_err(),
            SignError::Payload(_)
        ));
        assert!(check_payload(b"", DIGEST).is_err());
        // Duplicate keys could make two parsers disagree; serde refuses them.
        let duplicate = payload.replacen(
            "\"image\":",
            &format!("\"image\":{{\"docker-manifest-digest\":\"{OTHER_DIGEST}\"}},\"image\":"),
            1,
        );
        assert!(check_payload(duplicate.as_bytes(), DIGEST).is_err());
    }

    #[test]
    fn oversized_payload_refused() {
        let mut payload = simple_signing_payload("ghcr.io/a/b", DIGEST);
        payload.resize(MAX_PAYLOAD + 1, b' ');
        assert!(matches!(
            check_payload(&payload, DIGEST).unwrap_err(),
            SignError::TooLarge { .. }
        ));
    }

    #[test]
    fn signature_tag_cases() {
        assert_eq!(
            signature_tag(DIGEST).as_deref(),
            Some("sha256-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.sig")
        );
        assert_eq!(signature_tag(""), None);
        assert_eq!(signature_tag("sha256:"), None);
        assert_eq!(signature_tag(&DIGEST[..DIGEST.len() - 1]), None);
        assert_eq!(signature_tag(&format!("{DIGEST}0")), None);
        assert_eq!(
            signature_tag(&DIGEST.to_uppercase().replace("SHA256", "sha256")),
            None
        );
        assert_eq!(signature_tag(&DIGEST.replace("sha256", "sha512")), None);
        assert_eq!(signature_tag(&DIGEST.replace('a', "g")), None);
    }

    #[test]
    fn bundle_with_two_keys() {
        let bundle = format!("# old key\n{OPENSSL_P256_PUB}\n# new key\n{OPENSSL_ED25519_PUB}");
        let keys = keys_from_pem_bundle(bundle.as_bytes()).expect("bundle parses");
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0].algorithm(), "ecdsa-p256-sha256");
        assert_eq!(keys[1].algorithm(), "ed25519");
        assert!(
            keys.iter()
                .any(|k| k.verify(OPENSSL_ED25519_MSG, OPENSSL_ED25519_SIG).is_ok())
        );
        assert!(keys_from_pem_bundle(b"").is_err());
        let with_private = format!("{OPENSSL_P256_PUB}{OPENSSL_P256_PKCS8}");
        assert!(matches!(
            keys_from_pem_bundle(with_private.as_bytes()).unwrap_err(),
            SignError::PrivateKeyGiven
        ));
        let with_rsa = format!("{OPENSSL_P256_PUB}{OPENSSL_RSA_PUB}");
        assert!(keys_from_pem_bundle(with_rsa.as_bytes()).is_err());
    }

    #[test]
    fn bundle_with_seventeen_keys_refused_sixteen_accepted() {
        let sixteen = OPENSSL_P256_PUB.repeat(16);
        assert_eq!(
            keys_from_pem_bundle(sixteen.as_bytes())
                .expect("16 keys")
                .len(),
            16
        );
        let seventeen = OPENSSL_P256_PUB.repeat(17);
        assert!(matches!(
            keys_from_pem_bundle(seventeen.as_bytes()).unwrap_err(),
            SignError::TooManyKeys { found: 17, max: 16 }
        ));
    }
}
