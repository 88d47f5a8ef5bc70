//! RFC 9457 problem details (SPEC §20): every error of the API is `application/problem+json`
//! with `code` = Appendix A's snake_case code, and one status per code.

use airlock_core::access::AuthError;
use airlock_core::control::ServiceError;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::wire::ApprovalRecord;

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Why a request was refused, with its status. Built from a service error, an authentication
/// failure, or a malformed request.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub status: StatusCode,
    pub code: &'static str,
    pub detail: String,
    /// For `already_resolved_differently`: the approval as it stands (boxed: errors stay
    /// small on the common path).
    pub approval: Option<Box<ApprovalRecord>>,
}

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProblemBody {
    /// `urn:airlock:problem:{code}`.
    #[serde(rename = "type")]
    pub problem_type: String,
    /// A short summary of the kind of problem; the same for every instance of a code.
    pub title: String,
    pub status: u16,
    /// What went wrong with this request. Never echoes request text beyond ids.
    pub detail: String,
    /// Appendix A's snake_case code.
    #[schema(example = "not_found")]
    pub code: String,
    /// Only for `already_resolved_differently`: the approval as it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalRecord>,
}

impl Problem {
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            code,
            detail: detail.into(),
            approval: None,
        }
    }

    /// 400 `invalid_argument`.
    pub fn invalid(detail: impl Into<String>) -> Problem {
        Problem::new(StatusCode::BAD_REQUEST, "invalid_argument", detail)
    }

    /// 401: one answer for every authentication failure, so a caller cannot tell an unknown
    /// token from a revoked or expired one.
    pub fn unauthenticated() -> Problem {
        Problem::new(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "a valid bearer token is required",
        )
    }

    /// 404 for a path no route serves.
    pub fn no_route() -> Problem {
        Problem::new(StatusCode::NOT_FOUND, "not_found", "no such resource")
    }

    /// 413 for a body over the limit.
    pub fn too_large() -> Problem {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "request bodies are limited to 1 MiB",
        )
    }

    fn title(&self) -> &'static str {
        match self.code {
            "invalid_argument" => "Invalid argument",
            "unauthenticated" => "Authentication required",
            "forbidden" => "Forbidden",
            "self_approval" => "Self-approval is not allowed",
            "not_found" => "Not found",
            "conflict" => "Conflict",
            "no_longer_pending" => "The approval is no longer pending",
            "already_resolved_differently" => "Already resolved differently",
            "expired" => "Expired",
            "payload_too_large" => "Payload too large",
            "misdirected_request" => "Misdirected request",
            "method_not_allowed" => "Method not allowed",
            "storage" => "Storage unavailable",
            "policy_load" => "The policy files did not load",
            _ => "Error",
        }
    }

    pub fn body(&self) -> ProblemBody {
        ProblemBody {
            problem_type: format!("urn:airlock:problem:{}", self.code),
            title: self.title().to_owned(),
            status: self.status.as_u16(),
            detail: self.detail.clone(),
            code: self.code.to_owned(),
            approval: self.approval.as_deref().cloned(),
        }
    }
}

/// The status of each service error (SPEC §20).
pub fn status_of(error: &ServiceError) -> StatusCode {
    match error {
        ServiceError::InvalidArgument(_) => StatusCode::BAD_REQUEST,
        ServiceError::Forbidden(_) | ServiceError::SelfApproval => StatusCode::FORBIDDEN,
        ServiceError::NotFound => StatusCode::NOT_FOUND,
        ServiceError::Conflict(_) | ServiceError::NoLongerPending { .. } => StatusCode::CONFLICT,
        ServiceError::Expired => StatusCode::GONE,
        ServiceError::Storage(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

impl From<ServiceError> for Problem {
    fn from(error: ServiceError) -> Problem {
        let status = status_of(&error);
        // A storage error's text may name files and SQL; the operator finds it in the log.
        let detail = match &error {
            ServiceError::Storage(message) => {
                tracing::error!(%message, "storage error behind an HTTP request");
                "the store is unavailable; see the server log".to_owned()
            }
            other => other.to_string(),
        };
        Problem::new(status, error.code(), detail)
    }
}

impl From<AuthError> for Problem {
    fn from(error: AuthError) -> Problem {
        match error {
            AuthError::Storage(message) => Problem::from(ServiceError::Storage(message)),
            _ => Problem::unauthenticated(),
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"airlock\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_core::vocab::ApprovalStatus;

    #[test]
    fn every_service_error_has_the_status_of_section_20() {
        let cases = [
            (
                ServiceError::InvalidArgument("x".into()),
                400,
                "invalid_argument",
            ),
            (ServiceError::Forbidden("x".into()), 403, "forbidden"),
            (ServiceError::SelfApproval, 403, "self_approval"),
            (ServiceError::NotFound, 404, "not_found"),
            (ServiceError::Conflict("x".into()), 409, "conflict"),
            (
                ServiceError::NoLongerPending {
                    status: ApprovalStatus::Expired,
                },
                409,
                "no_longer_pending",
            ),
            (ServiceError::Expired, 410, "expired"),
            (ServiceError::Storage("disk".into()), 503, "storage"),
        ];
        for (error, status, code) in cases {
            let problem = Problem::from(error);
            assert_eq!(problem.status.as_u16(), status, "{code}");
            assert_eq!(problem.code, code);
            assert_eq!(
                problem.body().problem_type,
                format!("urn:airlock:problem:{code}")
            );
        }
        assert!(
            !Problem::from(ServiceError::Storage("/secret/path.sqlite3".into()))
                .detail
                .contains("secret"),
            "storage details stay in the log"
        );
    }

    #[test]
    fn every_authentication_failure_reads_the_same() {
        let bodies: Vec<ProblemBody> = [
            AuthError::Missing,
            AuthError::Malformed,
            AuthError::Unknown,
            AuthError::Expired,
            AuthError::Revoked,
        ]
        .into_iter()
        .map(|e| Problem::from(e).body())
        .collect();
        assert!(bodies.iter().all(|b| *b == bodies[0] && b.status == 401));
        assert_eq!(Problem::from(AuthError::Storage("x".into())).status, 503);
    }
}
