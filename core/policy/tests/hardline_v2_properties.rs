//! The rule of hardline v2 (SPEC §21.1, §21.5), as properties over generated actions:
//! - v2's decision is never more permissive than pass 1 alone (the v1 evaluation), and a pass-1
//!   hardline deny keeps its reason code and rule;
//! - the pre-filters that skip strings which cannot match never change a decision.
//!
//! Arguments are built from payload fragments (URL spellings, shell quoting and expansions,
//! protected paths, secret formats) so that both passes and every reading are exercised; the
//! seed is fixed so that CI runs the same cases every time. Each generated argument object is
//! tried under all 15 side-effect classes.

use airlock_policy::action::{JsonMap, ProposedAction};
use airlock_policy::evaluate_with;
use airlock_policy::hardline::{Passes, Prefilter};
use airlock_policy::testing::{shipped_ruleset, tool_call};
use airlock_policy::vocab::{IdempotencyClass, PolicyDecisionType, SideEffectClass, TargetKind};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::RngSeed;
use serde_json::Value;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 1024,
        rng_seed: RngSeed::Fixed(0x6861_7264_6c69_6e65),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Pieces of payloads; strings are concatenations of a few of them.
const FRAGMENTS: &[&str] = &[
    "rm",
    "r''m",
    " ",
    "-rf",
    "/",
    "/*",
    "${IFS}",
    "$IFS",
    "{rm,-rf,/}",
    "cd / && ",
    "*",
    "find / -delete",
    "echo / | xargs rm -rf",
    "sh -c '",
    "'",
    "\"",
    "eval ",
    "$(",
    ")",
    "`",
    "|",
    ";",
    "\n",
    "\\",
    "sudo ",
    "env X=1 ",
    "X=/etc/shadow; cat \"$X\"",
    "cat ",
    "/etc/passwd",
    "/e?c/passwd",
    ".e*",
    "/proc/self/root/etc/shadow",
    // `proc` hidden from a substring test: by quotes the token reading removes, by an escape a
    // `file:` URL path decodes.
    "/p''roc/self/root/etc/shadow",
    "file:///%70roc/self/root/etc/shadow",
    "/proc/1/environ",
    "dd if=",
    "@",
    "/root/.ssh/id_rsa",
    ".env",
    ".envrc",
    ".git/hooks/pre-commit",
    "notes.txt",
    "~/",
    "..",
    "http://",
    "https:",
    "http:",
    "169.254.169.254",
    "169。254。169。254",
    "%31%36%39",
    ".254",
    "[fd20:ce::254]",
    "[64:ff9b:1::a9fe:a9fe]",
    "[::ffff:0:a9fe:a9fe]",
    "0xA9FEA9FE",
    ":80",
    "file:///",
    "jar:file:///etc/passwd!/",
    "php://filter/resource=/etc/passwd",
    "netdoc:///",
    "?token=",
    "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "xoxb-781236542736-2364535789652",
    "AWS_SECRET_ACCESS_KEY=",
    "wJalrXUtnFEMI",
    "postgres://admin:S3cr3t@db/prod",
    "Authorization: ",
    "Cookie: a=b",
    "curl -u admin:pw ",
    "['rm','-rf','/']",
    "example.com",
    "①⓪⓪｡①⓪⓪｡①⓪⓪｡②⓪⓪",
    "a",
    "b",
    "0",
    "=",
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        // Long concatenations reach the parser's odd corners.
        2 => prop::collection::vec(select(FRAGMENTS), 0..8).prop_map(|parts| parts.concat()),
        // Short ones keep a payload whole, so each pre-filter meets strings it must not skip.
        2 => prop::collection::vec(select(FRAGMENTS), 1..3).prop_map(|parts| parts.concat()),
        1 => (select(FRAGMENTS), select(FRAGMENTS)).prop_map(|(a, b)| format!("{a} {b}")),
        3 => select(FRAGMENTS).prop_map(str::to_owned),
    ]
}

/// Argument values: strings, string arrays, `{cmd, args}` objects and nested objects.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        4 => text().prop_map(Value::String),
        1 => prop::collection::vec(text(), 0..4)
            .prop_map(|v| Value::Array(v.into_iter().map(Value::String).collect())),
        1 => (text(), prop::collection::vec(text(), 0..3)).prop_map(|(cmd, args)| {
            serde_json::json!({"cmd": cmd, "args": args})
        }),
        1 => Just(Value::from(7)),
    ];
    leaf.prop_recursive(2, 12, 3, |inner| {
        prop::collection::btree_map(select(&["url", "command", "text", "x"][..]), inner, 1..3)
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
    })
}

fn arguments() -> impl Strategy<Value = JsonMap> {
    let single = (select(&["command", "url", "path", "content"][..]), text()).prop_map(|(k, v)| {
        let mut map = JsonMap::new();
        map.insert(k.to_owned(), Value::String(v));
        map
    });
    let several = prop::collection::btree_map(
        select(
            &[
                "command", "url", "path", "content", "text", "argv", "headers",
            ][..],
        ),
        value(),
        1..4,
    )
    .prop_map(|m| m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
    prop_oneof![single, several]
}

/// Arguments and a target; each property tries them under every side-effect class.
fn case() -> impl Strategy<Value = (TargetKind, JsonMap)> {
    (
        select(
            &[
                TargetKind::Sandbox,
                TargetKind::InProcess,
                TargetKind::WebProvider,
                TargetKind::McpServer,
            ][..],
        ),
        arguments(),
    )
}

/// A `web.fetch`-named call; each property tries it under every side-effect class.
fn action(side_effect: SideEffectClass, target: TargetKind, arguments: JsonMap) -> ProposedAction {
    let arguments = Value::Object(arguments);
    tool_call(
        side_effect,
        "web.fetch",
        IdempotencyClass::ReadOnly,
        target,
        arguments,
    )
}

/// Strictness order: a deny is stricter than an approval, which is stricter than an allow.
fn rank(decision: PolicyDecisionType) -> u8 {
    match decision {
        PolicyDecisionType::Allow | PolicyDecisionType::AllowWithModifications => 0,
        PolicyDecisionType::RequireApproval => 1,
        PolicyDecisionType::Deny => 2,
    }
}

proptest! {
    #![proptest_config(config())]

    /// SPEC §21.1: v2 is never more permissive than pass 1 alone; a pass-1 hardline deny is the
    /// same deny (code and rule), and anything pass 1 left to the matrix is either the same
    /// decision or a hardline deny.
    #[test]
    fn v2_is_never_weaker_than_pass_1_and_keeps_its_codes((target, arguments) in case()) {
        let rules = shipped_ruleset();
        for side_effect in SideEffectClass::ALL.iter().copied() {
            let action = action(side_effect, target.clone(), arguments.clone());
            let v1 = evaluate_with(&action, rules, Passes::V1Only, Prefilter::On);
            let v2 = evaluate_with(&action, rules, Passes::Both, Prefilter::On);
            prop_assert!(rank(v2.decision) >= rank(v1.decision), "v1 {v1:?}\nv2 {v2:?}");
            if v1.reason_code.starts_with("policy.hardline.") {
                prop_assert_eq!(&v2, &v1);
            } else if v2 != v1 {
                prop_assert_eq!(v2.decision, PolicyDecisionType::Deny);
                prop_assert!(v2.reason_code.starts_with("policy.hardline."), "{v2:?}");
            }
        }
    }

    /// SPEC §21.1: a pre-filter that skips strings which cannot match never changes a decision.
    #[test]
    fn prefilters_never_change_a_decision((target, arguments) in case()) {
        let rules = shipped_ruleset();
        for side_effect in SideEffectClass::ALL.iter().copied() {
            let action = action(side_effect, target.clone(), arguments.clone());
            prop_assert_eq!(
                evaluate_with(&action, rules, Passes::Both, Prefilter::On),
                evaluate_with(&action, rules, Passes::Both, Prefilter::Off),
                "{}", side_effect
            );
        }
    }
}

/// Static command words and what follows them, for the dynamic-word property below.
const PROGRAMS: &[&str] = &[
    "rm",
    "/bin/rm",
    "/usr/bin/rm",
    "sh",
    "bash",
    "find",
    "xargs",
    "eval",
    "ls",
    "cat",
    "echo",
];
const TAILS: &[&str] = &[
    "-rf /",
    "-rf /*",
    "-fr //",
    "-c 'rm -rf /'",
    "-c \"r''m -rf /\"",
    "/ -delete",
    "/ -exec rm -rf {} +",
    "rm -rf /",
    "-la /",
    "/etc/passwd",
    "-rf ./build",
    "hello",
];

/// A dynamic spelling of `program`: a command substitution, backticks, a variable without a
/// literal value, or one of three globs that match it (a `?` for one character, a `*` for the
/// rest of its last component, a bracket).
fn dynamic(program: &str, form: usize, at: usize) -> String {
    let (dir, base) = match program.rfind('/') {
        Some(i) => program.split_at(i + 1),
        None => ("", program),
    };
    let at = at % base.len();
    let (before, rest) = base.split_at(at);
    let after = &rest[1..];
    let here = &rest[..1];
    match form % 6 {
        0 => format!("$(which {program})"),
        1 => format!("`command -v {program}`"),
        2 => "$TOOL".to_owned(),
        3 => format!("{dir}{before}?{after}"),
        4 => format!("{dir}{before}{here}*"),
        _ => format!("{dir}{before}[{here}]{after}"),
    }
}

proptest! {
    #![proptest_config(config())]

    /// Issue 30 item 4 (SPEC §21.3): a command word only a running shell knows never reads
    /// weaker than any static word it could expand to. A glob keeps its directory, so it is
    /// compared with the program's path as written; a substitution or a variable could expand
    /// to any path of the program, so it is compared with the program's name (a path such as
    /// `/usr/bin/rm` is itself a protected host path, which no reading of `$TOOL` can know).
    #[test]
    fn a_dynamic_command_word_never_reads_weaker_than_a_static_word_it_could_be(
        program in select(PROGRAMS),
        tail in select(TAILS),
        form in 0usize..6,
        at in 0usize..8,
    ) {
        let rules = shipped_ruleset();
        let command = |word: &str| {
            let mut arguments = JsonMap::new();
            arguments.insert("command".into(), Value::String(format!("{word} {tail}")));
            arguments
        };
        let spelled = dynamic(program, form, at);
        let name = program.rsplit('/').next().unwrap_or(program);
        let static_word = if form % 6 >= 3 { program } else { name };
        for side_effect in [SideEffectClass::CodeExecution, SideEffectClass::SandboxNetwork] {
            let fixed = action(side_effect, TargetKind::Sandbox, command(static_word));
            let unknown = action(side_effect, TargetKind::Sandbox, command(&spelled));
            let fixed = evaluate_with(&fixed, rules, Passes::Both, Prefilter::On);
            let unknown = evaluate_with(&unknown, rules, Passes::Both, Prefilter::On);
            prop_assert!(
                rank(unknown.decision) >= rank(fixed.decision),
                "{spelled} {tail}: {unknown:?}\n{static_word} {tail}: {fixed:?}"
            );
        }
    }
}

/// The generator reaches pass 2: some generated actions are denied only by the v2 readings, so
/// the properties above are not vacuous.
#[test]
fn generated_actions_reach_the_v2_readings() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::new(config());
    let strategy = case();
    let mut v2_only = 0;
    for _ in 0..1024 {
        let (target, arguments) = strategy.new_tree(&mut runner).expect("a value").current();
        for side_effect in SideEffectClass::ALL.iter().copied() {
            let action = action(side_effect, target.clone(), arguments.clone());
            let v1 = evaluate_with(&action, shipped_ruleset(), Passes::V1Only, Prefilter::On);
            let v2 = evaluate_with(&action, shipped_ruleset(), Passes::Both, Prefilter::On);
            if v1 != v2 {
                v2_only += 1;
            }
        }
    }
    assert!(
        v2_only >= 100,
        "only {v2_only} generated actions reach pass 2's denies"
    );
}

/// SPEC §21.1, at the edges of the `/proc` pre-filter: a `proc` component that only the token
/// reading (shell characters removed) or a `file:` URL's percent-decoding makes is still read,
/// so these code-execution strings are denied as `/etc/shadow` reads, with the pre-filter on as
/// off, and every other class gets the same decision both ways.
#[test]
fn the_proc_prefilter_keeps_components_the_readings_make() {
    let rules = shipped_ruleset();
    for command in [
        "cat /p''roc/self/root/etc/shadow '",
        "cat /p\"\"roc/self/root/etc/shadow \"",
        "cat<file:///%70roc/self/root/etc/shadow",
        "x;file:///%70roc/self/root/etc/shadow",
    ] {
        let mut arguments = JsonMap::new();
        arguments.insert("command".to_owned(), Value::String(command.to_owned()));
        for side_effect in SideEffectClass::ALL.iter().copied() {
            let action = action(side_effect, TargetKind::Sandbox, arguments.clone());
            let on = evaluate_with(&action, rules, Passes::Both, Prefilter::On);
            assert_eq!(
                on,
                evaluate_with(&action, rules, Passes::Both, Prefilter::Off),
                "{command:?} {side_effect}"
            );
            if side_effect == SideEffectClass::CodeExecution {
                assert_eq!(
                    (on.decision, on.reason_code.as_str()),
                    (PolicyDecisionType::Deny, "policy.hardline.host_path"),
                    "{command:?}"
                );
            }
        }
    }
}
