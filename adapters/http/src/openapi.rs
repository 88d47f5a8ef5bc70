//! The OpenAPI 3.1 document of the API (SPEC §20), generated from the route annotations and the
//! wire types, so it describes what the code serves. It is checked in as
//! `adapters/http/openapi.json`; a test fails when the two differ.

use std::sync::OnceLock;

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::extract::Caller;
use crate::problem::ProblemBody;
use crate::{admin, api, notify, policy_reload, problem, stream, wire};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "airlock",
        description = "Approve, deny and settle the tool calls an agent proposes. Every /v1 route \
            needs `Authorization: Bearer alk_…`; the caller is the token's tenant, principal and \
            scopes. Errors are RFC 9457 problem details whose `code` is the CLI's error code.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        api::healthz,
        api::list_approvals,
        api::get_approval,
        api::approve,
        api::deny,
        api::list_uncertain,
        api::settle,
        api::submit_run,
        api::get_run,
        api::run_events,
        api::cancel_run,
        api::list_conversations,
        api::get_conversation,
        api::clear_conversation_taint,
        admin::reload,
        notify::list_targets,
        notify::add_target,
        notify::remove_target,
        stream::stream,
        openapi,
    ),
    components(schemas(
        problem::ProblemBody,
        wire::ApprovalRecord,
        wire::ApprovalPage,
        wire::ResolveBody,
        wire::ResolvedRecord,
        wire::InvocationRecord,
        wire::UncertainPage,
        wire::SettleBody,
        wire::SettlementOutcomeWire,
        wire::SettlementRecord,
        wire::SubmittedRecord,
        wire::RunRecord,
        wire::LimitsRecord,
        wire::FailureRecord,
        wire::EventRecord,
        wire::EventPage,
        wire::CancelRecord,
        wire::Health,
        wire::RunScriptDoc,
        wire::LimitsDoc,
        wire::ScopeDoc,
        wire::TrustDoc,
        wire::SseMessageDoc,
        wire::StepDoc,
        wire::CallDoc,
        wire::ConversationRecord,
        wire::ConversationPage,
        wire::ConversationCallRecord,
        wire::ConversationDetail,
        wire::ClearTaintBody,
        policy_reload::ReloadedRecord,
        notify::TargetRecord,
        notify::TargetList,
        notify::NewTargetBody,
        notify::FormatName,
        notify::EventName,
    )),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "approvals", description = "The approval queue (SPEC §10)"),
        (name = "invocations", description = "The UNCERTAIN review queue (SPEC §9.5)"),
        (name = "runs", description = "Runs and their events (SPEC §8, §13)"),
        (name = "conversations", description = "MCP conversations: their calls and taint (SPEC §22.1)"),
        (name = "events", description = "The tenant's event stream"),
        (name = "admin", description = "Operating the server: reload its policy (scope policy.admin)"),
        (name = "notify", description = "Where the tenant's approvers are notified: signed webhooks, Slack, ntfy (scope notify.admin)"),
        (name = "health", description = "Liveness"),
        (name = "meta", description = "This document"),
    ),
)]
pub struct ApiDoc;

/// Declares the bearer scheme every `/v1` route requires.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = openapi.components.as_mut() {
            let mut scheme = Http::new(HttpAuthScheme::Bearer);
            scheme.bearer_format = Some("alk_ followed by 64 hex digits".to_owned());
            components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
        }
    }
}

/// The document as pretty JSON with a final newline, exactly as checked in.
pub fn document_text() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut document = ApiDoc::openapi();
        document.info.version = env!("CARGO_PKG_VERSION").to_owned();
        let mut text = document
            .to_pretty_json()
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        text.push('\n');
        text
    })
}

/// This document (needs a token like every `/v1` route).
#[utoipa::path(get, path = "/v1/openapi.json", tag = "meta",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document", body = Object),
        (status = 401, body = ProblemBody, content_type = "application/problem+json"),
    ))]
pub async fn openapi(Caller(_caller): Caller) -> Response {
    let mut response = document_text().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
