//! The port `POST /v1/admin/reload` calls (issue 32 item 4): the serving process's own policy
//! reload, the same as on `SIGHUP`, implemented by the binary. Below the shared state and the
//! route.

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a reload put in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReloadedRecord {
    /// The `policy_version` in force now (the same as before when the files did not change).
    pub policy_version: String,
    /// The `policy_version` in force before.
    pub previous_version: String,
    /// The shadow candidate's `policy_version`, in shadow mode.
    pub shadow_version: Option<String>,
}

/// Why a reload changed nothing: a code (`policy_load` or `storage`) and what failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadFailure {
    pub code: &'static str,
    pub message: String,
}

/// The serving process's reload (the same as on `SIGHUP`).
pub trait PolicyReload: Send + Sync {
    fn reload(
        &self,
    ) -> Pin<Box<dyn Future<Output = Result<ReloadedRecord, ReloadFailure>> + Send + '_>>;
}
