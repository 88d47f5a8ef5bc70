//! The closed vocabularies of SPEC §3: every enum with its wire spelling.
//!
//! Parsing is exact and case-sensitive; an unknown value is an error, except for [`TargetKind`],
//! which keeps unknown strings as [`TargetKind::Other`] so that a new target never breaks
//! evaluation (it is simply in no set).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A wire value that is not one of an enum's spellings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} '{value}'")]
pub struct UnknownVariant {
    pub kind: &'static str,
    pub value: String,
}

/// Declares a closed wire enum: declaration order, wire names, `FromStr`, `Display` and serde.
///
/// Exported (hidden) so that `airlock-core` declares its runtime vocabularies the same way;
/// the expansion names `serde`, which the calling crate must depend on.
#[doc(hidden)]
#[macro_export]
macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident : $kind:literal { $($(#[$vmeta:meta])* $variant:ident = $wire:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The exact wire spelling.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire),+ }
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::vocab::UnknownVariant;
            fn from_str(s: &str) -> Result<Self, $crate::vocab::UnknownVariant> {
                match s {
                    $($wire => Ok($name::$variant),)+
                    _ => Err($crate::vocab::UnknownVariant { kind: $kind, value: s.to_owned() }),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::wire_text::deserialize_parsed(d, |s| s.parse::<$name>())
            }
        }
    };
}

wire_enum! {
    /// What a tool call does to the world; selects the matrix row (SPEC §6.1).
    SideEffectClass: "side effect" {
        None = "none",
        WorkspaceRead = "workspace_read",
        WorkspaceWrite = "workspace_write",
        NetworkRead = "network_read",
        CodeExecution = "code_execution",
        PackageInstall = "package_install",
        SandboxNetwork = "sandbox_network",
        ExternalMessage = "external_message",
        ExternalWrite = "external_write",
        ExternalDelete = "external_delete",
        Financial = "financial",
        Publication = "publication",
        CredentialAccess = "credential_access",
        HostAccess = "host_access",
        Privileged = "privileged",
    }
}

impl SideEffectClass {
    /// Position in declaration order, used to index the total policy matrix.
    pub const fn index(self) -> usize {
        self as usize
    }
}

wire_enum! {
    /// Selects the approval expiry only; never part of a decision (SPEC §16 #3).
    RiskLevel: "risk level" { Low = "low", Medium = "medium", High = "high", Critical = "critical" }
}

wire_enum! {
    /// How safely a call can be repeated; drives the recovery table (SPEC §9.4).
    IdempotencyClass: "idempotency class" {
        ReadOnly = "read_only",
        Idempotent = "idempotent",
        ConditionallyIdempotent = "conditionally_idempotent",
        NonIdempotent = "non_idempotent",
    }
}

wire_enum! {
    /// What kind of action is proposed; the v1 pipeline emits only `tool_call`.
    ActionKind: "action kind" {
        ToolCall = "tool_call",
        MemoryWrite = "memory_write",
        SkillAuthoring = "skill_authoring",
        ArtifactExport = "artifact_export",
    }
}

wire_enum! {
    /// A decision, in rank order: a later variant is stricter.
    PolicyDecisionType: "decision" {
        Allow = "allow",
        AllowWithModifications = "allow_with_modifications",
        RequireApproval = "require_approval",
        Deny = "deny",
    }
}

impl PolicyDecisionType {
    /// The rank of SPEC §3: `allow` 0 … `deny` 3.
    pub const fn rank(self) -> u8 {
        self as u8
    }

    /// Whether this decision lets the call proceed without a human.
    pub const fn permits(self) -> bool {
        matches!(self, Self::Allow | Self::AllowWithModifications)
    }
}

wire_enum! {
    /// A matrix row's condition (SPEC §6.2).
    PolicyCondition: "condition" {
        PathInsideWorkspace = "path_inside_workspace",
        HostOnAllowlist = "host_on_allowlist",
        TargetIsolated = "target_isolated",
    }
}

wire_enum! {
    /// How a hardline rule matches (SPEC §6.3).
    HardlineRuleKind: "hardline rule kind" {
        SideEffect = "side_effect",
        CommandRegex = "command_regex",
        ProtectedPath = "protected_path",
        ProtectedUrlPath = "protected_url_path",
        NetworkRange = "network_range",
        TrustFlow = "trust_flow",
    }
}

wire_enum! {
    /// Provenance of content, highest first; a later variant is "lower" (SPEC §3, Trust).
    TrustLevel: "trust level" {
        Platform = "platform",
        TrustedConfiguration = "trusted_configuration",
        User = "user",
        InternalTool = "internal_tool",
        Memory = "memory",
        Knowledge = "knowledge",
        ExternalUntrusted = "external_untrusted",
    }
}

impl TrustLevel {
    /// The lower (less trusted) of two levels.
    pub fn lower(self, other: TrustLevel) -> TrustLevel {
        self.max(other)
    }

    /// Only configuration may be declared by nobody but the platform; planners and scripts may
    /// declare every other level (SPEC §3).
    pub const fn is_declarable(self) -> bool {
        !matches!(self, Self::Platform | Self::TrustedConfiguration)
    }
}

/// Where a tool runs. Unknown strings are kept verbatim and belong to no set (SPEC §3).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TargetKind {
    InProcess,
    Sandbox,
    Device,
    McpServer,
    WebProvider,
    BrowserProvider,
    Other(String),
}

impl TargetKind {
    pub fn as_str(&self) -> &str {
        match self {
            Self::InProcess => "in_process",
            Self::Sandbox => "sandbox",
            Self::Device => "device",
            Self::McpServer => "mcp_server",
            Self::WebProvider => "web_provider",
            Self::BrowserProvider => "browser_provider",
            Self::Other(s) => s,
        }
    }

    /// Never fails: unknown spellings become [`TargetKind::Other`].
    pub fn parse(s: &str) -> TargetKind {
        match s {
            "in_process" => Self::InProcess,
            "sandbox" => Self::Sandbox,
            "device" => Self::Device,
            "mcp_server" => Self::McpServer,
            "web_provider" => Self::WebProvider,
            "browser_provider" => Self::BrowserProvider,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for TargetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for TargetKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for TargetKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::wire_text::deserialize_parsed(d, |s| {
            Ok::<_, std::convert::Infallible>(TargetKind::parse(s))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_round_trip_in_declaration_order() {
        let names: Vec<&str> = SideEffectClass::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), 15);
        assert_eq!(names[0], "none");
        assert_eq!(names[14], "privileged");
        for class in SideEffectClass::ALL {
            assert_eq!(class.as_str().parse::<SideEffectClass>(), Ok(*class));
            assert_eq!(SideEffectClass::ALL[class.index()], *class);
        }
    }

    #[test]
    fn parsing_is_exact_and_case_sensitive() {
        assert!("Allow".parse::<PolicyDecisionType>().is_err());
        assert!(" allow".parse::<PolicyDecisionType>().is_err());
        let err = "USER".parse::<TrustLevel>().unwrap_err();
        assert_eq!(err.to_string(), "unknown trust level 'USER'");
    }

    #[test]
    fn decision_rank_follows_declaration_order() {
        let ranks: Vec<u8> = PolicyDecisionType::ALL.iter().map(|d| d.rank()).collect();
        assert_eq!(ranks, vec![0, 1, 2, 3]);
    }

    #[test]
    fn lower_trust_is_the_later_level() {
        assert_eq!(
            TrustLevel::User.lower(TrustLevel::ExternalUntrusted),
            TrustLevel::ExternalUntrusted
        );
        assert_eq!(
            TrustLevel::Knowledge.lower(TrustLevel::InternalTool),
            TrustLevel::Knowledge
        );
        assert!(!TrustLevel::Platform.is_declarable());
        assert!(TrustLevel::Memory.is_declarable());
    }

    #[test]
    fn unknown_target_kinds_are_kept() {
        assert_eq!(TargetKind::parse("mcp"), TargetKind::Other("mcp".into()));
        assert_eq!(TargetKind::parse("sandbox"), TargetKind::Sandbox);
        assert_eq!(TargetKind::parse("Other").as_str(), "Other");
    }
}
