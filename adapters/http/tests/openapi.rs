//! The OpenAPI document (SPEC §20) is generated from the code and checked in as
//! `adapters/http/openapi.json`; this test fails when they differ. To accept a change on
//! purpose: `AIRLOCK_UPDATE_OPENAPI=1 cargo test -p airlock-http --test openapi`, then review
//! the diff of openapi.json.

use std::path::PathBuf;

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("openapi.json")
}

#[test]
fn the_checked_in_document_is_the_generated_one() {
    let generated = airlock_http::openapi::document_text();
    if std::env::var_os("AIRLOCK_UPDATE_OPENAPI").is_some() {
        std::fs::write(checked_in(), generated).expect("write openapi.json");
    }
    let stored = std::fs::read_to_string(checked_in()).unwrap_or_default();
    assert!(
        stored == generated,
        "adapters/http/openapi.json differs from the document the code generates; if the API \
         changed on purpose, run AIRLOCK_UPDATE_OPENAPI=1 cargo test -p airlock-http --test \
         openapi and review the diff"
    );
}

#[test]
fn the_document_is_openapi_3_1_and_covers_every_route_of_section_20() {
    let document: serde_json::Value =
        serde_json::from_str(airlock_http::openapi::document_text()).expect("JSON");
    assert_eq!(document["openapi"], "3.1.0");
    let paths = document["paths"].as_object().expect("paths");
    for (path, method) in [
        ("/healthz", "get"),
        ("/v1/approvals", "get"),
        ("/v1/approvals/{id}", "get"),
        ("/v1/approvals/{id}/approve", "post"),
        ("/v1/approvals/{id}/deny", "post"),
        ("/v1/invocations/uncertain", "get"),
        ("/v1/invocations/{id}/settle", "post"),
        ("/v1/runs", "post"),
        ("/v1/runs/{id}", "get"),
        ("/v1/runs/{id}/events", "get"),
        ("/v1/runs/{id}/cancel", "post"),
        ("/v1/conversations", "get"),
        ("/v1/conversations/{id}", "get"),
        ("/v1/conversations/{id}/clear-taint", "post"),
        ("/v1/events/stream", "get"),
        ("/v1/openapi.json", "get"),
        ("/v1/admin/reload", "post"),
        ("/v1/notify/targets", "get"),
        ("/v1/notify/targets", "post"),
        ("/v1/notify/targets/{id}", "delete"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} is not documented"
        );
    }
    assert_eq!(
        paths.len(),
        19,
        "every documented path is a route of §20 (and §22.1's conversations, issue 32's reload \
         and notification targets)"
    );
    assert_eq!(
        document["paths"]["/healthz"]["get"]["security"],
        serde_json::json!([{}]),
        "/healthz needs no token"
    );
    assert_eq!(
        document["security"],
        serde_json::json!([{"bearer": []}]),
        "every other route needs the bearer token"
    );
}
