//! Bearer JWTs checked against a test issuer's fresh keys: what is accepted, each reason a token
//! is refused, and the claims read into a caller.

use std::collections::BTreeSet;

use airlock_core::access::{IssuedToken, VouchedBy};
use airlock_core::scope::Scope;
use airlock_core::time::Timestamp;
use airlock_oauth::algorithm::Algorithm;
use airlock_oauth::config::KeyOrigin;
use airlock_oauth::jwk::KeySet;
use airlock_oauth::testing::TestIssuer;
use airlock_oauth::token::{self, ClaimMapping, Rules, TenantRule, TokenError};
use airlock_oauth::{AuthConfig, ResourceServer};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

const ISSUER: &str = "https://idp.test/realms/acme";
const AUDIENCE: &str = "https://airlock.test/mcp";
const NOW: i64 = 1_800_000_000;

fn rules() -> Rules {
    Rules {
        issuer: ISSUER.to_owned(),
        audience: AUDIENCE.to_owned(),
        algorithms: Algorithm::ALL.into_iter().collect(),
        leeway_seconds: 60,
        claims: ClaimMapping {
            principal: "sub".to_owned(),
            scopes: "scope".to_owned(),
            tenant: TenantRule::Fixed("acme".to_owned()),
        },
    }
}

fn check(
    issuer: &TestIssuer,
    token: &str,
    rules: &Rules,
) -> Result<airlock_core::access::Verified, TokenError> {
    let keys = KeySet::parse(issuer.jwks().to_string().as_bytes()).expect("the issuer's keys");
    token::read(token, &rules.algorithms)?.verify(&keys, rules, NOW)
}

fn claims(issuer: &TestIssuer) -> Value {
    issuer.claims(AUDIENCE, NOW, "openid run.read approval.resolve")
}

fn with(mut claims: Value, key: &str, value: Value) -> Value {
    if value.is_null() {
        claims.as_object_mut().expect("object").remove(key);
    } else {
        claims[key] = value;
    }
    claims
}

fn scopes(names: &[&str]) -> BTreeSet<Scope> {
    names
        .iter()
        .map(|n| Scope::parse(n).expect("scope"))
        .collect()
}

#[test]
fn a_token_of_each_algorithm_family_is_the_caller_its_claims_name() {
    let issuer = TestIssuer::new(ISSUER);
    for alg in ["RS256", "ES256", "EdDSA"] {
        let token = issuer.sign(json!({"alg": alg, "typ": "at+jwt"}), &claims(&issuer));
        let verified = check(&issuer, &token, &rules()).unwrap_or_else(|e| panic!("{alg}: {e}"));
        assert_eq!(verified.principal.tenant_id, "acme");
        assert_eq!(verified.principal.principal_id, "alice");
        // `openid` is not an airlock scope and grants nothing.
        assert_eq!(
            verified.principal.scopes,
            scopes(&["approval.resolve", "run.read"])
        );
        assert_eq!(
            verified.by,
            VouchedBy::Issuer(IssuedToken {
                issuer: ISSUER.to_owned(),
                subject: "alice".to_owned(),
                // `exp` plus the 60 s leeway.
                expires_at: Timestamp::from_micros((NOW + 300 + 60) * 1_000_000),
            })
        );
    }
}

#[test]
fn each_fault_is_refused_with_its_reason() {
    let issuer = TestIssuer::new(ISSUER);
    let good = claims(&issuer);
    let rs = |claims: &Value| issuer.token(claims);
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "expired past the leeway",
            rs(&with(good.clone(), "exp", json!(NOW - 61))),
            "token.expired",
        ),
        (
            "not before, past the leeway",
            rs(&with(good.clone(), "nbf", json!(NOW + 61))),
            "token.not_yet_valid",
        ),
        (
            "another audience",
            rs(&with(good.clone(), "aud", json!("https://other.test"))),
            "token.audience",
        ),
        (
            "an audience list without ours",
            rs(&with(good.clone(), "aud", json!(["a", "b"]))),
            "token.audience",
        ),
        (
            "another issuer",
            rs(&with(good.clone(), "iss", json!("https://evil.test"))),
            "token.issuer",
        ),
        (
            "no exp",
            rs(&with(good.clone(), "exp", Value::Null)),
            "token.claim_missing",
        ),
        (
            "exp not a number",
            rs(&with(good.clone(), "exp", json!("soon"))),
            "token.claim_missing",
        ),
        (
            "no aud",
            rs(&with(good.clone(), "aud", Value::Null)),
            "token.claim_missing",
        ),
        (
            "no sub",
            rs(&with(good.clone(), "sub", Value::Null)),
            "token.claim_missing",
        ),
        (
            "a sub with a newline",
            rs(&with(good.clone(), "sub", json!("al\nice"))),
            "token.identity",
        ),
        (
            "alg none",
            issuer.sign(json!({"alg": "none"}), &good),
            "token.algorithm",
        ),
        (
            "HS256",
            issuer.sign(json!({"alg": "HS256"}), &good),
            "token.algorithm",
        ),
        (
            "unknown kid",
            issuer.sign(json!({"alg": "RS256", "kid": "rotated-away"}), &good),
            "token.unknown_key",
        ),
        (
            "a kid of another key type",
            issuer.sign(json!({"alg": "RS256", "kid": "es-1"}), &good),
            "token.unknown_key",
        ),
        (
            "crit",
            issuer.sign(json!({"alg": "RS256", "crit": ["exp"]}), &good),
            "token.critical_header",
        ),
        ("two parts", "a.b".to_owned(), "token.malformed"),
        (
            "too long",
            "a".repeat(token::MAX_TOKEN_BYTES + 1),
            "token.malformed",
        ),
    ];
    for (what, token, reason) in cases {
        let refused = check(&issuer, &token, &rules()).expect_err(what);
        assert_eq!(refused.reason_code(), reason, "{what}: {refused}");
    }
}

#[test]
fn a_changed_payload_or_a_signature_of_another_key_does_not_verify() {
    let issuer = TestIssuer::new(ISSUER);
    let token = issuer.token(&claims(&issuer));
    let parts: Vec<&str> = token.split('.').collect();
    let widened = with(
        claims(&issuer),
        "scope",
        json!("run.read run.write run.cancel"),
    );
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(widened.to_string()),
        parts[2]
    );
    assert_eq!(
        check(&issuer, &forged, &rules()),
        Err(TokenError::BadSignature)
    );
    // A token of another issuer's key that claims this issuer's kid.
    let impostor = TestIssuer::new(ISSUER);
    let stolen_kid = impostor.token(&claims(&issuer));
    assert_eq!(
        check(&issuer, &stolen_kid, &rules()),
        Err(TokenError::BadSignature)
    );
}

#[test]
fn the_leeway_bounds_exp_and_nbf_and_only_configured_algorithms_pass() {
    let issuer = TestIssuer::new(ISSUER);
    let within = with(
        with(claims(&issuer), "exp", json!(NOW - 59)),
        "nbf",
        json!(NOW + 59),
    );
    assert!(check(&issuer, &issuer.token(&within), &rules()).is_ok());
    let at_edge = with(claims(&issuer), "exp", json!(NOW - 60));
    assert_eq!(
        check(&issuer, &issuer.token(&at_edge), &rules()),
        Err(TokenError::Expired)
    );
    let only_es256 = Rules {
        algorithms: [Algorithm::Es256].into_iter().collect(),
        ..rules()
    };
    let refused = check(&issuer, &issuer.token(&claims(&issuer)), &only_es256).expect_err("RS256");
    assert_eq!(refused.reason_code(), "token.algorithm");
}

#[test]
fn tenant_principal_and_scopes_may_come_from_configured_claims() {
    let issuer = TestIssuer::new(ISSUER);
    let mapped = Rules {
        claims: ClaimMapping {
            principal: "preferred_username".to_owned(),
            scopes: "scp".to_owned(),
            tenant: TenantRule::Claim("org".to_owned()),
        },
        ..rules()
    };
    let claims = json!({
        "iss": ISSUER, "aud": [AUDIENCE, "account"], "sub": "f81d4fae", "exp": NOW + 60,
        "preferred_username": "bob", "org": "globex", "scp": ["run.read", 7, "profile"],
    });
    let verified = check(&issuer, &issuer.token(&claims), &mapped).expect("valid");
    assert_eq!(verified.principal.tenant_id, "globex");
    assert_eq!(verified.principal.principal_id, "bob");
    assert_eq!(verified.principal.scopes, scopes(&["run.read"]));
    let no_org = with(claims, "org", Value::Null);
    let refused = check(&issuer, &issuer.token(&no_org), &mapped).expect_err("no org");
    assert_eq!(refused, TokenError::MissingClaim("org".to_owned()));
}

/// A resource server whose keys are the JWK Set in `file`.
async fn server_over(file: &std::path::Path) -> ResourceServer {
    ResourceServer::start(AuthConfig {
        rules: rules(),
        resource: url::Url::parse(AUDIENCE).expect("url"),
        keys: KeyOrigin::File(file.to_owned()),
        scopes_supported: Vec::new(),
    })
    .await
    .expect("start")
}

/// Rotation: a token signed with a key published after start is accepted once the key set is
/// fetched again, which an unknown `kid` causes, at most every 30 s; the retired keys then stop
/// working (the file stands for the issuer's URL here).
#[tokio::test(start_paused = true)]
async fn a_key_published_after_start_is_fetched_when_a_token_names_it() {
    let before = TestIssuer::new(ISSUER);
    let after = TestIssuer::new(ISSUER);
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, before.jwks().to_string()).expect("write");
    let server = server_over(&file).await;
    let reason = |answer: Result<airlock_core::access::Verified, TokenError>| {
        answer.map(|_| ()).map_err(|e| e.reason_code())
    };
    let old = before.token(&claims(&before));
    assert_eq!(reason(server.verify_at(&old, NOW).await), Ok(()));
    // The issuer rotates: a new key with a kid of its own.
    let rotated = after.sign(json!({"alg": "EdDSA", "kid": "ed-2"}), &claims(&after));
    let mut keys = after.jwks();
    keys["keys"][2]["kid"] = json!("ed-2");
    std::fs::write(&file, keys.to_string()).expect("rotate");
    // The set was fetched at start, less than 30 s ago: no fetch yet.
    assert_eq!(
        reason(server.verify_at(&rotated, NOW).await),
        Err("token.unknown_key")
    );
    tokio::time::advance(airlock_oauth::keys::UNKNOWN_KID_REFETCH).await;
    assert_eq!(reason(server.verify_at(&rotated, NOW).await), Ok(()));
    // The retired RSA key is gone; its kid now names the new RSA key.
    assert_eq!(
        reason(server.verify_at(&old, NOW).await),
        Err("token.signature")
    );
}

/// An issuer whose tokens name no `kid` (one key, say in a `jwks_file`): after it rotates, a
/// signature the held key does not verify fetches the set again (at most every 30 s).
#[tokio::test(start_paused = true)]
async fn a_rotated_single_key_without_kid_is_fetched_after_a_bad_signature() {
    let before = TestIssuer::new(ISSUER);
    let after = TestIssuer::new(ISSUER);
    let only_ed = |issuer: &TestIssuer| {
        let mut keys = issuer.jwks();
        let ed = keys["keys"][2].clone();
        keys["keys"] = json!([ed]);
        keys
    };
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, only_ed(&before).to_string()).expect("write");
    let server = server_over(&file).await;
    let kidless =
        |issuer: &TestIssuer| issuer.sign(json!({"alg": "EdDSA", "kid": null}), &claims(issuer));
    assert!(server.verify_at(&kidless(&before), NOW).await.is_ok());
    std::fs::write(&file, only_ed(&after).to_string()).expect("rotate");
    let rotated = kidless(&after);
    assert_eq!(
        server.verify_at(&rotated, NOW).await.map(|_| ()),
        Err(TokenError::BadSignature),
        "within 30 s of the last fetch"
    );
    tokio::time::advance(airlock_oauth::keys::UNKNOWN_KID_REFETCH).await;
    assert!(server.verify_at(&rotated, NOW).await.is_ok());
}
