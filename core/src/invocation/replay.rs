//! Replay (issue 32 item 3): every recorded call decided again under a candidate policy,
//! without executing anything.
//!
//! A call's row keeps its whole proposed action: the tool's name, version, side effect, risk,
//! idempotency and scopes, the canonical arguments and their hash, the argument and origin trust
//! the gate saw (after the conversation's taint, §22.2), the time, and the target kind (since
//! SQLite M11 / PostgreSQL V9). [`proposed_action`] rebuilds the action the gate decided, and
//! the row's stored decision is what the policy in force decided then. The two decisions are
//! compared as shadow mode compares them ([`Difference::between`]) into a [`ChangeTable`].
//!
//! What is not compared, and counted instead ([`Skipped`]): rows the gate never decided (none
//! today: a call refused before the gate leaves no row, only a `tool.call.refused` event), and
//! rows written before the target kind was recorded. A gateway's reads (`resources/read`,
//! `prompts/get`) are gated without a row and are not replayed.
//!
//! Rows are read in pages of [`PAGE`] in `(created_at, id)` order, each page its own read
//! transaction, so a replay over a live store neither holds a long transaction nor blocks the
//! writer.

use std::collections::BTreeMap;

use crate::action::{JsonMap, ProposedAction, Target};
use crate::policy::Ruleset;
use crate::policy::comparison::{CallRef, ChangeTable, Difference};
use crate::store::{CreatedPage, Store, TxError};
use crate::time::Timestamp;
use crate::vocab::ActionKind;

use super::Invocation;

/// Rows per read transaction.
pub const PAGE: usize = 1000;

/// Why a recorded call was not decided again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, thiserror::Error)]
pub enum Skipped {
    /// The row carries no decision of the gate.
    #[error("no recorded decision")]
    NoDecision,
    /// Written before the target kind was recorded (SQLite M11, PostgreSQL V9).
    #[error("recorded before target kinds were kept")]
    NoTargetKind,
    /// The stored canonical arguments are not a JSON object (a damaged row).
    #[error("stored arguments unreadable")]
    Arguments,
}

impl Skipped {
    pub fn as_str(self) -> &'static str {
        match self {
            Skipped::NoDecision => "no_decision",
            Skipped::NoTargetKind => "no_target_kind",
            Skipped::Arguments => "arguments_unreadable",
        }
    }
}

/// The action the gate decided for this row, rebuilt from its columns.
pub fn proposed_action(row: &Invocation) -> Result<ProposedAction, Skipped> {
    let kind = row.target_kind.clone().ok_or(Skipped::NoTargetKind)?;
    let arguments: JsonMap =
        serde_json::from_str(&row.arguments).map_err(|_| Skipped::Arguments)?;
    Ok(ProposedAction {
        kind: ActionKind::ToolCall,
        action_id: row.id.as_uuid(),
        tenant_id: row.tenant_id.clone(),
        session_id: row.session_id.as_uuid(),
        run_id: row.run_id.as_uuid(),
        step_number: u64::from(row.step_number),
        name: row.tool_name.clone(),
        version: Some(row.tool_version.clone()),
        summary: format!("Run {} with validated arguments.", row.tool_name),
        side_effect: row.side_effect,
        risk: row.risk,
        idempotency: row.idempotency_class,
        required_scopes: row.required_scopes.clone(),
        arguments,
        normalized_arguments_hash: row.normalized_arguments_hash.clone(),
        argument_trust: row.argument_trust.clone(),
        origin_trust: row.origin_trust,
        target: Target::for_kind(kind),
        evaluated_at: row.created_at,
    })
}

/// Which recorded calls to decide again: those proposed in `[from, until)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from: Timestamp,
    pub until: Option<Timestamp>,
}

impl Window {
    /// Every call ever recorded.
    pub const ALL: Window = Window {
        from: Timestamp::from_micros(i64::MIN),
        until: None,
    };
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Replayed {
    pub table: ChangeTable,
    pub skipped: BTreeMap<Skipped, u64>,
}

/// Decides every call recorded in `window` again under `candidate` and compares each with the
/// decision stored on its row. Reads only.
pub fn replay<S: Store>(
    store: &S,
    candidate: &Ruleset,
    window: Window,
) -> Result<Replayed, TxError> {
    let mut replayed = Replayed::default();
    let mut page = CreatedPage::first(window.from, window.until, PAGE);
    loop {
        let rows = store.read(|tx| tx.invocations_created(&page))?;
        let Some(last) = rows.last() else {
            return Ok(replayed);
        };
        page = page.after(last.created_at, last.id.as_uuid());
        for row in &rows {
            compare(row, candidate, &mut replayed);
        }
    }
}

/// One row into the table (or the skipped counts).
fn compare(row: &Invocation, candidate: &Ruleset, replayed: &mut Replayed) {
    let Some(recorded) = &row.policy_decision else {
        *replayed.skipped.entry(Skipped::NoDecision).or_default() += 1;
        return;
    };
    let action = match proposed_action(row) {
        Ok(action) => action,
        Err(skipped) => {
            *replayed.skipped.entry(skipped).or_default() += 1;
            return;
        }
    };
    let decided = crate::policy::evaluate(&action, candidate);
    match Difference::between(recorded, &decided) {
        None => replayed.table.add_alike(),
        Some(difference) => replayed.table.add_difference(
            CallRef {
                tenant_id: row.tenant_id.clone(),
                tool: row.tool_name.clone(),
                action_id: row.id.to_string(),
                at: row.created_at.to_string(),
            },
            difference,
        ),
    }
}
