//! `airlock tokens create|list|revoke` (SPEC §20): API tokens for the HTTP API and console.
//! The caller's `--tenant`, `--principal` and `--scopes` are what the token stands for; its
//! text is printed once by `create` and never again (only its SHA-256 is stored).

use airlock_core::access::TokenGrant;
use airlock_core::ids::ApiTokenId;
use airlock_http::secret::new_token;
use airlock_http::wire::{TokenList, TokenRecord};
use clap::Subcommand;

use super::globals::Globals;
use super::output::{invalid_argument, record, service_error};
use crate::exit::Exit;

/// A token lives this long unless `--expires-in` says otherwise.
pub const DEFAULT_EXPIRY: &str = "90d";

#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Mint a token for --tenant, --principal and --scopes; prints it once.
    Create {
        /// `90d`, `12h`, `30m`, `3600s`, or `never`.
        #[arg(long, default_value = DEFAULT_EXPIRY)]
        expires_in: String,
        /// A note for `tokens list` (who or what holds it).
        #[arg(long)]
        label: Option<String>,
    },
    /// The tenant's tokens, oldest first, without their text.
    List,
    /// Revoke one of the tenant's tokens; its requests and console sessions stop at once.
    Revoke { id: ApiTokenId },
}

/// Seconds of a `90d` / `12h` / `30m` / `45s` duration; `None` for `never`.
pub fn parse_expiry(text: &str) -> Result<Option<i64>, String> {
    if text == "never" {
        return Ok(None);
    }
    super::duration::seconds(text).map(Some).ok_or_else(|| {
        format!(
            "--expires-in '{}': expected e.g. 90d, 12h, 30m, 3600s or never",
            text.escape_debug()
        )
    })
}

pub async fn run(globals: &Globals, command: TokensCommand) -> Exit {
    let principal = match globals.principal() {
        Ok(p) => p,
        Err(exit) => return exit,
    };
    match command {
        TokensCommand::Create { expires_in, label } => {
            let seconds = match parse_expiry(&expires_in) {
                Ok(seconds) => seconds,
                Err(message) => return invalid_argument(&message),
            };
            let app = match globals.open_app().await {
                Ok(app) => app,
                Err(exit) => return exit,
            };
            let control = app.control(None);
            let secret = match new_token() {
                Ok(secret) => secret,
                Err(e) => {
                    return service_error(&airlock_core::control::ServiceError::Storage(
                        e.to_string(),
                    ));
                }
            };
            let now = app.env.clock.now();
            let grant = TokenGrant {
                tenant_id: principal.tenant_id,
                principal_id: principal.principal_id,
                scopes: principal.scopes,
                label,
                expires_at: seconds.map(|s| now.saturating_add_seconds(s)),
            };
            match control.issue_token(&grant, &secret) {
                Ok(token) => record(&TokenRecord::new(&token, Some(secret.expose()))),
                Err(e) => service_error(&e),
            }
        }
        TokensCommand::List => {
            let app = match globals.open_existing_app().await {
                Ok(app) => app,
                Err(exit) => return exit,
            };
            match app.control(None).list_tokens(&principal.tenant_id) {
                Ok(tokens) => record(&TokenList {
                    items: tokens.iter().map(|t| TokenRecord::new(t, None)).collect(),
                }),
                Err(e) => service_error(&e),
            }
        }
        TokensCommand::Revoke { id } => {
            let app = match globals.open_existing_app().await {
                Ok(app) => app,
                Err(exit) => return exit,
            };
            match app.control(None).revoke_token(&principal.tenant_id, id) {
                Ok(token) => record(&TokenRecord::new(&token, None)),
                Err(e) => service_error(&e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiries_are_positive_durations_or_never() {
        assert_eq!(parse_expiry("90d"), Ok(Some(90 * 86_400)));
        assert_eq!(parse_expiry("12h"), Ok(Some(43_200)));
        assert_eq!(parse_expiry("30m"), Ok(Some(1800)));
        assert_eq!(parse_expiry("3600s"), Ok(Some(3600)));
        assert_eq!(parse_expiry("never"), Ok(None));
        for bad in [
            "",
            "d",
            "0d",
            "-1h",
            "10",
            "10w",
            "1.5h",
            "99999999999d",
            "h12",
            // A multi-byte last character once split the text inside it (a panic).
            "5ḿ",
        ] {
            assert!(parse_expiry(bad).is_err(), "{bad}");
        }
    }
}
