//! `airlock conversations list|show|clear-taint` (SPEC §22.1): an MCP client's conversations,
//! their taint, and the one way a taint ends, a human clearing it with a reason.

use airlock_core::ids::ConnectionId;
use clap::Subcommand;
use serde_json::json;

use super::globals::Globals;
use super::json;
use super::output::{print, service_error};
use super::table::{self, OutputFormat};
use crate::exit::Exit;

#[derive(Debug, Subcommand)]
pub enum ConversationsCommand {
    /// The tenant's conversations, newest first (scope `run.read`).
    List {
        /// 1..=100 (default 50).
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=100))]
        limit: Option<u16>,
        /// `table`: aligned columns for a person (short id, status, principal, calls, tainted,
        /// age); JSON by default.
        #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
        output: OutputFormat,
    },
    /// Show a conversation (scope `run.read`).
    Show { conversation: ConnectionId },
    /// Clear a conversation's taint (scope `approval.resolve`): its later calls are proposed
    /// untainted again. Recorded as `conversation.taint_cleared` with your reason.
    ClearTaint {
        conversation: ConnectionId,
        /// Why the content that tainted it is trusted now (recorded with the clear).
        #[arg(long)]
        reason: String,
    },
}

pub async fn conversations(globals: &Globals, command: ConversationsCommand) -> Exit {
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
        ConversationsCommand::List { limit, output } => {
            match control.list_conversations(&principal, limit.map(usize::from)) {
                Ok(items) if output == OutputFormat::Table => {
                    let now = app.env.clock.now();
                    let rows: Vec<Vec<String>> = items
                        .iter()
                        .map(|c| {
                            vec![
                                table::short(c.id),
                                c.status().as_str().to_owned(),
                                c.principal_id.clone(),
                                c.call_count.to_string(),
                                c.taint
                                    .as_ref()
                                    .map_or_else(|| "no".to_owned(), |t| table::age(now, t.at)),
                                table::age(now, c.opened_at),
                            ]
                        })
                        .collect();
                    table::print_page(
                        &["ID", "STATUS", "PRINCIPAL", "CALLS", "TAINTED", "AGE"],
                        &rows,
                        None,
                    );
                    Exit::Ok
                }
                Ok(items) => print(&json!({
                    "items": items.iter().map(json::conversation).collect::<Vec<_>>(),
                })),
                Err(e) => service_error(&e),
            }
        }
        ConversationsCommand::Show { conversation } => {
            match control.get_conversation(&principal, conversation) {
                Ok(c) => print(&json::conversation(&c)),
                Err(e) => service_error(&e),
            }
        }
        ConversationsCommand::ClearTaint {
            conversation,
            reason,
        } => match control.clear_conversation_taint(&principal, conversation, &reason, None) {
            Ok(c) => print(&json::conversation(&c)),
            Err(e) => service_error(&e),
        },
    }
}
