//! Tools (SPEC §12.4–§12.5): specs and their argument schemas, the registry, and the builtin
//! specs (with the bodies that need no I/O).

pub mod builtin;
pub mod registry;
pub mod spec;
