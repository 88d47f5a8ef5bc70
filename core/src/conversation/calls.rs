//! The calls of a conversation (SPEC §22.1): a conversation page's and the API's view of the
//! call runs of its session, read in one transaction.

use crate::approval::Approval;
use crate::conversation::record::{Connection, ConnectionState};
use crate::ids::RunId;
use crate::invocation::Invocation;
use crate::store::{RunCursor, StoreTx, TxError};
use crate::time::Timestamp;

/// One call of a conversation: its invocation, and the approval it asked for, if it did
/// (kept after the call resumed, when the invocation no longer names it).
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub invocation: Invocation,
    pub approval: Option<Approval>,
}

/// The newest calls of a conversation, and whether older ones were left out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Calls {
    /// Newest first by the invocation's `(created_at, id)`.
    pub items: Vec<Call>,
    pub truncated: bool,
}

/// Runs asked for per page while looking for a conversation's runs.
const RUN_PAGE: usize = 100;

/// At most this many of the tenant's runs are looked at for one conversation page: the work of
/// one request stays bounded however busy the tenant was while the conversation lasted.
const RUN_SCAN_MAX: usize = 5_000;

/// The invocations of `conversation`'s session, newest first, at most `limit`, each with the
/// approval it asked for.
///
/// The store has no "runs of a session" query (only its active ones), and adding one to every
/// store for a console page is not worth it: the tenant's runs are listed newest first (an
/// indexed query, `runs_of_tenant`) from the conversation's last call back to its opening, and
/// the runs of its session kept. Every call run is created in the transaction that counts it, at
/// the `last_seen_at` it sets (SPEC §22.1), so no call run is newer than that; a conversation
/// that started no call run yet (an older one's single run, created after it opened) is
/// searched up to its close, or up to now while it is open. The scan stops at `limit + 1`
/// matching runs (one call each, §22.2), or after [`RUN_SCAN_MAX`] runs, and says so.
pub fn calls_of(
    tx: &mut dyn StoreTx,
    conversation: &Connection,
    limit: usize,
    now: Timestamp,
) -> Result<Calls, TxError> {
    let newest = match conversation.state {
        ConnectionState::Closed { closed_at, .. } => closed_at.max(conversation.last_seen_at),
        ConnectionState::Open { .. } if conversation.call_count == 0 => {
            now.max(conversation.last_seen_at)
        }
        ConnectionState::Open { .. } => conversation.last_seen_at,
    };
    // Strictly after the cursor in descending order: every run created at or before `newest`.
    let mut cursor = RunCursor {
        created_at: newest.saturating_add_micros(1),
        id: RunId(uuid::Uuid::nil()),
    };
    let mut runs = Vec::new();
    let mut scanned = 0;
    let mut truncated = false;
    'scan: loop {
        let page = tx.runs_of_tenant(&conversation.tenant_id, Some(cursor), RUN_PAGE)?;
        let Some(last) = page.last() else { break };
        cursor = RunCursor {
            created_at: last.created_at,
            id: last.id,
        };
        let full = page.len() == RUN_PAGE;
        for run in page {
            if run.created_at < conversation.opened_at {
                break 'scan;
            }
            scanned += 1;
            if run.session_id == conversation.session_id {
                if runs.len() == limit {
                    truncated = true;
                    break 'scan;
                }
                runs.push(run.id);
            }
            if scanned >= RUN_SCAN_MAX {
                truncated = true;
                break 'scan;
            }
        }
        if !full {
            break;
        }
    }
    let mut items = Vec::new();
    for run in runs {
        items.extend(tx.invocations_of_run(run)?);
    }
    items.sort_by_key(|i| std::cmp::Reverse((i.created_at, i.id)));
    if items.len() > limit {
        items.truncate(limit);
        truncated = true;
    }
    let mut calls = Vec::with_capacity(items.len());
    for invocation in items {
        let approval = tx.approval_by_action(invocation.id)?;
        calls.push(Call {
            invocation,
            approval,
        });
    }
    Ok(Calls {
        items: calls,
        truncated,
    })
}
