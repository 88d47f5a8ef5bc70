//! What a client learns before it has a token: the protected-resource metadata document
//! (RFC 9728) and the `WWW-Authenticate` challenge of a 401 that points at it. MCP clients
//! (2025-06-18 and later) follow that pointer to find the authorization server, then ask it for a
//! token for this resource (RFC 8707), so both are derived from the configured `resource`, never
//! from a request's `Host` header.

use serde_json::{Value, json};
use url::Url;

use crate::config::AuthConfig;

/// The well-known name of the metadata document (RFC 9728 §3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The paths the document is served at on this server: the well-known name, and (for a
/// resource with a path) its path form, the name followed by the resource's path (RFC 9728
/// §3.1), which is where clients look first.
pub fn paths(resource: &Url) -> Vec<String> {
    let mut paths = vec![WELL_KNOWN.to_owned()];
    let path = resource.path().trim_end_matches('/');
    if !path.is_empty() {
        paths.push(format!("{WELL_KNOWN}{path}"));
    }
    paths
}

/// Where the document is, as the challenge names it: the resource's origin, then the
/// well-known name, then the resource's path.
pub fn url(resource: &Url) -> String {
    let path = resource.path().trim_end_matches('/');
    format!(
        "{}{WELL_KNOWN}{path}",
        resource.origin().ascii_serialization()
    )
}

/// The metadata document.
pub fn document(config: &AuthConfig) -> Value {
    let mut document = json!({
        "resource": config.resource.as_str(),
        "authorization_servers": [config.rules.issuer],
        "bearer_methods_supported": ["header"],
        "resource_name": "airlock",
    });
    if !config.scopes_supported.is_empty() {
        document["scopes_supported"] = json!(config.scopes_supported);
    }
    document
}

/// The `WWW-Authenticate` value of a 401: `Bearer`, the metadata's URL, and, when a token was
/// presented and refused, `error="invalid_token"` (RFC 6750 §3.1; a request without one gets no
/// error code).
pub fn challenge(resource: &Url, token_refused: bool) -> String {
    let mut value = format!("Bearer resource_metadata=\"{}\"", url(resource));
    if token_refused {
        value.push_str(", error=\"invalid_token\"");
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_with_a_path_has_the_path_form_first_in_its_challenge() {
        let resource = Url::parse("https://airlock.example.com:8443/mcp").expect("url");
        assert_eq!(
            paths(&resource),
            [WELL_KNOWN, "/.well-known/oauth-protected-resource/mcp"]
        );
        assert_eq!(
            challenge(&resource, true),
            "Bearer resource_metadata=\"https://airlock.example.com:8443/.well-known/oauth-protected-resource/mcp\", error=\"invalid_token\""
        );
        let root = Url::parse("https://airlock.example.com/").expect("url");
        assert_eq!(paths(&root), [WELL_KNOWN]);
        assert_eq!(
            challenge(&root, false),
            "Bearer resource_metadata=\"https://airlock.example.com/.well-known/oauth-protected-resource\""
        );
    }
}
