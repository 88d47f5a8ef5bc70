//! Exit codes of SPEC Appendix A and the JSON error object printed on stdout.

use std::process::ExitCode;

use serde::Serialize;

/// The process outcome classes of Appendix A.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok,
    /// A refusal: not found, forbidden, conflict, expired, self approval, no longer pending.
    Refusal,
    /// Invalid input: arguments, files or lines that do not parse.
    InvalidInput,
    /// The policy files did not load.
    PolicyLoad,
    /// Storage or configuration failure.
    Storage,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Refusal => 1,
            Exit::InvalidInput => 2,
            Exit::PolicyLoad => 3,
            Exit::Storage => 4,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: &'a str,
    message: &'a str,
}

#[derive(Serialize)]
struct ErrorEnvelope<'a> {
    error: ErrorBody<'a>,
}

/// `{"error":{"code":…,"message":…}}`, compact.
pub fn error_json(code: &str, message: &str) -> String {
    serde_json::to_string(&ErrorEnvelope {
        error: ErrorBody { code, message },
    })
    .unwrap_or_else(|_| {
        String::from(r#"{"error":{"code":"internal","message":"unprintable error"}}"#)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_json_escapes_its_message() {
        assert_eq!(
            error_json("invalid_action", "line \"1\""),
            r#"{"error":{"code":"invalid_action","message":"line \"1\""}}"#
        );
    }

    #[test]
    fn codes_follow_appendix_a() {
        let codes: Vec<u8> = [
            Exit::Ok,
            Exit::Refusal,
            Exit::InvalidInput,
            Exit::PolicyLoad,
            Exit::Storage,
        ]
        .iter()
        .map(|e| e.code())
        .collect();
        assert_eq!(codes, [0, 1, 2, 3, 4]);
    }
}
