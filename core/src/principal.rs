//! The caller of every service operation (SPEC §10.4): a tenant, a principal and the scopes it
//! holds.

use crate::scope::ScopeSet;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant_id: String,
    pub principal_id: String,
    pub scopes: ScopeSet,
}
