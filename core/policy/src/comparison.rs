//! One action decided by two policies, and the table of what changed between them.
//!
//! Policy shadow mode (a candidate profile decided beside the live one on every call) and
//! replay (every recorded call decided again under a candidate) both answer one question for an
//! operator about to change a policy: which calls would it decide differently, and how. A
//! [`Difference`] is one such call; a [`ChangeTable`] counts them by [`Transition`] (`allow →
//! deny`, `require_approval → allow`, …) and keeps a few examples of each.
//!
//! Two decisions differ when their decision or their reason code differ: a call denied for
//! another reason is a change an operator wants to see (`deny → deny`), one decided the same way
//! by a policy of another version is not.
//!
//! Examples name the call (tenant, tool, action id, time) and never its arguments: a report is
//! read by whoever runs the CLI, and arguments may carry what only the approval view may show.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::action::{PolicyDecision, ProposedAction};
use crate::ruleset::Ruleset;
use crate::vocab::PolicyDecisionType;

/// How many examples a table keeps per transition.
pub const EXAMPLES_PER_TRANSITION: usize = 3;

/// What one policy decided: the decision, its reason code and the policy's version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    pub decision: PolicyDecisionType,
    pub reason_code: String,
    pub policy_version: String,
}

impl From<&PolicyDecision> for Decided {
    fn from(decision: &PolicyDecision) -> Self {
        Decided {
            decision: decision.decision,
            reason_code: decision.reason_code.clone(),
            policy_version: decision.policy_version.clone(),
        }
    }
}

/// From the decision in force to the candidate's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Transition {
    pub from: PolicyDecisionType,
    pub to: PolicyDecisionType,
}

impl Transition {
    /// `allow → deny`.
    pub fn label(self) -> String {
        format!("{} → {}", self.from.as_str(), self.to.as_str())
    }
}

/// One action decided differently by the policy in force (`live`) and a candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Difference {
    pub live: Decided,
    pub candidate: Decided,
}

impl Difference {
    /// The difference between two decisions of one action, or `None` when they decide alike
    /// (same decision, same reason code; the versions may differ).
    pub fn between(live: &PolicyDecision, candidate: &PolicyDecision) -> Option<Difference> {
        if live.decision == candidate.decision && live.reason_code == candidate.reason_code {
            return None;
        }
        Some(Difference {
            live: live.into(),
            candidate: candidate.into(),
        })
    }

    pub fn transition(&self) -> Transition {
        Transition {
            from: self.live.decision,
            to: self.candidate.decision,
        }
    }
}

/// Shadow mode's gate: `live` decides `action`, and `candidate`, when there is one, decides it
/// beside. The decision returned is always `live`'s own (what [`evaluate`](crate::evaluate)
/// gives alone); the candidate only yields the [`Difference`], if any.
pub fn decide_beside(
    action: &ProposedAction,
    live: &Ruleset,
    candidate: Option<&Ruleset>,
) -> (PolicyDecision, Option<Difference>) {
    let decision = crate::evaluate(action, live);
    let difference = candidate.and_then(|candidate| {
        let candidate = crate::evaluate(action, candidate);
        Difference::between(&decision, &candidate)
    });
    (decision, difference)
}

/// Which call a difference is about: enough to find it (`runs show`, the console), never its
/// arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRef {
    pub tenant_id: String,
    pub tool: String,
    /// The action's id: the invocation's id for a recorded call.
    pub action_id: String,
    /// When the call was decided (RFC 3339).
    pub at: String,
}

/// One transition's count and first examples.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TransitionRow {
    pub count: u64,
    pub examples: Vec<(CallRef, Difference)>,
}

/// Differences counted by transition, in a fixed order (the decisions' declaration order), so
/// two reports of the same calls print the same text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChangeTable {
    /// Calls compared, alike or not.
    pub compared: u64,
    pub rows: BTreeMap<Transition, TransitionRow>,
    /// Whether the calls decided alike were seen (a replay), or only the differences (a shadow
    /// report: calls decided alike leave no record), so `compared` means nothing.
    pub differences_only: bool,
}

impl ChangeTable {
    /// A table of every call compared (replay).
    pub fn new() -> Self {
        ChangeTable::default()
    }

    /// A table of recorded differences alone (shadow report).
    pub fn differences_only() -> Self {
        ChangeTable {
            differences_only: true,
            ..ChangeTable::default()
        }
    }

    /// A call decided alike by both.
    pub fn add_alike(&mut self) {
        self.compared += 1;
    }

    /// A call decided differently; the first [`EXAMPLES_PER_TRANSITION`] of a transition are
    /// kept as examples.
    pub fn add_difference(&mut self, call: CallRef, difference: Difference) {
        self.compared += 1;
        let row = self.rows.entry(difference.transition()).or_default();
        row.count += 1;
        if row.examples.len() < EXAMPLES_PER_TRANSITION {
            row.examples.push((call, difference));
        }
    }

    /// Calls decided differently.
    pub fn changed(&self) -> u64 {
        self.rows.values().map(|row| row.count).sum()
    }

    /// The table as text: one line per transition with its count, its examples indented below.
    /// Every string from a call (tenant, tool, reason codes) is printed escaped, so a tool
    /// named with a newline or a terminal escape cannot forge a line of the report.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        if self.differences_only {
            let _ = writeln!(
                out,
                "{} calls decided differently (calls decided alike leave no record)",
                self.changed()
            );
        } else {
            let _ = writeln!(
                out,
                "{} calls compared, {} decided differently",
                self.compared,
                self.changed()
            );
        }
        if self.rows.is_empty() {
            return out;
        }
        let width = self
            .rows
            .keys()
            .map(|t| t.label().chars().count())
            .max()
            .unwrap_or(0);
        for (transition, row) in &self.rows {
            let label = transition.label();
            let pad = width - label.chars().count();
            let _ = writeln!(out, "{label}{:pad$}  {:>8}", "", row.count);
            for (call, difference) in &row.examples {
                let _ = writeln!(
                    out,
                    "    {} {} tenant={} tool={} reason {} → {} (policy {} → {})",
                    printable(&call.at),
                    printable(&call.action_id),
                    printable(&call.tenant_id),
                    printable(&call.tool),
                    printable(&difference.live.reason_code),
                    printable(&difference.candidate.reason_code),
                    printable(&difference.live.policy_version),
                    printable(&difference.candidate.policy_version),
                );
            }
        }
        out
    }

    /// The table as JSON: `{"compared", "changed", "transitions": [{"from", "to", "count",
    /// "examples": [{call…, "live", "candidate"}]}]}`; `compared` is null for a table of
    /// differences only.
    pub fn to_json(&self) -> serde_json::Value {
        let transitions: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|(transition, row)| {
                let examples: Vec<serde_json::Value> = row
                    .examples
                    .iter()
                    .map(|(call, difference)| {
                        serde_json::json!({
                            "tenant_id": call.tenant_id,
                            "tool": call.tool,
                            "action_id": call.action_id,
                            "at": call.at,
                            "live": difference.live,
                            "candidate": difference.candidate,
                        })
                    })
                    .collect();
                serde_json::json!({
                    "from": transition.from.as_str(),
                    "to": transition.to.as_str(),
                    "count": row.count,
                    "examples": examples,
                })
            })
            .collect();
        serde_json::json!({
            "compared": if self.differences_only { None } else { Some(self.compared) },
            "changed": self.changed(),
            "transitions": transitions,
        })
    }
}

/// `text` with control characters, invisible format characters (bidirectional overrides,
/// zero-width spaces and joiners, the BOM) and backslashes escaped (`\n`, `\u{202e}`), so one
/// value stays one run of visible characters on one line, shown in the order it was written.
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            ' ' => out.push_str("\\x20"),
            c if c.is_control() || is_invisible_format(c) => {
                let _ = write!(out, "{}", c.escape_unicode());
            }
            c => out.push(c),
        }
    }
    out
}

/// The format characters (Unicode `Cf`) that change how a line reads without being seen.
fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{061c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::decision;

    fn call(tool: &str) -> CallRef {
        CallRef {
            tenant_id: "acme".to_owned(),
            tool: tool.to_owned(),
            action_id: "00000000-0000-4000-8000-000000000001".to_owned(),
            at: "2026-12-06T10:00:00Z".to_owned(),
        }
    }

    #[test]
    fn decisions_differ_by_decision_or_reason_never_by_version_alone() {
        use PolicyDecisionType::*;
        let live = decision(Allow, "policy.matrix.allow", "v1");
        assert_eq!(
            Difference::between(&live, &decision(Allow, "policy.matrix.allow", "v2")),
            None
        );
        let denied = Difference::between(&live, &decision(Deny, "policy.rule.x", "v2")).unwrap();
        assert_eq!(
            denied.transition(),
            Transition {
                from: Allow,
                to: Deny
            }
        );
        assert_eq!(denied.candidate.policy_version, "v2");
        let other_reason =
            Difference::between(&decision(Deny, "a", "v1"), &decision(Deny, "b", "v1")).unwrap();
        assert_eq!(other_reason.transition().label(), "deny → deny");
    }

    #[test]
    fn the_table_counts_by_transition_in_a_fixed_order_and_keeps_three_examples() {
        use PolicyDecisionType::*;
        let mut table = ChangeTable::new();
        let live = decision(Allow, "ok", "v1");
        for _ in 0..5 {
            let d = Difference::between(&live, &decision(Deny, "no", "v2")).unwrap();
            table.add_difference(call("fs.write"), d);
        }
        let d = Difference::between(&decision(RequireApproval, "ask", "v1"), &live).unwrap();
        table.add_difference(call("mail.send"), d);
        table.add_alike();
        assert_eq!(table.compared, 7);
        assert_eq!(table.changed(), 6);
        let allow_deny = &table.rows[&Transition {
            from: Allow,
            to: Deny,
        }];
        assert_eq!(allow_deny.count, 5);
        assert_eq!(allow_deny.examples.len(), EXAMPLES_PER_TRANSITION);
        let text = table.render_text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "7 calls compared, 6 decided differently");
        assert!(lines[1].starts_with("allow → deny"), "{text}");
        assert!(lines[1].ends_with(" 5"), "{text}");
        assert!(lines[5].starts_with("require_approval → allow"), "{text}");
        let json = table.to_json();
        assert_eq!(json["transitions"][0]["from"], "allow");
        assert_eq!(json["transitions"][0]["count"], 5);
        assert_eq!(json["transitions"][1]["examples"][0]["tool"], "mail.send");
        assert_eq!(
            json["transitions"][1]["examples"][0]["live"]["reason_code"],
            "ask"
        );
    }

    #[test]
    fn a_call_cannot_forge_a_line_of_the_report() {
        use PolicyDecisionType::*;
        let mut table = ChangeTable::new();
        let d =
            Difference::between(&decision(Allow, "ok", "v1"), &decision(Deny, "no", "v2")).unwrap();
        table.add_difference(call("evil\nallow → deny  999\u{1b}[2J\u{202e}kcatta"), d);
        let text = table.render_text();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(
            text.contains("tool=evil\\u{a}allow\\x20→\\x20deny"),
            "{text}"
        );
        assert!(text.contains("\\u{202e}kcatta"), "{text}");
        assert!(!text.contains('\u{1b}') && !text.contains('\u{202e}'));
    }
}
