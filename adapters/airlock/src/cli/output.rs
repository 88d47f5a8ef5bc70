//! Printing results and errors the Appendix A way: JSON on stdout, `{"error":…}` objects for
//! service errors, exit codes by error kind.

use airlock_core::control::ServiceError;
use serde_json::Value;

use crate::app::AppError;
use crate::exit::{Exit, error_json};

/// The exit class of a service error (Appendix A).
pub fn exit_for(error: &ServiceError) -> Exit {
    match error {
        ServiceError::InvalidArgument(_) => Exit::InvalidInput,
        ServiceError::Storage(_) => Exit::Storage,
        ServiceError::Forbidden(_)
        | ServiceError::NotFound
        | ServiceError::SelfApproval
        | ServiceError::NoLongerPending { .. }
        | ServiceError::Expired
        | ServiceError::Conflict(_) => Exit::Refusal,
    }
}

/// Writes one line to stdout. `println!` would panic when the reader has gone (`| head`) or the
/// disk is full; instead the process reports it and ends with exit 4, as the `policy` commands
/// do. Nothing is left half-done by stopping here: output is printed after the commit it
/// reports.
pub fn line(text: impl std::fmt::Display) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(error) = writeln!(out, "{text}").and_then(|()| out.flush()) {
        eprintln!("error: cannot write output: {error}");
        std::process::exit(Exit::Storage.code().into());
    }
}

/// Prints a value as one line of compact JSON.
pub fn print(value: &Value) -> Exit {
    line(value);
    Exit::Ok
}

/// Prints a wire record (a struct in its field order) as one line of compact JSON.
pub fn record(record: &impl serde::Serialize) -> Exit {
    match serde_json::to_string(record) {
        Ok(text) => {
            line(text);
            Exit::Ok
        }
        Err(e) => service_error(&ServiceError::Storage(e.to_string())),
    }
}

/// Prints a service error object and returns its exit class.
pub fn service_error(error: &ServiceError) -> Exit {
    line(error_json(error.code(), &error.to_string()));
    exit_for(error)
}

/// An invalid command-line value: the error object and exit 2.
pub fn invalid_argument(message: &str) -> Exit {
    line(error_json("invalid_argument", message));
    Exit::InvalidInput
}

/// The policy files did not load: the error object (`policy_load`) on stdout like every other
/// error, and the same message on stderr as `error: …` for the person editing the files; exit 3.
pub fn policy_error(error: &impl std::fmt::Display) -> Exit {
    let message = error.to_string();
    line(error_json("policy_load", &message));
    eprintln!("error: {message}");
    Exit::PolicyLoad
}

/// A process that could not start: policy errors exit 3, storage and configuration errors 4.
pub fn app_error(error: &AppError) -> Exit {
    match error {
        AppError::Policy(e) => policy_error(e),
        AppError::Storage(_) => {
            line(error_json("storage", &error.to_string()));
            Exit::Storage
        }
        AppError::Config(_) => {
            line(error_json("configuration", &error.to_string()));
            Exit::Storage
        }
    }
}
