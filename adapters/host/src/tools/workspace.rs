//! `workspace.read_text`, `workspace.list_files` and `workspace.write_text` (SPEC §12.5): thin
//! bodies over the run's [`Workspace`] handle, which does all containment (§12.2).
//!
//! How [`WorkspaceError`] maps to reason codes, including the cases §12.5 leaves open:
//!
//! | error | read_text | list_files | write_text |
//! |---|---|---|---|
//! | `Escape` | `tool.arguments_invalid` | same | same |
//! | `NotFound` | `tool.not_found.no_such_path` | same | same |
//! | `NotAFile` | `tool.invalid_arguments.not_a_file` | — | `tool.arguments_invalid` (write onto a directory or special file) |
//! | `NotADirectory` | `tool.not_found.no_such_path` (a file stands where a directory was named, so the path cannot exist) | `tool.invalid_arguments.not_a_directory` | `tool.arguments_invalid` (cannot create below a file) |
//! | `TooLarge` | `tool.invalid_arguments.too_large` | — | — |
//! | `TooManyEntries` | — | `tool.invalid_arguments.too_many_entries` | — |
//! | `Io` | `tool.internal_error` | same | same |
//!
//! A mapping marked "—" cannot arise from that operation; it is still total and reports
//! `tool.internal_error`.

use std::sync::Arc;

use airlock_core::action::JsonMap;
use airlock_core::invocation::outcome::codes;
use airlock_core::ports::{
    BoxFut, Provenance, Tool, ToolContext, ToolFailure, ToolSuccess, Workspace, WorkspaceError,
    WsPath,
};
use airlock_core::tool::builtin::{
    workspace_list_files_spec, workspace_read_text_spec, workspace_write_text_spec,
};
use airlock_core::tool::spec::ToolSpec;
use airlock_core::vocab::TrustLevel;
use serde_json::{Value, json};

use super::body::{bool_arg_or, checksum, failure, off_the_runtime, string_arg, string_arg_or};

/// The most bytes `workspace.read_text` reads (§12.5).
pub const MAX_READ_BYTES: u64 = 1_048_576;
/// The most entries `workspace.list_files` returns; the rest set `truncated`.
pub const MAX_LISTED_ENTRIES: usize = 1000;

const NO_SUCH_PATH: &str = "tool.not_found.no_such_path";
const NOT_TEXT: &str = "tool.invalid_arguments.not_text";
const NOT_A_FILE: &str = "tool.invalid_arguments.not_a_file";
const NOT_A_DIRECTORY: &str = "tool.invalid_arguments.not_a_directory";
const TOO_LARGE: &str = "tool.invalid_arguments.too_large";
const TOO_MANY_ENTRIES: &str = "tool.invalid_arguments.too_many_entries";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Read,
    List,
    Write,
}

/// The reason code for a workspace error in one operation (the table above).
fn reason_code(operation: Operation, error: &WorkspaceError) -> &'static str {
    use Operation::{List, Read, Write};
    match (error, operation) {
        (WorkspaceError::Escape, _) => codes::ARGUMENTS_INVALID,
        (WorkspaceError::NotFound, _) => NO_SUCH_PATH,
        (WorkspaceError::NotAFile, Read) => NOT_A_FILE,
        (WorkspaceError::NotAFile, Write) => codes::ARGUMENTS_INVALID,
        (WorkspaceError::NotADirectory, Read) => NO_SUCH_PATH,
        (WorkspaceError::NotADirectory, List) => NOT_A_DIRECTORY,
        (WorkspaceError::NotADirectory, Write) => codes::ARGUMENTS_INVALID,
        (WorkspaceError::TooLarge, Read) => TOO_LARGE,
        (WorkspaceError::TooManyEntries, List) => TOO_MANY_ENTRIES,
        (WorkspaceError::NotAFile, List)
        | (WorkspaceError::TooLarge, List | Write)
        | (WorkspaceError::TooManyEntries, Read | Write)
        | (WorkspaceError::Io(_), _) => codes::INTERNAL_ERROR,
    }
}

fn workspace_failure(operation: Operation, error: &WorkspaceError) -> ToolFailure {
    failure(reason_code(operation, error), error.to_string())
}

fn handle<'a>(ctx: &'a ToolContext<'_>) -> Result<&'a Arc<dyn Workspace>, ToolFailure> {
    ctx.workspace
        .as_ref()
        .ok_or_else(|| failure(codes::INTERNAL_ERROR, "no workspace handle was provided"))
}

/// A workspace body, run off the runtime (see `off_the_runtime`) with this call's handle and
/// its own copy of the arguments: the blocking pool needs owned data.
async fn on_the_handle(
    ctx: &ToolContext<'_>,
    args: &JsonMap,
    body: fn(&dyn Workspace, &JsonMap) -> Result<ToolSuccess, ToolFailure>,
) -> Result<ToolSuccess, ToolFailure> {
    let workspace = Arc::clone(handle(ctx)?);
    let args = args.clone();
    off_the_runtime(move || body(workspace.as_ref(), &args)).await
}

fn parse_path(operation: Operation, text: &str) -> Result<WsPath, ToolFailure> {
    WsPath::parse(text).map_err(|error| workspace_failure(operation, &error))
}

/// The `workspace.read_text` tool.
#[derive(Debug, Clone)]
pub struct ReadText {
    spec: ToolSpec,
}

impl ReadText {
    pub fn new() -> ReadText {
        ReadText {
            spec: workspace_read_text_spec(),
        }
    }

    fn run(workspace: &dyn Workspace, args: &JsonMap) -> Result<ToolSuccess, ToolFailure> {
        let text = string_arg(args, "path")?;
        let path = parse_path(Operation::Read, text)?;
        let bytes = workspace
            .read_bounded(&path, MAX_READ_BYTES)
            .map_err(|error| workspace_failure(Operation::Read, &error))?;
        if bytes.contains(&0) {
            return Err(failure(NOT_TEXT, "the file contains a NUL byte"));
        }
        // Trust is decided on the bytes read, before they become text (§12.3: reads never launder).
        let trust = workspace.provenance(&path, Some(&bytes)).trust();
        let checksum = checksum(&bytes);
        let byte_count = bytes.len();
        let content = String::from_utf8(bytes)
            .map_err(|_| failure(NOT_TEXT, "the file is not valid UTF-8"))?;
        Ok(ToolSuccess {
            structured: json!({
                "path": path.as_relative(),
                "content": content,
                "byte_count": byte_count,
                "checksum": checksum,
            }),
            trust: Some(trust),
        })
    }
}

impl Default for ReadText {
    fn default() -> Self {
        ReadText::new()
    }
}

impl Tool for ReadText {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn invoke<'a>(
        &'a self,
        ctx: &'a ToolContext<'a>,
        args: &'a JsonMap,
    ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>> {
        Box::pin(on_the_handle(ctx, args, ReadText::run))
    }
}

/// The `workspace.list_files` tool.
#[derive(Debug, Clone)]
pub struct ListFiles {
    spec: ToolSpec,
}

impl ListFiles {
    pub fn new() -> ListFiles {
        ListFiles {
            spec: workspace_list_files_spec(),
        }
    }

    fn run(workspace: &dyn Workspace, args: &JsonMap) -> Result<ToolSuccess, ToolFailure> {
        let text = string_arg_or(args, "path", "")?;
        let recursive = bool_arg_or(args, "recursive", false)?;
        let path = parse_path(Operation::List, text)?;
        let mut entries = workspace
            .list(&path, recursive)
            .map_err(|error| workspace_failure(Operation::List, &error))?;
        let truncated = entries.len() > MAX_LISTED_ENTRIES;
        entries.truncate(MAX_LISTED_ENTRIES);
        // Every returned entry must have been written by this handle; an empty listing
        // reveals nothing that was not.
        let all_written = entries.iter().all(|entry| {
            WsPath::parse(&entry.path)
                .is_ok_and(|p| workspace.provenance(&p, None) == Provenance::Written)
        });
        let trust = if all_written {
            TrustLevel::InternalTool
        } else {
            TrustLevel::ExternalUntrusted
        };
        let entries: Vec<Value> = entries
            .iter()
            .map(|entry| {
                json!({
                    "path": entry.path,
                    "kind": match entry.kind {
                        airlock_core::ports::EntryKind::File => "file",
                        airlock_core::ports::EntryKind::Directory => "directory",
                    },
                    "byte_count": entry.byte_count,
                })
            })
            .collect();
        Ok(ToolSuccess {
            structured: json!({
                "path": path.as_relative(),
                "entries": entries,
                "truncated": truncated,
            }),
            trust: Some(trust),
        })
    }
}

impl Default for ListFiles {
    fn default() -> Self {
        ListFiles::new()
    }
}

impl Tool for ListFiles {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn invoke<'a>(
        &'a self,
        ctx: &'a ToolContext<'a>,
        args: &'a JsonMap,
    ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>> {
        Box::pin(on_the_handle(ctx, args, ListFiles::run))
    }
}

/// The `workspace.write_text` tool.
#[derive(Debug, Clone)]
pub struct WriteText {
    spec: ToolSpec,
}

impl WriteText {
    pub fn new() -> WriteText {
        WriteText {
            spec: workspace_write_text_spec(),
        }
    }

    fn run(workspace: &dyn Workspace, args: &JsonMap) -> Result<ToolSuccess, ToolFailure> {
        let text = string_arg(args, "path")?;
        let content = string_arg(args, "content")?;
        let path = parse_path(Operation::Write, text)?;
        let created = workspace
            .write(&path, content.as_bytes())
            .map_err(|error| workspace_failure(Operation::Write, &error))?;
        Ok(ToolSuccess {
            structured: json!({
                "path": path.as_relative(),
                "byte_count": content.len(),
                "checksum": checksum(content.as_bytes()),
                "created": created,
            }),
            trust: None,
        })
    }
}

impl Default for WriteText {
    fn default() -> Self {
        WriteText::new()
    }
}

impl Tool for WriteText {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn invoke<'a>(
        &'a self,
        ctx: &'a ToolContext<'a>,
        args: &'a JsonMap,
    ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>> {
        Box::pin(on_the_handle(ctx, args, WriteText::run))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_maps_in_every_operation() {
        use Operation::*;
        let cases = [
            (WorkspaceError::Escape, Read, "tool.arguments_invalid"),
            (WorkspaceError::Escape, List, "tool.arguments_invalid"),
            (WorkspaceError::Escape, Write, "tool.arguments_invalid"),
            (WorkspaceError::NotFound, Read, NO_SUCH_PATH),
            (WorkspaceError::NotFound, List, NO_SUCH_PATH),
            (WorkspaceError::NotFound, Write, NO_SUCH_PATH),
            (WorkspaceError::NotAFile, Read, NOT_A_FILE),
            (WorkspaceError::NotAFile, Write, "tool.arguments_invalid"),
            (WorkspaceError::NotADirectory, Read, NO_SUCH_PATH),
            (WorkspaceError::NotADirectory, List, NOT_A_DIRECTORY),
            (
                WorkspaceError::NotADirectory,
                Write,
                "tool.arguments_invalid",
            ),
            (WorkspaceError::TooLarge, Read, TOO_LARGE),
            (WorkspaceError::TooManyEntries, List, TOO_MANY_ENTRIES),
            (WorkspaceError::Io("x".into()), Read, "tool.internal_error"),
            (WorkspaceError::Io("x".into()), List, "tool.internal_error"),
            (WorkspaceError::Io("x".into()), Write, "tool.internal_error"),
        ];
        for (error, operation, code) in cases {
            assert_eq!(
                reason_code(operation, &error),
                code,
                "{error:?} in {operation:?}"
            );
        }
    }

    #[test]
    fn every_code_has_a_table_message() {
        let fallback = airlock_core::invocation::outcome::message_for("tool.no_such_code");
        for code in [
            NO_SUCH_PATH,
            NOT_TEXT,
            NOT_A_FILE,
            NOT_A_DIRECTORY,
            TOO_LARGE,
            TOO_MANY_ENTRIES,
        ] {
            assert_ne!(
                airlock_core::invocation::outcome::message_for(code),
                fallback,
                "{code}"
            );
        }
    }
}
