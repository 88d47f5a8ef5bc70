//! SPEC §7.5 and §16 #7, end to end: every process that opens the store records the exact
//! policy it loaded, with the full hashes an auditor checks (the version is only a label);
//! one row and one `policy.profile.loaded` per version, however many processes load it.

use airlock_e2e::*;
use serde_json::Value;

/// `{policy_version: (profile_sha256, hardline_sha256, rule_count, loaded_by)}` from the store.
fn profiles(data: &DataDir) -> Vec<(String, String, String, i64, String)> {
    let conn = db(data);
    let mut stmt = conn
        .prepare(
            "SELECT policy_version, profile_sha256, hardline_sha256, rule_count, loaded_by \
             FROM policy_profiles ORDER BY policy_version",
        )
        .expect("query");
    stmt.query_map([], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
    })
    .expect("rows")
    .map(|r| r.expect("row"))
    .collect()
}

/// The payloads of the `policy.profile.loaded` process events, by `policy_version`.
fn loaded_events(data: &DataDir) -> Vec<Value> {
    let conn = db(data);
    let mut stmt = conn
        .prepare(
            "SELECT payload FROM process_events WHERE event_type = 'policy.profile.loaded' \
             ORDER BY json_extract(payload, '$.policy_version')",
        )
        .expect("query");
    stmt.query_map([], |r| r.get::<_, String>(0))
        .expect("rows")
        .map(|r| serde_json::from_str(&r.expect("row")).expect("payload JSON"))
        .collect()
}

/// What `airlock policy check --json` reports for these arguments.
fn checked(data: &DataDir, policy_args: &[&str]) -> Value {
    let mut args = policy_args.to_vec();
    args.extend(["policy", "check", "--json"]);
    data.json("operator", &args)
}

#[test]
fn each_loaded_policy_is_recorded_once_with_its_full_hashes() {
    let data = DataDir::new();
    let shipped = checked(&data, &[]);
    // The worker opens (and creates) the store; `approvals list` opens it again.
    assert_eq!(data.worker_until_idle(1_000).status.code(), Some(0));
    data.json("operator", &["approvals", "list"]);
    let edited_dir = short_expiry_policies(&data);
    let edited = checked(&data, &["--policy-dir", &edited_dir]);
    assert_ne!(shipped["profile_sha256"], edited["profile_sha256"]);
    assert_eq!(shipped["hardline_sha256"], edited["hardline_sha256"]);
    for _ in 0..2 {
        data.json(
            "operator",
            &["--policy-dir", &edited_dir, "approvals", "list"],
        );
    }

    let mut expected: Vec<&Value> = vec![&shipped, &edited];
    expected.sort_by_key(|v| v["policy_version"].as_str().unwrap_or_default().to_owned());
    let rows = profiles(&data);
    let events = loaded_events(&data);
    assert_eq!(rows.len(), 2, "one row per version: {rows:?}");
    assert_eq!(events.len(), 2, "one event per version: {events:?}");
    let loaded_by = format!("airlock/{}", env!("CARGO_PKG_VERSION"));
    for ((row, event), want) in rows.iter().zip(&events).zip(expected) {
        let (version, profile, hardline, rule_count, by) = row;
        assert_eq!(version, want["policy_version"].as_str().unwrap());
        assert_eq!(profile, want["profile_sha256"].as_str().unwrap());
        assert_eq!(hardline, want["hardline_sha256"].as_str().unwrap());
        assert_eq!(profile.len(), 64, "the full hash, not the label's prefix");
        assert_eq!(
            *rule_count,
            airlock_core::policy::Ruleset::shipped()
                .expect("the shipped policy loads")
                .rule_count() as i64
        );
        assert_eq!(by, &loaded_by);
        assert_eq!(event["policy_version"], want["policy_version"]);
        assert_eq!(event["profile_name"], "default");
        assert_eq!(event["profile_sha256"], want["profile_sha256"]);
        assert_eq!(event["hardline_sha256"], want["hardline_sha256"]);
    }
}
