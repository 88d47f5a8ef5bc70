//! airlock's policy gate, alone (SPEC §24): given a proposed tool call, decide `allow`,
//! `require_approval` or `deny`, with a reason code, an explanation and the exact
//! `policy_version` that decided.
//!
//! - [`action`]: the [`ProposedAction`](action::ProposedAction) an adapter builds for each call
//!   and the [`PolicyDecision`](action::PolicyDecision) the gate returns (SPEC §4);
//!   [`canonical`] JSON and argument hashes; [`scope`]s and the [`principal`] holding them (§5).
//! - [`loader`] and [`ruleset`]: strict loading of the two rule files, the profile and the
//!   hardline file, into one [`Ruleset`] with its [`PolicyVersion`] (§7); [`shipped`] holds the
//!   files airlock ships.
//! - [`engine`]: step 0 (skill authoring only from a user turn), the [`hardline`] rules and
//!   their readings of payload strings (§21), the effect [`matrix`] and the trust [`overlay`] (§6), as one pure
//!   function over what [`facts`] lets a rule read, giving a [`verdict`]; [`advisory`]
//!   declares the interfaces a later reviewer plugs into.
//! - [`action_ref`] and [`action_scan`]: the borrowed action and its direct reader, for callers
//!   that decide many actions and keep none (`airlock policy eval --jsonl`).
//!
//! The crate depends on no other airlock crate and keeps the runtime core's purity rules: no
//! I/O, no clock, no randomness. Time arrives as the action's `evaluated_at`; the same action
//! and ruleset always give the same decision, byte for byte.
//!
//! # Example
//!
//! Load the shipped files and decide one call:
//!
//! ```
//! use airlock_policy::action::ProposedAction;
//! use airlock_policy::vocab::PolicyDecisionType;
//! use airlock_policy::{Ruleset, evaluate, shipped};
//!
//! let ruleset = Ruleset::load(shipped::DEFAULT_PROFILE, shipped::HARDLINE)?;
//! let action = ProposedAction::from_json(r#"{
//!     "kind": "tool_call",
//!     "action_id": "e53089b4-4d78-4691-8cb8-11b066b2f2fd",
//!     "tenant_id": "tenant-oracle",
//!     "session_id": "501cce9d-3fdb-4258-9466-616fec7a75ef",
//!     "run_id": "5dd290e9-2766-453c-8b7f-77e8f8d2b920",
//!     "step_number": 9,
//!     "name": "demo.echo",
//!     "version": "1.0.0",
//!     "summary": "Run demo.echo with validated arguments.",
//!     "side_effect": "none",
//!     "risk": "low",
//!     "idempotency": "read_only",
//!     "required_scopes": [],
//!     "arguments": {"text": "hello"},
//!     "normalized_arguments_hash": "cbbbdcd27692344de5dbab3abcaba413fb0f45307267de7081401576df1cb176",
//!     "argument_trust": {},
//!     "origin_trust": "user",
//!     "target": {"kind": "sandbox", "isolated": false, "network_enabled": false,
//!                "device_id": null, "server_id": null},
//!     "evaluated_at": "2026-01-15T12:00:08Z"
//! }"#)?;
//! let decision = evaluate(&action, &ruleset);
//! assert_eq!(decision.decision, PolicyDecisionType::Allow);
//! assert_eq!(decision.reason_code, "policy.matrix.none");
//! println!("{}", decision.to_json());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// First, so that `wire_enum!` is in scope by name in every module below it (a `crate::` path to
// the exported macro would make each user import the crate root, which re-exports the engine).
#[macro_use]
pub mod vocab;

pub mod action;
pub mod action_ref;
pub mod action_scan;
pub mod advisory;
pub mod canonical;
pub mod comparison;
pub mod engine;
pub mod facts;
pub mod hardline;
pub mod hex;
pub mod ids;
pub mod loader;
pub mod matrix;
pub mod overlay;
pub mod principal;
pub mod profile;
pub mod ruleset;
pub mod scope;
pub mod shipped;
pub mod time;
pub mod upstream_read;
pub mod verdict;
pub mod version;
pub mod wire_text;

#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use engine::{decide, decide_with, evaluate, evaluate_with};
pub use loader::{PolicyFile, PolicyLoadError};
pub use profile::Profile;
pub use ruleset::{MATRIX_RULE_COUNT, Ruleset};
pub use version::PolicyVersion;
