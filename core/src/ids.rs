//! Typed identifiers. Each wraps a UUID (lowercase, hyphenated on the wire) so that a run id can
//! never be passed where an approval id is expected.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

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
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, uuid::Error> {
                Uuid::parse_str(s).map($name)
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
