//! The body (and content type) a target receives, in its format. Every string that may come from
//! an agent, a tool or an upstream server is escaped for the format it lands in:
//!
//! - **JSON** (generic webhooks): serialized by serde, and `<`, `>`, `&` written as `\u003c`,
//!   `\u003e`, `\u0026`, so a receiver that pastes a value into HTML cannot be handed markup.
//! - **Slack** (incoming-webhook blocks): values go into `mrkdwn` inside inline code or a code
//!   block, where Slack applies no formatting; `&`, `<`, `>` are entity-escaped as Slack requires
//!   (so `<!channel>` or `<https://evil|click>` stay text), and a backtick, which would end the
//!   code span, is replaced by `ˋ` (U+02CB). Headlines are `plain_text`.
//! - **ntfy**: the JSON publishing form (`{"topic", "title", "message", "priority", "tags",
//!   "click"}` posted to the server's root), so no value ever becomes an HTTP header; the message
//!   is plain text, with control characters other than newline replaced.

use serde_json::{Value, json};

use airlock_core::notify::NotifyEvent;

use crate::notice::{Notice, headline};

/// A target's format (kept with the target in the store, so core's type).
pub use airlock_core::notify::NotifyFormat as Format;

/// What is posted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// The longest arguments text a message shows (characters).
pub const MAX_ARGUMENTS_CHARS: usize = 1500;

/// `notice` as `format` wants it. `ntfy_topic` is the topic of an ntfy target (the last path
/// segment of its URL).
pub fn render(format: Format, notice: &Notice, ntfy_topic: &str) -> Rendered {
    match format {
        Format::Json => Rendered {
            content_type: "application/json",
            body: html_safe_json(&generic(notice)).into_bytes(),
        },
        Format::Slack => Rendered {
            content_type: "application/json",
            body: slack(notice).to_string().into_bytes(),
        },
        Format::Ntfy => Rendered {
            content_type: "application/json",
            body: ntfy(notice, ntfy_topic).to_string().into_bytes(),
        },
    }
}

fn generic(notice: &Notice) -> Value {
    json!({
        "id": notice.event_id,
        "type": notice.kind.as_str(),
        "at": notice.at,
        "tenant_id": notice.tenant_id,
        "principal_id": notice.principal_id,
        "tool": notice.tool,
        "risk": notice.risk,
        "arguments": notice.arguments,
        "expires_at": notice.expires_at,
        "approval_id": notice.approval_id,
        "invocation_id": notice.invocation_id,
        "run_id": notice.run_id,
        "link": notice.link,
    })
}

/// Serialized JSON with `<`, `>` and `&` as `\u` escapes. Those characters occur only inside
/// strings in JSON text, so the replacement keeps the document equal.
fn html_safe_json(value: &Value) -> String {
    value
        .to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// Text for Slack `mrkdwn`: entities for `&`, `<`, `>`, and no backtick.
fn slack_text(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('`', "\u{2cb}")
}

/// The arguments as pretty JSON, cut to [`MAX_ARGUMENTS_CHARS`].
fn arguments_text(arguments: &Value) -> String {
    let text = serde_json::to_string_pretty(arguments).unwrap_or_else(|_| arguments.to_string());
    match text.char_indices().nth(MAX_ARGUMENTS_CHARS) {
        Some((cut, _)) => format!("{}\n…", &text[..cut]),
        None => text,
    }
}

fn slack(notice: &Notice) -> Value {
    let code = |text: &str| format!("`{}`", slack_text(text));
    let mut fields = vec![
        json!({"type": "mrkdwn", "text": format!("*Tool*\n{}", code(&notice.tool))}),
        json!({"type": "mrkdwn", "text": format!("*Risk*\n{}", code(&notice.risk))}),
        json!({"type": "mrkdwn", "text": format!("*For*\n{}", code(&notice.principal_id))}),
        json!({"type": "mrkdwn", "text": format!("*Tenant*\n{}", code(&notice.tenant_id))}),
    ];
    if let Some(expires) = &notice.expires_at {
        fields.push(json!({"type": "mrkdwn", "text": format!("*Expires*\n{}", code(expires))}));
    }
    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": headline(notice.kind)}}),
        json!({"type": "section", "fields": fields}),
        json!({"type": "section", "text": {"type": "mrkdwn",
            "text": format!("*Arguments* (redacted)\n```{}```", slack_text(&arguments_text(&notice.arguments)))}}),
    ];
    if let Some(link) = &notice.link {
        let label = match notice.kind {
            NotifyEvent::CallUncertain => "Settle in the console",
            _ => "Review in the console",
        };
        blocks.push(json!({"type": "actions", "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": label}, "url": link}
        ]}));
    }
    json!({
        // The fallback for notifications and clients without blocks: plain, no markup.
        "text": format!("{}: {}", headline(notice.kind), slack_text(&notice.tool)),
        "blocks": blocks,
    })
}

/// Plain text with control characters (other than newline) replaced.
fn plain(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\n' {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect()
}

fn ntfy(notice: &Notice, topic: &str) -> Value {
    let mut message = format!(
        "Tool: {}\nRisk: {}\nFor: {} ({})\n",
        plain(&notice.tool),
        plain(&notice.risk),
        plain(&notice.principal_id),
        plain(&notice.tenant_id)
    );
    if let Some(expires) = &notice.expires_at {
        message.push_str(&format!("Expires: {}\n", plain(expires)));
    }
    message.push_str(&format!(
        "Arguments (redacted): {}",
        plain(&arguments_text(&notice.arguments))
    ));
    let priority = match notice.risk.as_str() {
        "critical" => 5,
        "high" => 4,
        _ => 3,
    };
    let mut body = json!({
        "topic": topic,
        "title": headline(notice.kind),
        "message": message,
        "priority": priority,
        "tags": [notice.kind.as_str()],
    });
    if let Some(link) = &notice.link {
        body["click"] = json!(link);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hostile() -> Notice {
        Notice {
            kind: NotifyEvent::ApprovalRequested,
            event_id: 42,
            tenant_id: "acme".to_owned(),
            principal_id: "alice`<!channel>`".to_owned(),
            tool: "mail.send<script>alert(1)</script>".to_owned(),
            risk: "high".to_owned(),
            arguments: json!({"to": "<!here> *bold* `code` & <https://evil.example|click>",
                "body": "</script><img src=x onerror=alert(1)>"}),
            expires_at: Some("2026-12-06T12:00:00Z".to_owned()),
            at: "2026-12-06T10:00:00Z".to_owned(),
            approval_id: Some("0b5e55ed-0000-4000-8000-000000000001".to_owned()),
            invocation_id: "0b5e55ed-0000-4000-8000-000000000002".to_owned(),
            run_id: "0b5e55ed-0000-4000-8000-000000000003".to_owned(),
            link: Some(
                "https://airlock.example/approvals/0b5e55ed-0000-4000-8000-000000000001".to_owned(),
            ),
        }
    }

    #[test]
    fn json_carries_every_field_and_no_markup_character() {
        let rendered = render(Format::Json, &hostile(), "");
        let text = String::from_utf8(rendered.body.clone()).unwrap();
        for c in ['<', '>', '&'] {
            assert!(!text.contains(c), "{c:?} in {text}");
        }
        let value: Value = serde_json::from_slice(&rendered.body).unwrap();
        assert_eq!(
            value["tool"], "mail.send<script>alert(1)</script>",
            "the same document"
        );
        assert_eq!(value["type"], "approval.requested");
        assert_eq!(value["id"], 42);
        assert_eq!(value["link"], hostile().link.unwrap());
    }

    #[test]
    fn slack_values_are_inert_code_with_entities_and_no_backtick() {
        let rendered = render(Format::Slack, &hostile(), "");
        let value: Value = serde_json::from_slice(&rendered.body).unwrap();
        let mut texts = Vec::new();
        collect_strings(&value, &mut texts);
        let mrkdwn: String = texts.join("\n");
        for raw in ["<script>", "<!channel>", "<!here>", "<https://evil", "<img"] {
            assert!(!mrkdwn.contains(raw), "{raw} reached Slack: {mrkdwn}");
        }
        assert!(mrkdwn.contains("&lt;script&gt;"), "{mrkdwn}");
        assert!(mrkdwn.contains("&lt;!channel&gt;"), "{mrkdwn}");
        assert!(mrkdwn.contains("&amp;"), "{mrkdwn}");
        // Each value is one code span: its backticks are the ones we wrote.
        let tool_field = value["blocks"][1]["fields"][0]["text"].as_str().unwrap();
        assert_eq!(tool_field.matches('`').count(), 2, "{tool_field}");
        let for_field = value["blocks"][1]["fields"][2]["text"].as_str().unwrap();
        assert_eq!(for_field.matches('`').count(), 2, "{for_field}");
        assert_eq!(value["blocks"][0]["text"]["type"], "plain_text");
        assert_eq!(
            value["blocks"][3]["elements"][0]["url"],
            hostile().link.unwrap()
        );
    }

    #[test]
    fn ntfy_is_a_json_publish_with_plain_text_and_the_topic() {
        let mut notice = hostile();
        notice.tool = "evil\r\nX-Injected: 1".to_owned();
        let rendered = render(Format::Ntfy, &notice, "approvals");
        let value: Value = serde_json::from_slice(&rendered.body).unwrap();
        assert_eq!(value["topic"], "approvals");
        assert_eq!(value["priority"], 4, "high risk");
        assert_eq!(value["click"], notice.link.unwrap());
        let message = value["message"].as_str().unwrap();
        assert!(
            message.contains("Tool: evil\u{fffd}\nX-Injected: 1"),
            "{message}"
        );
        assert!(!message.contains('\r'));
        assert_eq!(value["title"], "Approval requested");
    }

    #[test]
    fn long_arguments_are_cut_and_secrets_never_arrive() {
        let approval_args =
            json!({"api_key": "sk-live-0123456789abcdef", "text": "x".repeat(5000)});
        let mut notice = hostile();
        notice.arguments = airlock_core::approval::redact::redact(&approval_args);
        for format in [Format::Json, Format::Slack, Format::Ntfy] {
            let body = String::from_utf8(render(format, &notice, "t").body).unwrap();
            assert!(!body.contains("sk-live"), "{format:?}");
            assert!(body.len() < 6000, "{format:?}: {} bytes", body.len());
        }
    }

    fn collect_strings(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::String(s) => out.push(s.clone()),
            Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
            Value::Object(map) => map
                .iter()
                .filter(|(k, _)| k.as_str() != "url")
                .for_each(|(_, v)| collect_strings(v, out)),
            _ => {}
        }
    }
}
