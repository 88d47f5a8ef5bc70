//! The shipped-rule examples of SPEC §6.3, each run through the full engine under the shipped
//! ruleset in both directions (SPEC §16 #2, #5): a "matches" example is denied with its rule's
//! `message_code` whatever the matrix says; a "does not match" example gets the precise decision
//! the matrix (and nothing else) gives it. Also: no shipped rule matches its own `near_miss`.

use airlock_policy::action::{JsonMap, ProposedAction};
use airlock_policy::testing::{shipped_ruleset, tool_call};
use airlock_policy::vocab::{
    HardlineRuleKind, IdempotencyClass, PolicyDecisionType, SideEffectClass, TargetKind,
};
use airlock_policy::{Ruleset, evaluate};
use serde_json::{Value, json};

/// Code execution in an isolated sandbox: the matrix allows it, so only a hardline rule denies.
fn code_execution(arguments: Value) -> ProposedAction {
    tool_call(
        SideEffectClass::CodeExecution,
        "sandbox.exec",
        IdempotencyClass::NonIdempotent,
        TargetKind::Sandbox,
        arguments,
    )
}

/// A workspace write by an in-process tool: the matrix allows it iff `path` stays inside.
fn workspace_write(arguments: Value) -> ProposedAction {
    tool_call(
        SideEffectClass::WorkspaceWrite,
        "workspace.write",
        IdempotencyClass::Idempotent,
        TargetKind::InProcess,
        arguments,
    )
}

/// `web.fetch` on a network-enabled web provider: `host_on_allowlist` holds, so the matrix allows.
fn network_read(arguments: Value) -> ProposedAction {
    tool_call(
        SideEffectClass::NetworkRead,
        "web.fetch",
        IdempotencyClass::ReadOnly,
        TargetKind::WebProvider,
        arguments,
    )
}

/// An external write: the matrix requires approval.
fn external_write(arguments: Value) -> ProposedAction {
    tool_call(
        SideEffectClass::ExternalWrite,
        "crm.update",
        IdempotencyClass::NonIdempotent,
        TargetKind::McpServer,
        arguments,
    )
}

/// Asserts that every action is denied by the hardline rule `rule_id` with `message_code`.
fn assert_denied_by(
    ruleset: &Ruleset,
    rule_id: &str,
    message_code: &str,
    examples: &[(&str, ProposedAction)],
) {
    let mut failures = Vec::new();
    for (example, action) in examples {
        let decision = evaluate(action, ruleset);
        let expected = (
            PolicyDecisionType::Deny,
            message_code.to_owned(),
            format!("Hardline rule {rule_id} denied the action."),
        );
        let got = (
            decision.decision,
            decision.reason_code.clone(),
            decision.explanation.clone(),
        );
        if got != expected {
            failures.push(format!(
                "{rule_id} must match {example:?} as {}: expected {expected:?}, got {got:?}",
                action.side_effect
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Asserts that every action gets exactly the given matrix decision, and never `message_code`.
fn assert_matrix_decides(
    ruleset: &Ruleset,
    message_code: &str,
    examples: &[(&str, ProposedAction, PolicyDecisionType)],
) {
    let mut failures = Vec::new();
    for (example, action, expected_decision) in examples {
        let decision = evaluate(action, ruleset);
        if decision.reason_code == message_code {
            failures.push(format!(
                "{example:?} as {} must not match, but was denied with {message_code}",
                action.side_effect
            ));
            continue;
        }
        let expected = (
            *expected_decision,
            format!("policy.matrix.{}", action.side_effect),
        );
        let got = (decision.decision, decision.reason_code.clone());
        if got != expected {
            failures.push(format!(
                "{example:?} as {}: expected {expected:?}, got {got:?}",
                action.side_effect
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn content(s: &str) -> Value {
    json!({ "content": s })
}

#[test]
fn destructive_root_delete_examples() {
    let ruleset = shipped_ruleset();
    let matches = [
        "rm -rf /",
        "sudo rm -r -f / now",
        "rm -rf /*",
        "rm --no-preserve-root -rf /",
        "rm -fr /tmp /",
        r#"sh -c "rm -rf /""#,
        "/bin/rm -rf /;",
    ];
    let mut examples: Vec<(&str, ProposedAction)> = matches
        .iter()
        .map(|s| (*s, code_execution(content(s))))
        .collect();
    examples.push((
        r#"["rm","-rf","/"]"#,
        code_execution(json!({ "content": ["rm", "-rf", "/"] })),
    ));
    // The rule also applies to sandbox_network, whose matrix row denies anyway; the reason code
    // shows the hardline rule decided.
    examples.push((
        "rm -rf / (sandbox_network)",
        tool_call(
            SideEffectClass::SandboxNetwork,
            "sandbox.exec",
            IdempotencyClass::NonIdempotent,
            TargetKind::Sandbox,
            content("rm -rf /"),
        ),
    ));
    assert_denied_by(
        ruleset,
        "destructive_root_delete",
        "policy.hardline.destructive_command",
        &examples,
    );

    let does_not_match: Vec<(&str, ProposedAction, PolicyDecisionType)> = [
        "rm -rf ./build",
        "rm -rf /tmp/x",
        "farm -rf /",
        "rm -rf ../..",
    ]
    .iter()
    .map(|s| (*s, code_execution(content(s)), PolicyDecisionType::Allow))
    .collect();
    assert_matrix_decides(
        ruleset,
        "policy.hardline.destructive_command",
        &does_not_match,
    );
}

#[test]
fn destructive_root_delete_applies_only_to_its_classes() {
    // Hardline rules apply only when the side effect is in `applies_to` (SPEC §6.3): the same
    // text in an external write is the matrix's business.
    let ruleset = shipped_ruleset();
    assert_matrix_decides(
        ruleset,
        "policy.hardline.destructive_command",
        &[(
            "rm -rf / (external_write)",
            external_write(content("rm -rf /")),
            PolicyDecisionType::RequireApproval,
        )],
    );
}

#[test]
fn protected_host_path_examples() {
    let ruleset = shipped_ruleset();
    let matches = [
        "/etc/passwd",
        "/etc//passwd",
        "//etc/passwd",
        "./etc/passwd",
        "workspace/../etc/passwd",
        r"\etc\passwd",
        ".ssh/id_rsa",
        "sub/.git/config",
        ".GIT/config",
        "notes/.env.local",
        "file:///etc/passwd",
    ];
    let mut examples: Vec<(String, ProposedAction)> = Vec::new();
    for s in matches {
        // As file content, as the written path, and as a command argument.
        examples.push((format!("{s} (content)"), workspace_write(content(s))));
        examples.push((
            format!("{s} (path)"),
            workspace_write(json!({ "path": s, "content": "x" })),
        ));
        examples.push((format!("{s} (code_execution)"), code_execution(content(s))));
    }
    examples.push((
        "cat /etc/passwd (code_execution)".to_owned(),
        code_execution(content("cat /etc/passwd")),
    ));
    let examples: Vec<(&str, ProposedAction)> = examples
        .iter()
        .map(|(name, action)| (name.as_str(), action.clone()))
        .collect();
    assert_denied_by(
        ruleset,
        "protected_host_path",
        "policy.hardline.host_path",
        &examples,
    );

    use PolicyDecisionType::{Allow, Deny};
    let does_not_match = [
        // Without a top-level `path`, `path_inside_workspace` is false: the matrix denies.
        (
            ".ssh-backup/id_rsa (content)",
            workspace_write(content(".ssh-backup/id_rsa")),
            Deny,
        ),
        (
            "./.env.example (content)",
            workspace_write(content("./.env.example")),
            Deny,
        ),
        (
            "/etcetera/x (content)",
            workspace_write(content("/etcetera/x")),
            Deny,
        ),
        (
            "notes/result.txt (content)",
            workspace_write(content("notes/result.txt")),
            Deny,
        ),
        // As the written path, the matrix judges the path itself: `.` and a leading `/` leave the
        // workspace, the others stay inside.
        (
            ".ssh-backup/id_rsa (path)",
            workspace_write(json!({ "path": ".ssh-backup/id_rsa", "content": "x" })),
            Allow,
        ),
        (
            "./.env.example (path)",
            workspace_write(json!({ "path": "./.env.example", "content": "x" })),
            Deny,
        ),
        (
            "/etcetera/x (path)",
            workspace_write(json!({ "path": "/etcetera/x", "content": "x" })),
            Deny,
        ),
        (
            "notes/result.txt (path)",
            workspace_write(json!({ "path": "notes/result.txt", "content": "x" })),
            Allow,
        ),
        // In an isolated sandbox the matrix allows code execution.
        (
            ".ssh-backup/id_rsa (code_execution)",
            code_execution(content(".ssh-backup/id_rsa")),
            Allow,
        ),
        (
            "./.env.example (code_execution)",
            code_execution(content("./.env.example")),
            Allow,
        ),
        (
            "/etcetera/x (code_execution)",
            code_execution(content("/etcetera/x")),
            Allow,
        ),
        (
            "notes/result.txt (code_execution)",
            code_execution(content("notes/result.txt")),
            Allow,
        ),
        // Commands are tokenized only for code execution: file content that mentions a path does
        // not match a workspace write (SPEC §6.3).
        (
            "cat /etc/passwd (workspace_write content)",
            workspace_write(json!({ "path": "notes/howto.md", "content": "cat /etc/passwd" })),
            Allow,
        ),
    ];
    assert_matrix_decides(ruleset, "policy.hardline.host_path", &does_not_match);
}

#[test]
fn metadata_egress_examples() {
    let ruleset = shipped_ruleset();
    let matches = [
        "http://169.254.169.254/latest",
        "http://[fd00:ec2::254]/",
        "100.100.100.200",
        "168.63.129.16",
        "169.254.169.254:80",
        "http://[fe80::1]/x",
        "[fe80::1%eth0]:8080",
        "http://[::ffff:169.254.169.254]/",
        "0xA9FEA9FE",
        "0251.0376.0251.0376",
        "169.254.43518",
        "2852039166",
    ];
    let mut examples: Vec<(String, ProposedAction)> = Vec::new();
    for s in matches {
        examples.push((format!("{s} (url)"), network_read(json!({ "url": s }))));
        examples.push((format!("{s} (content)"), network_read(content(s))));
    }
    examples.push((
        "http://169.254.169.254/latest (sandbox_network)".to_owned(),
        tool_call(
            SideEffectClass::SandboxNetwork,
            "sandbox.exec",
            IdempotencyClass::NonIdempotent,
            TargetKind::Sandbox,
            content("http://169.254.169.254/latest"),
        ),
    ));
    let examples: Vec<(&str, ProposedAction)> = examples
        .iter()
        .map(|(name, action)| (name.as_str(), action.clone()))
        .collect();
    assert_denied_by(
        ruleset,
        "metadata_egress",
        "policy.hardline.metadata_egress",
        &examples,
    );

    // `web.fetch` on a web provider satisfies `host_on_allowlist`: the matrix allows.
    let does_not_match: Vec<(&str, ProposedAction, PolicyDecisionType)> =
        ["https://example.com/", "http://169.254.169.254.nip.io/"]
            .iter()
            .map(|s| {
                (
                    *s,
                    network_read(json!({ "url": s })),
                    PolicyDecisionType::Allow,
                )
            })
            .collect();
    assert_matrix_decides(ruleset, "policy.hardline.metadata_egress", &does_not_match);
}

#[test]
fn credential_to_egress_examples() {
    let ruleset = shipped_ruleset();
    let mut examples: Vec<(&str, ProposedAction)> = [
        "api_key=secret-value",
        "token: abc",
        "ſecret=1",
        "Bearer eyJhbGciOi1",
        "Authorization: Basic x",
        r#"{"password": "x"}"#,
        "-----BEGIN RSA PRIVATE KEY-----",
    ]
    .iter()
    .map(|s| (*s, external_write(content(s))))
    .collect();
    examples.push((
        r#"{"client_secret": "x"} as a nested object"#,
        external_write(json!({ "content": { "client_secret": "x" } })),
    ));
    examples.push((
        r#"{"client_secret": "x"} as the arguments"#,
        external_write(json!({ "client_secret": "x" })),
    ));
    for side_effect in [
        SideEffectClass::ExternalMessage,
        SideEffectClass::Publication,
    ] {
        examples.push((
            "api_key=secret-value (other egress classes)",
            tool_call(
                side_effect,
                "mail.send",
                IdempotencyClass::NonIdempotent,
                TargetKind::McpServer,
                content("api_key=secret-value"),
            ),
        ));
    }
    assert_denied_by(
        ruleset,
        "credential_to_egress",
        "policy.hardline.secret_exfiltration",
        &examples,
    );

    let does_not_match: Vec<(&str, ProposedAction, PolicyDecisionType)> = [
        "send the name of a credential reference",
        "Bearer abc",
        "the bearer of bad news",
        "max_tokens: 100",
        "token_count=5",
    ]
    .iter()
    .map(|s| {
        (
            *s,
            external_write(content(s)),
            PolicyDecisionType::RequireApproval,
        )
    })
    .chain([
        (
            r#"{"token_count": 5} as the arguments"#,
            external_write(json!({ "token_count": 5 })),
            PolicyDecisionType::RequireApproval,
        ),
        (
            r#"{"max_tokens": "100"} as the arguments"#,
            external_write(json!({ "max_tokens": "100" })),
            PolicyDecisionType::RequireApproval,
        ),
    ])
    .collect();
    assert_matrix_decides(
        ruleset,
        "policy.hardline.secret_exfiltration",
        &does_not_match,
    );
}

#[test]
fn credential_to_egress_finds_a_qualifying_bearer_after_a_short_one() {
    // SPEC §6.3 (2): "at some occurrence of `bearer`": a later occurrence followed by a
    // qualifying token matches even when an earlier one does not.
    let ruleset = shipped_ruleset();
    let examples: Vec<(&str, ProposedAction)> =
        ["Bearer Bearer abc12345", "bearer x then Bearer abc12345"]
            .iter()
            .map(|s| (*s, external_write(content(s))))
            .collect();
    assert_denied_by(
        ruleset,
        "credential_to_egress",
        "policy.hardline.secret_exfiltration",
        &examples,
    );
}

#[test]
fn side_effect_rules_deny_their_class_whatever_the_arguments() {
    let ruleset = shipped_ruleset();
    for (rule_id, side_effect, message_code) in [
        (
            "credential_class",
            SideEffectClass::CredentialAccess,
            "policy.hardline.credential_access",
        ),
        (
            "host_access_class",
            SideEffectClass::HostAccess,
            "policy.hardline.host_access",
        ),
        (
            "privileged_class",
            SideEffectClass::Privileged,
            "policy.hardline.privileged",
        ),
    ] {
        let examples = [
            (
                "empty arguments",
                tool_call(
                    side_effect,
                    "host.tool",
                    IdempotencyClass::ReadOnly,
                    TargetKind::InProcess,
                    json!({}),
                ),
            ),
            (
                "harmless text",
                tool_call(
                    side_effect,
                    "host.tool",
                    IdempotencyClass::ReadOnly,
                    TargetKind::Sandbox,
                    content("hello"),
                ),
            ),
        ];
        assert_denied_by(ruleset, rule_id, message_code, &examples);
    }
}

#[test]
fn no_shipped_rule_matches_its_own_near_miss() {
    let ruleset = shipped_ruleset();
    assert_eq!(
        ruleset.hardline.len(),
        11,
        "the shipped file has 7 v1 rules and the 4 SPEC §21.4 appends"
    );
    for rule in &ruleset.hardline {
        assert!(
            !rule.matches_own_near_miss(),
            "{} matches its own near_miss {:?}",
            rule.id,
            rule.near_miss
        );
        let mut arguments = JsonMap::new();
        arguments.insert("content".to_owned(), Value::String(rule.near_miss.clone()));
        let applies_to: Vec<SideEffectClass> = rule.applies_to.iter().collect();
        assert!(!applies_to.is_empty(), "{} applies to something", rule.id);
        for side_effect in SideEffectClass::ALL.iter().copied() {
            // Every class the rule applies to is where the near miss matters; a side_effect rule
            // matches there whatever the content, so it is checked outside its classes only.
            let applies = rule.applies_to.contains(side_effect);
            let expected = applies && rule.matcher.kind() == HardlineRuleKind::SideEffect;
            assert_eq!(
                rule.matches(side_effect, &arguments),
                expected,
                "{} on its near_miss {:?} as {side_effect}",
                rule.id,
                rule.near_miss
            );
        }
    }
}

#[test]
fn shipped_near_misses_are_the_documented_ones() {
    // The self check is only as good as the near misses it runs on (SPEC §7.3).
    let ruleset = shipped_ruleset();
    let near_misses: Vec<(&str, &str)> = ruleset
        .hardline
        .iter()
        .map(|r| (r.id.as_str(), r.near_miss.as_str()))
        .collect();
    assert_eq!(
        near_misses,
        [
            ("destructive_root_delete", "rm -rf ./build"),
            ("protected_host_path", "./.env.example"),
            (
                "credential_class",
                "read a credential reference from configuration"
            ),
            (
                "host_access_class",
                "read a file through the isolated workspace handle"
            ),
            ("privileged_class", "run as the unprivileged sandbox user"),
            ("metadata_egress", "https://example.com/"),
            (
                "credential_to_egress",
                "send the name of a credential reference"
            ),
            ("protected_host_path_exec_net", "cat ./.env.example"),
            ("protected_url_path", "file:///workspace/.env.example"),
            ("metadata_egress_exec", "curl -s https://example.com/status"),
            (
                "credential_to_egress_more",
                "https://example.com/search?q=password+reset+help"
            ),
        ]
    );
}
