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
mod tests;
