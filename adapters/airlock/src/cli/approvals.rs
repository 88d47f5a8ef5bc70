//! `airlock approvals list|get|approve|deny|expire` (Appendix A).

use airlock_core::control::{APPROVAL_PAGE_MAX, ControlService};
use airlock_core::ids::{ApprovalId, RunId};
use airlock_core::principal::Principal;
use airlock_core::vocab::{ApprovalResolution, ResolveState};
use clap::Subcommand;
use serde_json::json;

use super::globals::Globals;
use super::id_arg::{IdArg, Unresolved};
use super::json;
use super::output::{invalid_argument, line, print, service_error};
use super::table::{self, OutputFormat};
use crate::app::HostStore;
use crate::exit::{Exit, error_json};

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
        /// `table`: aligned columns for a person (short id, tool, risk, age, expires in, run,
        /// principal); JSON by default.
        #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
        output: OutputFormat,
    },
    /// Show one approval; a note on stderr says when it was requested under other rules than
    /// those in force.
    Get { id: ApprovalId },
    /// Approve once. ID: the approval's id, or a prefix of at least 8 hex digits of a pending
    /// one's.
    Approve {
        id: IdArg,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Deny. ID as for approve.
    Deny {
        id: IdArg,
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
        ApprovalsCommand::List {
            run,
            limit,
            cursor,
            output,
        } => {
            match control.list_pending(&principal, run, limit.map(usize::from), cursor.as_deref()) {
                Ok(page) if output == OutputFormat::Table => {
                    let now = app.env.clock.now();
                    let rows: Vec<Vec<String>> = page
                        .items
                        .iter()
                        .map(|a| {
                            vec![
                                table::short(a.id),
                                a.tool_name.clone(),
                                a.risk.as_str().to_owned(),
                                table::age(now, a.created_at),
                                table::until(now, a.expires_at),
                                table::short(a.run_id),
                                a.principal_id.clone(),
                            ]
                        })
                        .collect();
                    line(table::render(
                        &[
                            "ID",
                            "TOOL",
                            "RISK",
                            "AGE",
                            "EXPIRES IN",
                            "RUN",
                            "PRINCIPAL",
                        ],
                        &rows,
                    ));
                    if let Some(next) = page.next_cursor {
                        line(format!("(more: --cursor {next})"));
                    }
                    Exit::Ok
                }
                Ok(page) => print(&json!({
                    "items": page.items.iter().map(json::approval).collect::<Vec<_>>(),
                    "next_cursor": page.next_cursor,
                })),
                Err(e) => service_error(&e),
            }
        }
        ApprovalsCommand::Get { id } => match control.get_approval(&principal, id) {
            Ok(approval) => {
                // §22.5: tell the person when the rules in force are not the ones it was
                // requested under; stdout stays the record the HTTP API answers with.
                let ruleset = app.env.ruleset();
                let in_force = ruleset.version.as_str();
                if approval.policy_version != in_force {
                    eprintln!(
                        "note: requested under {}; in force now {in_force}",
                        approval.policy_version
                    );
                }
                print(&json::approval(&approval))
            }
            Err(e) => service_error(&e),
        },
        ApprovalsCommand::Approve { id, reason } => {
            let id = match pending_named(&control, &principal, &id) {
                Ok(id) => id,
                Err(exit) => return exit,
            };
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
            let id = match pending_named(&control, &principal, &id) {
                Ok(id) => id,
                Err(exit) => return exit,
            };
            resolve(&control, &principal, id, ApprovalResolution::Deny, reason).await
        }
        ApprovalsCommand::Expire => match control.expire_due(&principal).await {
            Ok(expired) => print(&json!({"expired": expired})),
            Err(e) => service_error(&e),
        },
    }
}

/// The approval `arg` names: a whole id as given, or the one pending approval of the tenant
/// whose id starts with the prefix (see `id_arg`).
fn pending_named(
    control: &ControlService<HostStore>,
    principal: &Principal,
    arg: &IdArg,
) -> Result<ApprovalId, Exit> {
    let mut candidates = Vec::new();
    if arg.is_prefix() {
        let mut cursor: Option<String> = None;
        loop {
            let page = control
                .list_pending(principal, None, Some(APPROVAL_PAGE_MAX), cursor.as_deref())
                .map_err(|e| service_error(&e))?;
            candidates.extend(page.items.iter().map(|a| a.id.as_uuid()));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    arg.resolve(&candidates)
        .map(ApprovalId)
        .map_err(|unresolved| unresolved_exit(&unresolved, "pending approval"))
}

/// A prefix that named no single id: not found (exit 1), or ambiguous (exit 2).
pub fn unresolved_exit(unresolved: &Unresolved, what: &str) -> Exit {
    match unresolved {
        Unresolved::NoMatch(prefix) => {
            line(error_json(
                "not_found",
                &format!("no {what} has an id starting with '{prefix}'"),
            ));
            Exit::Refusal
        }
        Unresolved::Ambiguous(..) => invalid_argument(&unresolved.to_string()),
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
