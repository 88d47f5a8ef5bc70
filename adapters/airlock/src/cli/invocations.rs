//! `airlock invocations uncertain|settle` (Appendix A, SPEC §9.5).

use airlock_core::ids::InvocationId;
use airlock_core::vocab::SettlementOutcome;
use clap::Subcommand;
use serde_json::json;

use super::output::{print, service_error};
use super::{Globals, json};
use crate::exit::Exit;

#[derive(Debug, Subcommand)]
pub enum InvocationsCommand {
    /// The UNCERTAIN review queue, newest first.
    Uncertain {
        /// Include settled invocations.
        #[arg(long)]
        all: bool,
    },
    /// Record a finding about an UNCERTAIN invocation (it stays UNCERTAIN).
    Settle {
        id: InvocationId,
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
        InvocationsCommand::Uncertain { all } => {
            match control.list_uncertain_with_settlements(&principal, all) {
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
            match control.settle(&principal, id, outcome, &note).await {
                Ok(settlement) => print(&json::settlement(&settlement)),
                Err(e) => service_error(&e),
            }
        }
    }
}
