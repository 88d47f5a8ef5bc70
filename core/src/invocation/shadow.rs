//! Policy shadow mode (issue 32 item 2): a candidate policy decided beside the one in force.
//!
//! With `--shadow-policy-dir` the worker, `serve` and `mcp serve` load a second ruleset
//! (the `shadow` of [`Env::policy`](crate::env::Env::policy)). Every call the gate decides is decided by both;
//! only the policy in force acts. When the two differ (decision or reason code,
//! [`Difference::between`]) a `policy.shadow.diff` process event is appended **in the call's own
//! PROPOSE transaction**, so a difference is recorded exactly when the call is, costs no commit of
//! its own, and is never recorded for a call that did not happen. The event's derivation key is
//! the action's id, so a retried transaction cannot record one call twice.
//!
//! `airlock policy shadow report` reads the events back ([`read`]) into a
//! [`ChangeTable`](crate::policy::comparison::ChangeTable).
//!
//! The payload names the call (tenant, tool, run, step, action id, time) and both decisions;
//! never the arguments (see `airlock_policy::comparison`).

use serde_json::json;

use crate::action::ProposedAction;
use crate::events::{Actor, EventType, PAYLOAD_SCHEMA_VERSION, ProcessEvent, keys};
use crate::policy::comparison::{CallRef, ChangeTable, Decided, Difference};
use crate::store::{CreatedPage, Store, TxError};

use super::replay::{PAGE, Window};

/// The `policy.shadow.diff` event of one action the candidate decided differently
/// ([`decide_beside`](crate::policy::comparison::decide_beside)).
pub fn diff_event(action: &ProposedAction, difference: Difference) -> ProcessEvent {
    let key = keys::shadow_diff(action.action_id);
    ProcessEvent {
        id: uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, key.as_bytes()),
        event_type: EventType::PolicyShadowDiff,
        payload_schema_version: PAYLOAD_SCHEMA_VERSION,
        actor: Actor::process(),
        payload: json!({
            "action_id": action.action_id.to_string(),
            "tenant_id": action.tenant_id,
            "tool": action.name,
            "run_id": action.run_id.to_string(),
            "step_number": action.step_number,
            "evaluated_at": action.evaluated_at.to_string(),
            "live": difference.live,
            "candidate": difference.candidate,
        }),
        derivation_key: key,
        created_at: action.evaluated_at,
    }
}

/// Every `policy.shadow.diff` event recorded in `window`, read page by page (each page its own
/// read transaction, as [`replay`](super::replay::replay) reads), into a table of differences
/// only; and how many events this build could not [`read`] (kept out of the table, counted so
/// none is lost silently).
pub fn report<S: Store>(store: &S, window: Window) -> Result<(ChangeTable, u64), TxError> {
    let mut table = ChangeTable::differences_only();
    let mut unreadable = 0;
    let mut page = CreatedPage::first(window.from, window.until, PAGE);
    loop {
        let events =
            store.read(|tx| tx.process_events_created(EventType::PolicyShadowDiff, &page))?;
        let Some(last) = events.last() else {
            return Ok((table, unreadable));
        };
        page = page.after(last.created_at, last.id);
        for event in &events {
            match read(event) {
                Some((call, difference)) => table.add_difference(call, difference),
                None => unreadable += 1,
            }
        }
    }
}

/// The call and the difference a `policy.shadow.diff` event records; `None` for any other
/// event, or a payload this build cannot read (reported by the caller as unreadable, not
/// dropped silently).
pub fn read(event: &ProcessEvent) -> Option<(CallRef, Difference)> {
    if event.event_type != EventType::PolicyShadowDiff {
        return None;
    }
    let payload = &event.payload;
    let text = |key: &str| payload.get(key)?.as_str().map(str::to_owned);
    let decided =
        |key: &str| -> Option<Decided> { serde_json::from_value(payload.get(key)?.clone()).ok() };
    Some((
        CallRef {
            tenant_id: text("tenant_id")?,
            tool: text("tool")?,
            action_id: text("action_id")?,
            at: text("evaluated_at")?,
        },
        Difference {
            live: decided("live")?,
            candidate: decided("candidate")?,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::decision;
    use crate::vocab::PolicyDecisionType;

    #[test]
    fn a_difference_is_one_event_keyed_by_the_action_and_reads_back() {
        use crate::vocab::{IdempotencyClass, SideEffectClass, TargetKind};
        let action = crate::policy::testing::tool_call(
            SideEffectClass::ExternalMessage,
            "mail.send",
            IdempotencyClass::NonIdempotent,
            TargetKind::McpServer,
            json!({"to": "a@example.com", "secret": "hunter2"}),
        );
        let live = decision(PolicyDecisionType::Allow, "policy.matrix.allow", "v1");
        let candidate = decision(PolicyDecisionType::Deny, "policy.rule.no_mail", "v2");
        let difference = Difference::between(&live, &candidate).unwrap();
        let event = diff_event(&action, difference.clone());
        assert_eq!(event.event_type, EventType::PolicyShadowDiff);
        assert_eq!(
            event.derivation_key,
            format!("policy.shadow.diff:{}", action.action_id)
        );
        assert_eq!(
            event.id,
            diff_event(&action, difference).id,
            "one id per action"
        );
        assert!(
            !event.payload.to_string().contains("hunter2"),
            "no arguments"
        );
        let (call, difference) = read(&event).unwrap();
        assert_eq!(call.tool, action.name);
        assert_eq!(call.action_id, action.action_id.to_string());
        assert_eq!(difference.live.reason_code, "policy.matrix.allow");
        assert_eq!(difference.candidate.decision, PolicyDecisionType::Deny);
        assert_eq!(difference.candidate.policy_version, "v2");
    }

    #[test]
    fn a_report_reads_its_window_and_counts_what_it_cannot_read() {
        use crate::store::Store as _;
        use crate::vocab::{IdempotencyClass, SideEffectClass, TargetKind};
        let store = crate::mem_store::MemStore::new();
        let live = decision(PolicyDecisionType::Allow, "ok", "v1");
        let candidate = decision(PolicyDecisionType::Deny, "no", "v2");
        let at = |seconds: i64| crate::time::Timestamp::from_micros(seconds * 1_000_000);
        for (n, seconds) in [(1u128, 10), (2, 20), (3, 30)] {
            let mut action = crate::policy::testing::tool_call(
                SideEffectClass::WorkspaceWrite,
                "workspace.write_text",
                IdempotencyClass::Idempotent,
                TargetKind::InProcess,
                json!({}),
            );
            action.action_id = uuid::Uuid::from_u128(n);
            action.evaluated_at = at(seconds);
            let mut event = diff_event(&action, Difference::between(&live, &candidate).unwrap());
            if n == 3 {
                event.payload = json!({"tool": "written by another build"});
            }
            store
                .transact(|tx| tx.append_process_event(&event))
                .unwrap();
        }
        let everything = Window {
            from: at(0),
            until: None,
        };
        let (table, unreadable) = report(&store, everything).unwrap();
        assert_eq!((table.changed(), unreadable), (2, 1));
        assert!(table.differences_only);
        let (table, unreadable) = report(
            &store,
            Window {
                from: at(15),
                until: Some(at(30)),
            },
        )
        .unwrap();
        assert_eq!((table.changed(), unreadable), (1, 0), "the window [15, 30)");
    }
}
