//! The deterministic policy gate (SPEC §6–§7): strict loading of the two rule files, the
//! hardline rules, the effect matrix, the trust overlay, and the pure engine over them.

pub mod advisory;
pub mod engine;
pub mod hardline;
pub mod loader;
pub mod matrix;
pub mod overlay;
pub mod profile;
pub mod ruleset;
pub mod shipped;
pub mod upstream_read;
pub mod version;

pub use engine::{evaluate, evaluate_with};
pub use loader::{PolicyFile, PolicyLoadError};
pub use profile::Profile;
pub use ruleset::{MATRIX_RULE_COUNT, Ruleset};
pub use version::PolicyVersion;
