//! A call's result as the planner will read it: produced by the pipeline, folded into its step by
//! the step ledger (`run::step_writes`), which sits below the pipeline and so takes it from here.

use crate::invocation::outcome::ResultItem;
use crate::run::checkpoint::ResultRef;
use crate::vocab::OutcomeStatus;

/// A call's result as the planner will read it, with what the repeated-denial count needs.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    pub reference: ResultRef,
    pub item: ResultItem,
    pub status: OutcomeStatus,
    pub reason_code: String,
    /// The effective arguments hash, or for refusals the hash of the canonical raw arguments.
    pub arguments_hash: String,
}
