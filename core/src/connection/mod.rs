//! A live client connection as a planner (SPEC §19.1, §19.4, §22): the gateway's side of a
//! conversation. [`live`] turns a client's `tools/call` requests into call runs and drives them
//! through the worker; [`read`] gates reads outside the journal (§19.6); [`elicit`] maps an
//! elicited approval answer. The durable conversation (its row, taint, limits, bindings and
//! answers) is [`crate::conversation`], which the worker, the executor and the control service
//! use without reaching this module; it is re-exported here for the gateway's convenience.

pub mod elicit;
pub mod live;
pub mod read;
pub mod tasks;

pub use crate::conversation::*;
