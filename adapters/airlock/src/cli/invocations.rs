//! `airlock invocations uncertain|settle` (Appendix A, SPEC §9.5).

use airlock_core::ids::InvocationId;
use airlock_core::vocab::SettlementOutcome;
use clap::Subcommand;
use serde_json::json;

use super::approvals::unresolved_exit;
use super::globals::Globals;
use super::id_arg::IdArg;
use super::json;
use super::output::{line, print, service_error};
use super::table::{self, OutputFormat};
use crate::exit::Exit;

#[derive(Debug, Subcommand)]
pub enum InvocationsCommand {
    /// The UNCERTAIN review queue, newest first.
    Uncertain {
        /// Include settled invocations.
        #[arg(long)]
        all: bool,
        /// `table`: aligned columns for a person (short id, tool, risk, sent, run, settled);
        /// JSON by default.
        #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
        output: OutputFormat,
    },
    /// Record a finding about an UNCERTAIN invocation (it stays UNCERTAIN). ID: the
    /// invocation's id, or a prefix of at least 8 hex digits of an UNCERTAIN one's.
    Settle {
        id: IdArg,
        #[arg(long)]
        outcome: SettlementOutcome,
        #[arg(long)]
        note: String,
    },
}

pub async fn run(globals: &Globals, command: InvocationsCommand) -> Exit {
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
        // Each item is the invocation record plus `settlement` (the finding, or null), so
        // `--all` shows which calls a human already settled.
        InvocationsCommand::Uncertain { all, output } => {
            match control.list_uncertain_with_settlements(&principal, all) {
                Ok(items) if output == OutputFormat::Table => {
                    let now = app.env.clock.now();
                    let rows: Vec<Vec<String>> = items
                        .iter()
                        .map(|(i, settlement)| {
                            vec![
                                table::short(i.id),
                                i.tool_name.clone(),
                                i.risk.as_str().to_owned(),
                                i.effect_sent_at.map_or("-".to_owned(), |at| {
                                    format!("{} ago", table::age(now, at))
                                }),
                                table::short(i.run_id),
                                settlement
                                    .as_ref()
                                    .map_or("-".to_owned(), |s| s.outcome.as_str().to_owned()),
                            ]
                        })
                        .collect();
                    line(table::render(
                        &["ID", "TOOL", "RISK", "SENT", "RUN", "SETTLED"],
                        &rows,
                    ));
                    Exit::Ok
                }
                Ok(items) => {
                    let items: Vec<_> = items
                        .iter()
                        .map(|(invocation, settlement)| {
                            let mut item = json::invocation(invocation);
                            item["settlement"] = settlement
                                .as_ref()
                                .map_or(serde_json::Value::Null, json::settlement);
                            item
                        })
                        .collect();
                    print(&json!({ "items": items }))
                }
                Err(e) => service_error(&e),
            }
        }
        InvocationsCommand::Settle { id, outcome, note } => {
            let candidates = if id.is_prefix() {
                match control.list_uncertain_with_settlements(&principal, true) {
                    Ok(items) => items.iter().map(|(i, _)| i.id.as_uuid()).collect(),
                    Err(e) => return service_error(&e),
                }
            } else {
                Vec::new()
            };
            let id = match id.resolve(&candidates) {
                Ok(id) => InvocationId(id),
                Err(unresolved) => return unresolved_exit(&unresolved, "UNCERTAIN invocation"),
            };
            match control.settle(&principal, id, outcome, &note).await {
                Ok(settlement) => print(&json::settlement(&settlement)),
                Err(e) => service_error(&e),
            }
        }
    }
}
