//! Typed identifiers. Each wraps a UUID (lowercase, hyphenated on the wire) so that a run id can
//! never be passed where an approval id is expected.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use airlock_policy::ids::{IdSyntaxError, deserialize_canonical_uuid, parse_canonical_uuid};

macro_rules! uuid_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            pub const fn as_uuid(self) -> Uuid {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0.hyphenated(), f)
            }
        }

        impl FromStr for $name {
            type Err = IdSyntaxError;
            fn from_str(s: &str) -> Result<Self, IdSyntaxError> {
                parse_canonical_uuid(s).map($name)
            }
        }
    };
}

uuid_id!(
    /// A run: one execution of a planner for a principal.
    RunId
);
uuid_id!(
    /// A session: the conversation a run belongs to; events are sequenced per session.
    SessionId
);
uuid_id!(
    /// One tool invocation (also the action id the engine sees).
    InvocationId
);
uuid_id!(
    /// One approval request.
    ApprovalId
);
uuid_id!(
    /// One settlement of an UNCERTAIN invocation.
    SettlementId
);
uuid_id!(
    /// A parallel batch's group.
    ParallelGroupId
);
uuid_id!(
    /// One live client connection of a gateway (SPEC §19.1): the planner of its session's runs.
    ConnectionId
);
uuid_id!(
    /// One API token of the HTTP API (SPEC §20); names the token, never reveals it.
    ApiTokenId
);
uuid_id!(
    /// One notification target of a tenant (issue 32 item 1): where approvers are told.
    NotifyTargetId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_lowercase_hyphenated_spelling_parses() {
        let canonical = "0190a6f1-2b3c-7d4e-8f90-123456789abc";
        assert_eq!(
            canonical.parse::<RunId>().map(|id| id.to_string()),
            Ok(canonical.to_owned())
        );
        for other in [
            "0190A6F1-2B3C-7D4E-8F90-123456789ABC",
            "{0190a6f1-2b3c-7d4e-8f90-123456789abc}",
            "urn:uuid:0190a6f1-2b3c-7d4e-8f90-123456789abc",
            "0190a6f12b3c7d4e8f90123456789abc",
            " 0190a6f1-2b3c-7d4e-8f90-123456789abc",
            "",
            "not-a-uuid",
        ] {
            assert_eq!(
                other.parse::<ApprovalId>(),
                Err(IdSyntaxError(other.to_owned())),
                "{other}"
            );
        }
    }
}
