//! Unit tests of `src/oci/sign.rs`.

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
    let der = SubjectPublicKeyInfoDer::from_pem_slice(OPENSSL_P256_PUB.as_bytes()).expect("der");
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
    let payload = String::from_utf8(simple_signing_payload("ghcr.io/a/b", DIGEST)).expect("utf8");
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
