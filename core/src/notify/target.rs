//! A notification target: where a tenant's approvers are told, what they are told of, in which
//! format, and with which signing secret; and how far its delivery has come.

use std::collections::BTreeSet;

use crate::ids::NotifyTargetId;
use crate::time::Timestamp;

airlock_policy::wire_enum! {
    /// The body a target receives (`airlock-notify` renders each).
    NotifyFormat: "notification format" {
        /// A generic webhook: the notice as one JSON object.
        Json = "json",
        /// A Slack-compatible incoming webhook: Block Kit blocks.
        Slack = "slack",
        /// An ntfy server: the JSON publishing form; the URL's last path segment is the topic.
        Ntfy = "ntfy",
    }
}

airlock_policy::wire_enum! {
    /// The events a target may subscribe to: the three that need a person.
    NotifyEvent: "notification event" {
        ApprovalRequested = "approval.requested",
        ApprovalExpired = "approval.expired",
        /// A call's outcome became unknown (UNCERTAIN): a human must settle it.
        CallUncertain = "tool.call.uncertain",
    }
}

impl NotifyEvent {
    /// The subscription an event of the log answers to, if any.
    pub fn of(event_type: crate::events::EventType) -> Option<NotifyEvent> {
        use crate::events::EventType;
        match event_type {
            EventType::ApprovalRequested => Some(NotifyEvent::ApprovalRequested),
            EventType::ApprovalExpired => Some(NotifyEvent::ApprovalExpired),
            EventType::ToolCallUncertain => Some(NotifyEvent::CallUncertain),
            _ => None,
        }
    }
}

/// The prefix an environment variable holding a signing secret must have. A target names its
/// secret's variable, and the notifier reads it in its own process: without a prefix, whoever
/// manages targets could make the notifier key its signatures with any variable of the server
/// (an OAuth client secret, a database password). The name is all anyone can read back.
///
/// A secret is also **the tenant's own** ([`SecretSource::check_for`]): its variable is named
/// `AIRLOCK_NOTIFY_<tag>_…` and its file lies in a directory named `<tag>`, where the tag is
/// [`tenant_tag`]. Otherwise one tenant's administrator could name another tenant's secret and
/// have the server sign requests of their choosing with it.
pub const SECRET_ENV_PREFIX: &str = "AIRLOCK_NOTIFY_";

/// A tenant's tag in its secrets' names: `T` and the first 16 hex digits (upper case) of the
/// SHA-256 of the tenant id. A hash, because tenant ids may hold any character and two ids must
/// never share a tag; `airlock notify secret-name` prints it.
pub fn tenant_tag(tenant: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(tenant.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02X}")).collect();
    format!("T{hex}")
}

/// The longest target URL, label and secret file path, in bytes.
pub const MAX_URL_BYTES: usize = 2048;
pub const MAX_LABEL_CHARS: usize = 200;
pub const MAX_SECRET_PATH_BYTES: usize = 4096;

/// Where a target's signing secret is. The store keeps only this reference, never the secret:
/// a copy of the database (a backup, a replica) then lets nobody forge deliveries, and the
/// secret is rotated by changing the variable or the file, with no store write.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum SecretSource {
    /// `env:NAME`: an environment variable of the notifying process, named `AIRLOCK_NOTIFY_…`.
    Env(String),
    /// `file:/absolute/path`: a file the notifying process reads (surrounding whitespace is
    /// not part of the secret).
    File(String),
}

impl SecretSource {
    /// Parses `env:NAME` or `file:/absolute/path`.
    pub fn parse(text: &str) -> Result<SecretSource, String> {
        if let Some(name) = text.strip_prefix("env:") {
            let valid = name.starts_with(SECRET_ENV_PREFIX)
                && name.len() > SECRET_ENV_PREFIX.len()
                && name.len() <= 128
                && name
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
            if !valid {
                return Err(format!(
                    "the secret's environment variable must be named {SECRET_ENV_PREFIX}… \
                     (A–Z, 0–9, _; at most 128 characters)"
                ));
            }
            return Ok(SecretSource::Env(name.to_owned()));
        }
        if let Some(path) = text.strip_prefix("file:") {
            if !path.starts_with('/')
                || path.len() > MAX_SECRET_PATH_BYTES
                || path.chars().any(char::is_control)
            {
                return Err(format!(
                    "the secret's file must be an absolute path of at most \
                     {MAX_SECRET_PATH_BYTES} bytes without control characters"
                ));
            }
            return Ok(SecretSource::File(path.to_owned()));
        }
        Err("the secret must be given as env:AIRLOCK_NOTIFY_… or file:/absolute/path".to_owned())
    }

    /// Whether this secret is `tenant`'s own: a variable named `AIRLOCK_NOTIFY_<tag>_…`, or a
    /// file in a directory named `<tag>` (no `.` or `..` component), where the tag is
    /// [`tenant_tag`]. Checked when a target is added and again before each delivery.
    pub fn check_for(&self, tenant: &str) -> Result<(), String> {
        let tag = tenant_tag(tenant);
        let own = match self {
            SecretSource::Env(name) => name
                .strip_prefix(SECRET_ENV_PREFIX)
                .and_then(|rest| rest.strip_prefix(tag.as_str()))
                .and_then(|rest| rest.strip_prefix('_'))
                .is_some_and(|rest| !rest.is_empty()),
            SecretSource::File(path) => {
                let components: Vec<&str> = path.split('/').collect();
                !components.iter().any(|c| *c == "." || *c == "..")
                    && components[..components.len().saturating_sub(1)].contains(&tag.as_str())
            }
        };
        if own {
            Ok(())
        } else {
            Err(format!(
                "a secret of tenant '{}' is the environment variable \
                 {SECRET_ENV_PREFIX}{tag}_… or a file in a directory named {tag} \
                 (`airlock notify secret-name` prints them)",
                tenant.escape_debug()
            ))
        }
    }

    /// The `env:…` / `file:…` spelling [`SecretSource::parse`] reads.
    pub fn to_text(&self) -> String {
        match self {
            SecretSource::Env(name) => format!("env:{name}"),
            SecretSource::File(path) => format!("file:{path}"),
        }
    }
}

/// How far a target's delivery has come, in the tenant's event log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    /// Every event with an id up to this one is handled: delivered, given up, or not
    /// subscribed to.
    pub after: i64,
    /// Failed attempts at the first event after `after`.
    pub attempts: u32,
    /// No attempt at it before this time (the back-off after a failed attempt).
    pub retry_at: Option<Timestamp>,
}

impl Progress {
    /// Handled through `event_id`, nothing pending.
    pub fn past(event_id: i64) -> Progress {
        Progress {
            after: event_id,
            attempts: 0,
            retry_at: None,
        }
    }
}

/// One row of `notify_leases`: which process delivers a tenant's notifications, until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyLease {
    pub tenant_id: String,
    pub holder: String,
    pub expires_at: Timestamp,
}

/// One row of `notify_targets`. Rows are never deleted: a removed target stays as the record of
/// where notifications went, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyTarget {
    pub id: NotifyTargetId,
    pub tenant_id: String,
    /// `http://` or `https://`. May itself be a credential (a Slack webhook's path is): it is
    /// shown only as [`NotifyTarget::shown_url`] outside the store.
    pub url: String,
    pub events: BTreeSet<NotifyEvent>,
    pub format: NotifyFormat,
    pub secret: SecretSource,
    pub label: Option<String>,
    /// Who added it (a principal id).
    pub created_by: String,
    pub created_at: Timestamp,
    /// Set once by removal, never cleared.
    pub removed_at: Option<Timestamp>,
    pub progress: Progress,
}

impl NotifyTarget {
    /// The URL as lists and events show it: scheme and authority, and `/…` in place of a path,
    /// which for several services (Slack incoming webhooks) is the credential.
    pub fn shown_url(&self) -> String {
        shown_url(&self.url)
    }
}

/// See [`NotifyTarget::shown_url`].
pub fn shown_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if path.is_empty() || path == "/" {
        format!("{scheme}://{authority}/")
    } else {
        format!("{scheme}://{authority}/…")
    }
}

/// An ntfy target's topic: the last non-empty segment of its URL's path.
pub fn ntfy_topic(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = &rest[..rest.find(['?', '#']).unwrap_or(rest.len())];
    let path = &rest[rest.find('/')?..];
    path.split('/').rfind(|s| !s.is_empty())
}

/// Checks a target URL: `http` or `https`, a host, no user information (a password in a URL
/// ends up in logs), no fragment, no whitespace or control characters, at most
/// [`MAX_URL_BYTES`]. The adapter parses it fully before it sends anything.
pub fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| "the URL must start with http:// or https://".to_owned())?;
    if url.len() > MAX_URL_BYTES {
        return Err(format!("the URL must be at most {MAX_URL_BYTES} bytes"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the URL must not contain whitespace or control characters".to_owned());
    }
    if url.contains('#') {
        return Err("the URL must not have a fragment".to_owned());
    }
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    if authority.contains('@') {
        return Err("the URL must not carry user information (user:password@)".to_owned());
    }
    let (host, port) = authority
        .rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or((authority, None), |(host, port)| (host, Some(port)));
    if port.is_some_and(|p| {
        p.is_empty() || p.len() > 5 || p.parse::<u32>().map_or(true, |n| n > 65_535)
    }) {
        return Err("the URL's port must be 0..=65535".to_owned());
    }
    if host.is_empty() || host == "[]" {
        return Err("the URL must name a host".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_shown_without_their_path() {
        for good in [
            "https://hooks.slack.com/services/T0/B0/XYZ",
            "http://127.0.0.1:8080/hook?x=1",
            "https://[::1]:9/",
            "https://ntfy.example",
        ] {
            assert_eq!(check_url(good), Ok(()), "{good}");
        }
        for bad in [
            "ftp://x/",
            "https://",
            "https://:80/",
            "https://user:pw@host/",
            "https://host/a b",
            "https://host/#frag",
            "javascript:alert(1)",
            "https://host/\u{7}",
            "https://host:65536/",
            "https://host:/",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
        assert_eq!(
            shown_url("https://hooks.slack.com/services/T0/B0/XYZ"),
            "https://hooks.slack.com/…"
        );
        assert_eq!(shown_url("http://127.0.0.1:8080"), "http://127.0.0.1:8080/");
        assert_eq!(shown_url("http://h:1?token=x"), "http://h:1/…");
    }

    #[test]
    fn a_secret_is_the_tenants_own() {
        let tag = tenant_tag("acme");
        assert_eq!(tag.len(), 17);
        assert_ne!(tag, tenant_tag("acme2"));
        let own = [
            format!("env:AIRLOCK_NOTIFY_{tag}_SLACK"),
            format!("file:/etc/airlock/notify/{tag}/slack.key"),
        ];
        for text in &own {
            let source = SecretSource::parse(text).expect("parses");
            assert_eq!(source.check_for("acme"), Ok(()), "{text}");
            assert!(source.check_for("other").is_err(), "{text} is not other's");
        }
        for text in [
            "env:AIRLOCK_NOTIFY_SLACK".to_owned(),
            format!("env:AIRLOCK_NOTIFY_{tag}_"),
            format!("env:AIRLOCK_NOTIFY_{tag}X_A"),
            format!("file:/etc/{tag}"),
            format!("file:/etc/{tag}/../other/key"),
            format!("file:/etc/./{tag}/key"),
            "file:/proc/self/environ".to_owned(),
        ] {
            let source = SecretSource::parse(&text).expect("parses");
            assert!(source.check_for("acme").is_err(), "{text}");
        }
    }

    #[test]
    fn a_secret_is_a_prefixed_variable_or_an_absolute_file() {
        assert_eq!(
            SecretSource::parse("env:AIRLOCK_NOTIFY_SLACK"),
            Ok(SecretSource::Env("AIRLOCK_NOTIFY_SLACK".to_owned()))
        );
        assert_eq!(
            SecretSource::parse("file:/etc/airlock/hook.key").map(|s| s.to_text()),
            Ok("file:/etc/airlock/hook.key".to_owned())
        );
        for bad in [
            "env:AIRLOCK_OAUTH_CLIENT_SECRET",
            "env:AIRLOCK_NOTIFY_",
            "env:AIRLOCK_NOTIFY_a",
            "env:PATH",
            "file:relative/key",
            "file:/a\nb",
            "secret",
            "",
        ] {
            assert!(SecretSource::parse(bad).is_err(), "{bad}");
        }
    }
}
