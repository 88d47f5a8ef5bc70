//! The entry point of the `bearer_token` fuzz target (`fuzz/fuzz_targets/bearer_token.rs`) and
//! its corpus replay test: a bearer token is the one input of this crate an attacker writes
//! whole.
//!
//! The bytes are read two ways, and neither may panic: as a token (lossy UTF-8), checked against
//! a fixed key set and rules at a fixed time, twice with the same answer (the check is a pure
//! function); and as a JWK Set document.

use std::collections::BTreeSet;

use crate::algorithm::Algorithm;
use crate::jwk::KeySet;
use crate::token::{self, ClaimMapping, Rules, TenantRule};

/// A key set of one key per family airlock verifies with (the keys are arbitrary points: no
/// signature verifies, which is what a forged token meets).
const KEYS: &str = r#"{"keys":[
 {"kty":"OKP","crv":"Ed25519","kid":"ed","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
 {"kty":"EC","crv":"P-256","kid":"es","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
 {"kty":"RSA","kid":"rs","e":"AQAB","n":"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"}
]}"#;

/// Checks one input; panics only if an invariant breaks.
pub fn bearer_token(data: &[u8]) {
    let keys = match KeySet::parse(KEYS.as_bytes()) {
        Ok(keys) => keys,
        Err(error) => panic!("the fixed key set must load: {error}"),
    };
    let rules = Rules {
        issuer: "https://idp.test".to_owned(),
        audience: "https://airlock.test/mcp".to_owned(),
        algorithms: Algorithm::ALL.into_iter().collect::<BTreeSet<_>>(),
        leeway_seconds: 60,
        claims: ClaimMapping {
            principal: "sub".to_owned(),
            scopes: "scope".to_owned(),
            tenant: TenantRule::Claim("org".to_owned()),
        },
    };
    let text = String::from_utf8_lossy(data);
    let check = || {
        token::read(&text, &rules.algorithms).and_then(|t| t.verify(&keys, &rules, 1_800_000_000))
    };
    let first = check();
    assert_eq!(
        first,
        check(),
        "the same token, keys, rules and time got two answers"
    );
    // No key here signs anything, so nothing may verify.
    assert!(first.is_err(), "a token verified against keys nobody holds");
    let _ = KeySet::parse(data);
}
