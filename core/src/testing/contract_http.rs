//! The Store contract for what SPEC §20's HTTP API adds to the port: API tokens (stored by
//! digest, unique, revoked once, listed per tenant) and the tenant-wide event tail. Run from
//! [`crate::testing::contract::run_contract`], so every store passes it.

use serde_json::json;

use crate::access::ApiToken;
use crate::events::EventType;
use crate::ids::ApiTokenId;
use crate::scope::{Scope, ScopeSet};
use crate::store::{Store, StoreTx, TxError};
use crate::testing::fixtures::*;
use crate::vocab::RunStatus;

/// Runs every check of this file, each on a fresh store.
pub fn run<S: Store>(make: &impl Fn() -> S) {
    api_tokens_round_trip_and_are_unique(&make());
    api_tokens_are_listed_per_tenant_in_creation_order(&make());
    a_token_is_revoked_once_and_nothing_else_changes(&make());
    events_of_tenant_is_a_tail_of_that_tenant_only(&make());
}

fn token_id(n: u128) -> ApiTokenId {
    ApiTokenId(uuid::Uuid::from_u128((0x70c3 << 96) | n))
}

/// A token of `tenant` whose digest is derived from `n`, created `n` seconds after `T0`.
fn sample_token(n: u128, tenant: &str) -> ApiToken {
    let scopes: ScopeSet = ["run.read", "approval.resolve"]
        .iter()
        .map(|s| Scope::parse(s).expect("grammatical"))
        .collect();
    ApiToken {
        id: token_id(n),
        tenant_id: tenant.to_owned(),
        principal_id: PRINCIPAL.to_owned(),
        scopes,
        token_sha256: format!("{n:064x}"),
        label: Some(format!("label {n}")),
        created_at: at(i64::try_from(n).expect("small n")),
        expires_at: Some(at(3600)),
        revoked_at: None,
    }
}

fn read<S: Store, R>(store: &S, f: impl FnOnce(&mut dyn StoreTx) -> Result<R, TxError>) -> R {
    store
        .read(f)
        .unwrap_or_else(|error| panic!("read failed: {error:?}"))
}

/// SPEC §20: a token is found by id and by digest exactly as stored; ids and digests are unique.
fn api_tokens_round_trip_and_are_unique<S: Store>(store: &S) {
    let token = sample_token(1, TENANT);
    let mut bare = sample_token(2, TENANT);
    bare.label = None;
    bare.expires_at = None;
    bare.scopes = ScopeSet::new();
    commit(store, "insert tokens", |tx| {
        tx.insert_api_token(&token)?;
        tx.insert_api_token(&bare)
    });
    assert_eq!(
        read(store, |tx| tx.api_token(token.id)),
        Some(token.clone()),
        "api_token: by id, every field as inserted"
    );
    assert_eq!(
        read(store, |tx| tx.api_token_by_digest(&bare.token_sha256)),
        Some(bare.clone()),
        "api_token_by_digest: null label and expiry, empty scopes round-trip"
    );
    assert_eq!(
        read(store, |tx| tx.api_token_by_digest(&format!("{:064x}", 3))),
        None,
        "api_token_by_digest: an unknown digest"
    );
    assert_eq!(read(store, |tx| tx.api_token(token_id(9))), None);

    let mut same_id = sample_token(3, TENANT);
    same_id.id = token.id;
    assert!(
        matches!(
            store.transact(|tx| tx.insert_api_token(&same_id)),
            Err(TxError::Conflict(_))
        ),
        "api_tokens: a duplicate id is a Conflict"
    );
    let mut same_digest = sample_token(4, "other");
    same_digest.token_sha256 = token.token_sha256.clone();
    assert!(
        matches!(
            store.transact(|tx| tx.insert_api_token(&same_digest)),
            Err(TxError::Conflict(_))
        ),
        "api_tokens: a duplicate token_sha256 is a Conflict"
    );
    assert_eq!(read(store, |tx| tx.api_tokens(TENANT)).len(), 2);
    assert!(read(store, |tx| tx.api_tokens("other")).is_empty());
}

/// `tokens list` shows the caller tenant's tokens only, oldest first.
fn api_tokens_are_listed_per_tenant_in_creation_order<S: Store>(store: &S) {
    let mut later = sample_token(1, TENANT);
    later.created_at = at(50);
    let earlier = sample_token(2, TENANT);
    let other = sample_token(3, "other");
    let mut same_time = sample_token(4, TENANT);
    same_time.created_at = at(50);
    commit(store, "insert tokens", |tx| {
        for token in [&later, &earlier, &other, &same_time] {
            tx.insert_api_token(token)?;
        }
        Ok(())
    });
    let ids: Vec<ApiTokenId> = read(store, |tx| tx.api_tokens(TENANT))
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(
        ids,
        [earlier.id, later.id, same_time.id],
        "api_tokens: the tenant's tokens by created_at, then id"
    );
    assert_eq!(
        read(store, |tx| tx.api_tokens("other")),
        vec![other],
        "api_tokens: another tenant's tokens stay apart"
    );
}

/// Revocation writes `revoked_at` once and nothing else; the row stays.
fn a_token_is_revoked_once_and_nothing_else_changes<S: Store>(store: &S) {
    let token = sample_token(1, TENANT);
    commit(store, "insert", |tx| tx.insert_api_token(&token));
    let revoked = commit(store, "revoke", |tx| tx.revoke_api_token(token.id, at(60)));
    let mut expected = token.clone();
    expected.revoked_at = Some(at(60));
    assert_eq!(
        revoked, expected,
        "revoke_api_token: returns the updated row"
    );
    assert_eq!(
        read(store, |tx| tx.api_token_by_digest(&token.token_sha256)),
        Some(expected.clone()),
        "revoke_api_token: the revocation is stored, the row kept"
    );
    assert!(
        matches!(
            store.transact(|tx| tx.revoke_api_token(token.id, at(90))),
            Err(TxError::Conflict(_))
        ),
        "revoke_api_token: a second revocation is a Conflict"
    );
    assert_eq!(
        read(store, |tx| tx.api_token(token.id)),
        Some(expected),
        "revoke_api_token: the first revocation time stands"
    );
    assert_eq!(
        store.transact(|tx| tx.revoke_api_token(token_id(7), at(60))),
        Err(TxError::NotFound),
        "revoke_api_token: an unknown id is NotFound"
    );
}

/// SPEC §20's event stream: a tenant's events across all its sessions, by id, strictly after
/// the cursor, never another tenant's; `last_event_id` is the highest id of all.
fn events_of_tenant_is_a_tail_of_that_tenant_only<S: Store>(store: &S) {
    assert_eq!(
        read(store, |tx| tx.last_event_id()),
        None,
        "last_event_id: none before the first event"
    );
    let a1 = seed_run(store, 1, RunStatus::Running);
    let a2 = seed_run(store, 2, RunStatus::Running);
    let mut other_session = sample_session(3);
    other_session.tenant_id = "other".to_owned();
    let mut b = sample_run(3, other_session.id, RunStatus::Running);
    b.tenant_id = "other".to_owned();
    commit(store, "seed other tenant", |tx| {
        tx.insert_session(&other_session)?;
        tx.insert_run(&b)
    });
    let mut ids = Vec::new();
    for (n, run) in [&a1, &b, &a2, &a1, &b, &a2].into_iter().enumerate() {
        let event = commit(store, "append", |tx| {
            tx.append_event(&sample_event(
                run,
                EventType::RunCheckpointed,
                json!({"n": n}),
                None,
            ))
        });
        ids.push((run.tenant_id.clone(), event.id));
    }
    let of = |tenant: &str| -> Vec<i64> {
        ids.iter()
            .filter(|(t, _)| t == tenant)
            .map(|(_, id)| *id)
            .collect()
    };
    let (mine, theirs) = (of(TENANT), of("other"));
    let page = |tenant: &str, after: Option<i64>, limit: usize| -> Vec<i64> {
        read(store, |tx| tx.events_of_tenant(tenant, after, limit))
            .into_iter()
            .map(|e| e.id)
            .collect()
    };
    assert_eq!(
        page(TENANT, None, 100),
        mine,
        "events_of_tenant: every session of the tenant, by id"
    );
    assert_eq!(page("other", None, 100), theirs, "events_of_tenant: other");
    assert_eq!(page(TENANT, None, 2), mine[..2].to_vec(), "limit");
    assert_eq!(
        page(TENANT, Some(mine[1]), 100),
        mine[2..].to_vec(),
        "events_of_tenant: strictly after the cursor"
    );
    assert_eq!(
        page(TENANT, Some(theirs[0]), 1),
        vec![mine[1]],
        "events_of_tenant: another tenant's id works as a cursor"
    );
    assert!(page(TENANT, Some(mine[3]), 100).is_empty(), "nothing after");
    assert!(page("nobody", None, 100).is_empty(), "an unknown tenant");
    let full = read(store, |tx| tx.events_of_tenant(TENANT, None, 1));
    let direct = read(store, |tx| tx.events_of_run(a1.id, None, 1));
    assert_eq!(full, direct, "events_of_tenant: whole stored events");
    assert_eq!(
        read(store, |tx| tx.last_event_id()),
        ids.iter().map(|(_, id)| *id).max(),
        "last_event_id: the highest id of any tenant"
    );
}
