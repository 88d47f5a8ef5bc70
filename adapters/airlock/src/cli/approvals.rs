//! `airlock approvals list|get|approve|deny|expire` (Appendix A).

use airlock_core::control::{APPROVAL_PAGE_MAX, ControlService};
use airlock_core::ids::{ApprovalId, RunId};
use airlock_core::principal::Principal;
use airlock_core::vocab::{ApprovalResolution, ResolveState};
use clap::Subcommand;
use serde_json::json;

use super::output::{print, service_error};
use super::{Globals, json};
use crate::app::HostStore;
use crate::exit::Exit;

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List pending approvals, newest first.
    List {
        #[arg(long)]
        run: Option<RunId>,
        /// 1..=100 (default 50, `control::APPROVAL_PAGE_*`); checked before the store is
        /// opened, like every argument.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=APPROVAL_PAGE_MAX as i64))]
        limit: Option<u16>,
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Show one approval.
    Get { id: ApprovalId },
    /// Approve once.
    Approve {
        id: ApprovalId,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Deny.
    Deny {
        id: ApprovalId,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Expire the caller tenant's due approvals.
    Expire,
}

pub async fn run(globals: &Globals, command: ApprovalsCommand) -> Exit {
    let principal = match globals.principal() {
        Ok(p) => p,
        Err(exit) => return exit,
    };
    let app = match globals.open_existing_app().await {
        Ok(app) => app,
        Err(exit) => return exit,
    };
    let control = app.control(None);
    match command {
        ApprovalsCommand::List { run, limit, cursor } => {
            match control.list_pending(&principal, run, limit.map(usize::from), cursor.as_deref()) {
                Ok(page) => print(&json!({
                    "items": page.items.iter().map(json::approval).collect::<Vec<_>>(),
                    "next_cursor": page.next_cursor,
                })),
                Err(e) => service_error(&e),
            }
        }
        ApprovalsCommand::Get { id } => match control.get_approval(&principal, id) {
            Ok(approval) => print(&json::approval(&approval)),
            Err(e) => service_error(&e),
        },
        ApprovalsCommand::Approve { id, reason } => {
            resolve(
                &control,
                &principal,
                id,
                ApprovalResolution::ApproveOnce,
                reason,
            )
            .await
        }
        ApprovalsCommand::Deny { id, reason } => {
            resolve(&control, &principal, id, ApprovalResolution::Deny, reason).await
        }
        ApprovalsCommand::Expire => match control.expire_due(&principal).await {
            Ok(expired) => print(&json!({"expired": expired})),
            Err(e) => service_error(&e),
        },
    }
}

/// `{"state":…,"approval":…}`; a resolve answered `already_resolved_differently` exits 1.
async fn resolve(
    control: &ControlService<HostStore>,
    principal: &Principal,
    id: ApprovalId,
    resolution: ApprovalResolution,
    reason: Option<String>,
) -> Exit {
    match control
        .resolve(principal, id, resolution, reason.as_deref())
        .await
    {
        Ok(resolved) => {
            print(
                &json!({"state": resolved.state.as_str(), "approval": json::approval(&resolved.approval)}),
            );
            if resolved.state == ResolveState::AlreadyResolvedDifferently {
                Exit::Refusal
            } else {
                Exit::Ok
            }
        }
        Err(e) => service_error(&e),
    }
}
