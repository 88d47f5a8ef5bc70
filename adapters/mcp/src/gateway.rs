//! The gateway's live tool table (SPEC §19.2): its upstream connections, what each listed, the
//! entries derived from the file, and the core registrations they map to.
//!
//! **Versions.** A tool is registered with core as `mcp.{server}.{t}` at version 1.0.0 when it is
//! first seen. When its definition hash changes (after `notifications/tools/list_changed` or a
//! re-list), the new definition is registered as the next patch version and the old version is
//! retired, so a call pinned to it at PENDING is denied `policy.revalidation.changed` when it is
//! revalidated after its approval (§10.3); clients are told with
//! `notifications/tools/list_changed`. Versions are this process's: a gateway that restarts
//! starts again at 1.0.0 (its connections' runs ended with it).
//!
//! **Pins.** A tool whose hash differs from its pin is never registered (and its earlier
//! version is retired), so its calls resolve nothing and are denied
//! `policy.matrix.unknown_tool`; the mismatch is recorded once per observed hash as the process
//! event `mcp.tool.pin_mismatch`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use airlock_core::events::EventType;
use airlock_core::live_policy::LivePolicy;
use airlock_core::policy::Ruleset;
use airlock_core::scope::ScopeSet;
use airlock_core::time::Timestamp;
use airlock_core::tool::registry::ToolRegistry;
use airlock_core::tool::spec::ToolVersion;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::body::UpstreamTool;
use crate::catalog::{Entry, Unlisted, entries, holds, spec_of};
use crate::config::GatewayConfig;
use crate::process_events::process_event;
pub use crate::process_events::{EventSink, Now};
use crate::relay::{Clients, RelayContext};
use crate::upstream::{Notice, Upstream, UpstreamError};

/// One upstream server's state.
enum ServerState {
    Connected(Arc<Upstream>),
    Failed(String),
}

#[derive(Default)]
struct Table {
    /// Per server, its entries in the server's order.
    entries: BTreeMap<String, Vec<Entry>>,
    /// Per internal name, the registered version and its definition hash.
    registered: BTreeMap<String, (ToolVersion, String)>,
    /// Per internal name, the version a reload retired with its server: the server's next
    /// registration of the name continues after it, so a call pinned to the old version is
    /// never taken for a call to the new server.
    retired: BTreeMap<String, ToolVersion>,
}

/// What a [`Gateway::reload`] changed: servers closed (gone or changed) and connected (new or
/// changed), by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayReloaded {
    pub removed: Vec<String>,
    pub added: Vec<String>,
}

/// The gateway's upstreams and tools; shared by every client connection of the process.
pub struct Gateway {
    /// The gateway file in force: replaced whole by [`Gateway::reload`].
    config: RwLock<Arc<GatewayConfig>>,
    /// Where upstreams connected later (a reload) report list changes and relay requests.
    changed: mpsc::UnboundedSender<String>,
    relays: RelayContext,
    gateway_id: String,
    registry: Arc<ToolRegistry>,
    /// The policy in force (shared with the process's environment: a reload reaches it).
    policy: Arc<LivePolicy>,
    servers: Mutex<BTreeMap<String, ServerState>>,
    table: Mutex<Table>,
    list_changed: broadcast::Sender<()>,
    /// The upstreams' resource and prompt notices (§19.6), for every client session.
    notices: broadcast::Sender<Notice>,
    events: EventSink,
    now: Now,
    /// The client sessions in-call traffic is relayed to (SPEC §19.6).
    clients: Arc<Clients>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Gateway {
    /// Connects to every upstream of `config` (concurrently), lists their tools and registers
    /// them. An upstream that fails to start is reported ([`Gateway::server_report`]) and its
    /// tools are not listed; the others serve. Returns the gateway and the receiver of
    /// upstream list changes, which [`Gateway::watch`] consumes.
    pub async fn start(
        config: GatewayConfig,
        gateway_id: String,
        registry: Arc<ToolRegistry>,
        policy: Arc<LivePolicy>,
        events: EventSink,
        now: Now,
    ) -> (Arc<Gateway>, mpsc::UnboundedReceiver<String>) {
        let (changed_tx, changed_rx) = mpsc::unbounded_channel();
        let (notices, _) = broadcast::channel(64);
        let clients = Clients::new();
        let relays = RelayContext {
            clients: Arc::clone(&clients),
            events: Arc::clone(&events),
            now: Arc::clone(&now),
        };
        let mut connecting = Vec::new();
        for server in config.servers.values() {
            let server = server.clone();
            let changed = changed_tx.clone();
            let notices = notices.clone();
            let relays = relays.clone();
            connecting.push(tokio::spawn(async move {
                let id = server.id.clone();
                (
                    id,
                    Upstream::connect(&server, changed, notices, relays).await,
                )
            }));
        }
        let mut servers = BTreeMap::new();
        for task in connecting {
            match task.await {
                Ok((id, Ok(upstream))) => {
                    servers.insert(id, ServerState::Connected(upstream));
                }
                Ok((id, Err(UpstreamError { message, .. }))) => {
                    tracing::warn!(server = %id, error = %message, "upstream failed to start; its tools are not listed");
                    servers.insert(id, ServerState::Failed(message));
                }
                Err(join) => tracing::error!(error = %join, "an upstream connect task failed"),
            }
        }
        let (list_changed, _) = broadcast::channel(16);
        let gateway = Arc::new(Gateway {
            config: RwLock::new(Arc::new(config)),
            changed: changed_tx,
            relays,
            gateway_id,
            registry,
            policy,
            servers: Mutex::new(servers),
            table: Mutex::new(Table::default()),
            list_changed,
            notices,
            events,
            now,
            clients,
        });
        gateway.refresh_all().await;
        (gateway, changed_rx)
    }

    /// The gateway file in force now.
    pub fn config(&self) -> Arc<GatewayConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The client sessions and calls in-call traffic is relayed to.
    pub fn clients(&self) -> &Arc<Clients> {
        &self.clients
    }

    /// Re-lists every connected upstream.
    pub async fn refresh_all(&self) {
        let ids: Vec<String> = self.config().servers.keys().cloned().collect();
        for id in ids {
            self.refresh(&id).await;
        }
    }

    /// The upstream of `server`, while it is connected.
    pub fn upstream(&self, server: &str) -> Option<Arc<Upstream>> {
        match lock(&self.servers).get(server) {
            Some(ServerState::Connected(upstream)) => Some(Arc::clone(upstream)),
            _ => None,
        }
    }

    /// Re-lists `server`, registers changed definitions, retires what is gone or no longer
    /// matches its pin, and tells clients when their listing changed.
    pub async fn refresh(&self, server_id: &str) {
        let config = self.config();
        let Some(server) = config.servers.get(server_id) else {
            return;
        };
        let Some(upstream) = self.upstream(server_id) else {
            return;
        };
        let tools = match upstream.list_tools().await {
            Ok(tools) => tools,
            Err(error) => {
                tracing::warn!(server = %server_id, error = %error.message, "re-listing an upstream failed; its last listing stays");
                return;
            }
        };
        let ruleset = self.ruleset();
        let denied = move |class| ruleset.profile.matrix.denies_unconditionally(class);
        let fresh = entries(server, &tools, &config.scopes, &denied);
        let now = (self.now)();
        let mut events = Vec::new();
        let changed = {
            let mut table = lock(&self.table);
            let before: Vec<(Option<String>, String, bool)> = table
                .entries
                .get(server_id)
                .map(|old| {
                    old.iter()
                        .map(|e| (e.exposed.clone(), e.definition_sha256.clone(), e.listed()))
                        .collect()
                })
                .unwrap_or_default();
            // Retire what is gone, no longer registrable, or changed.
            let keep: BTreeMap<String, String> = fresh
                .iter()
                .filter(|e| e.registrable())
                .filter_map(|e| Some((e.internal.clone()?, e.definition_sha256.clone())))
                .collect();
            let prefix = format!("mcp.{server_id}.");
            let stale: Vec<(String, ToolVersion)> = table
                .registered
                .iter()
                .filter(|(name, (_, hash))| {
                    name.starts_with(&prefix) && keep.get(*name) != Some(hash)
                })
                .map(|(name, (version, _))| (name.clone(), *version))
                .collect();
            let mut next_version: BTreeMap<String, ToolVersion> = BTreeMap::new();
            for (name, version) in stale {
                self.registry.retire(&name, version);
                table.registered.remove(&name);
                next_version.insert(
                    name,
                    ToolVersion::new(
                        version.major,
                        version.minor,
                        version.patch.saturating_add(1),
                    ),
                );
            }
            for entry in &fresh {
                if let Some(Unlisted::PinMismatch { pin }) = &entry.unlisted {
                    events.push(process_event(
                        format!(
                            "mcp.tool.pin_mismatch:{}:{}",
                            entry.internal.as_deref().unwrap_or(&entry.upstream),
                            entry.definition_sha256
                        ),
                        EventType::McpToolPinMismatch,
                        json!({
                            "server": entry.server,
                            "upstream_name": entry.upstream,
                            "exposed_name": entry.exposed,
                            "internal_name": entry.internal,
                            "pin": pin,
                            "definition_sha256": entry.definition_sha256,
                        }),
                        now,
                    ));
                }
                let Some(internal) = entry.internal.clone() else {
                    continue;
                };
                if !entry.registrable() || table.registered.contains_key(&internal) {
                    continue;
                }
                let version = next_version
                    .get(&internal)
                    .copied()
                    .or_else(|| {
                        table
                            .retired
                            .get(&internal)
                            .map(|v| ToolVersion::new(v.major, v.minor, v.patch.saturating_add(1)))
                    })
                    .unwrap_or(ToolVersion::new(1, 0, 0));
                let spec = spec_of(
                    server,
                    &entry.upstream,
                    &internal,
                    &entry.definition,
                    version,
                );
                let tool = UpstreamTool::new(
                    spec,
                    entry.upstream.clone(),
                    Arc::clone(&upstream),
                    Arc::clone(&self.clients),
                );
                match self.registry.add(Arc::new(tool)) {
                    Ok(()) => {
                        table
                            .registered
                            .insert(internal.clone(), (version, entry.definition_sha256.clone()));
                        table.retired.remove(&internal);
                        events.push(process_event(
                            format!(
                                "mcp.tool.registered:{}:{internal}@{version}",
                                self.gateway_id
                            ),
                            EventType::McpToolRegistered,
                            json!({
                                "gateway_id": self.gateway_id,
                                "server": entry.server,
                                "upstream_name": entry.upstream,
                                "internal_name": internal,
                                "version": version.to_string(),
                                "definition_sha256": entry.definition_sha256,
                            }),
                            now,
                        ));
                    }
                    Err(error) => {
                        tracing::error!(tool = %internal, error = %error, "an upstream tool could not be registered");
                    }
                }
            }
            let after: Vec<(Option<String>, String, bool)> = fresh
                .iter()
                .map(|e| (e.exposed.clone(), e.definition_sha256.clone(), e.listed()))
                .collect();
            table.entries.insert(server_id.to_owned(), fresh);
            // The first listing is not a change: no client has seen anything yet.
            !before.is_empty() && before != after
        };
        for event in events {
            (self.events)(event);
        }
        if changed {
            tracing::info!(server = %server_id, "upstream tools changed; telling clients");
            let _ = self.list_changed.send(());
        }
    }

    /// Puts a new gateway file in force without a restart (issue 32 item 4: `SIGHUP` to `mcp
    /// serve`). Only `[servers.*]` may change: a server that is new is connected and listed; one
    /// that is gone is closed and its tools retired; one whose section changed in any way is
    /// closed and connected again (so every tool metadata change re-registers its tools as a new
    /// version, and a parked call pinned to the old one is revalidated and denied
    /// `policy.revalidation.changed`, SPEC §10.3). Servers whose sections did not change keep
    /// their connections, and every client session stays open; clients hear one
    /// `notifications/tools/list_changed`. A file that changes anything else (tenant,
    /// principal, scopes, limits, `[auth]`, …) is refused and changes nothing: those bind the
    /// conversations already open, so they change only with a restart.
    ///
    /// A call in flight on a server that is closed ends as a lost upstream answer would
    /// (UNCERTAIN for a non-idempotent tool).
    pub async fn reload(&self, next: GatewayConfig) -> Result<GatewayReloaded, String> {
        let current = self.config();
        let without_servers = |config: &GatewayConfig| GatewayConfig {
            servers: BTreeMap::new(),
            ..config.clone()
        };
        if without_servers(&current) != without_servers(&next) {
            return Err(
                "only [servers.*] sections reload; restart mcp serve to change anything else"
                    .to_owned(),
            );
        }
        let removed: Vec<String> = current
            .servers
            .iter()
            .filter(|(id, server)| next.servers.get(*id) != Some(server))
            .map(|(id, _)| id.clone())
            .collect();
        let added: Vec<String> = next
            .servers
            .iter()
            .filter(|(id, server)| current.servers.get(*id) != Some(server))
            .map(|(id, _)| id.clone())
            .collect();
        // Retire and close what goes before the new file names anything.
        for id in &removed {
            self.retire_server(id);
        }
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(next.clone());
        for id in &added {
            let Some(server) = next.servers.get(id) else {
                continue;
            };
            let state = match Upstream::connect(
                server,
                self.changed.clone(),
                self.notices.clone(),
                self.relays.clone(),
            )
            .await
            {
                Ok(upstream) => ServerState::Connected(upstream),
                Err(UpstreamError { message, .. }) => {
                    tracing::warn!(server = %id, error = %message, "upstream failed to start after a reload; its tools are not listed");
                    ServerState::Failed(message)
                }
            };
            lock(&self.servers).insert(id.clone(), state);
            self.refresh(id).await;
        }
        if !removed.is_empty() || !added.is_empty() {
            let _ = self.list_changed.send(());
        }
        Ok(GatewayReloaded { removed, added })
    }

    /// Retires `server`'s registered tools, forgets its listing and closes its session.
    fn retire_server(&self, server: &str) {
        let prefix = format!("mcp.{server}.");
        {
            let mut table = lock(&self.table);
            let registered: Vec<(String, ToolVersion)> = table
                .registered
                .iter()
                .filter(|(name, _)| name.starts_with(&prefix))
                .map(|(name, (version, _))| (name.clone(), *version))
                .collect();
            for (name, version) in registered {
                self.registry.retire(&name, version);
                table.registered.remove(&name);
                table.retired.insert(name, version);
            }
            table.entries.remove(server);
        }
        if let Some(ServerState::Connected(upstream)) = lock(&self.servers).remove(server) {
            upstream.close();
        }
    }

    /// Re-lists a server each time it reports a list change, until the senders are gone.
    pub async fn watch(self: Arc<Self>, mut changed: mpsc::UnboundedReceiver<String>) {
        while let Some(server) = changed.recv().await {
            self.refresh(&server).await;
        }
    }

    /// The upstreams' resource and prompt notices (§19.6).
    pub fn subscribe_notices(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    /// The policy reads are gated by (§19.6), as in force now.
    pub fn ruleset(&self) -> Arc<Ruleset> {
        self.policy.current().live
    }

    /// The process's clock.
    pub fn now(&self) -> Timestamp {
        (self.now)()
    }

    /// The connected upstreams with their server configuration, in id order.
    pub fn connected(&self) -> Vec<(crate::config::ServerConfig, Arc<Upstream>)> {
        self.config()
            .servers
            .values()
            .filter_map(|server| Some((server.clone(), self.upstream(&server.id)?)))
            .collect()
    }

    /// Fires each time the listing a client sees changed.
    pub fn subscribe_list_changed(&self) -> broadcast::Receiver<()> {
        self.list_changed.subscribe()
    }

    /// The listed tools, as a client whose principal holds `scopes` sees them (`name` is the
    /// exposed name). The table is built with the file's scopes; an HTTP session's are its
    /// token's intersected with the file's, so a tool the file reaches but the token does not
    /// is left out here: a listing offers only what the session could call (SPEC §19.2).
    pub fn listed(&self, scopes: &ScopeSet) -> Vec<Value> {
        let table = lock(&self.table);
        table
            .entries
            .values()
            .flatten()
            .filter(|e| e.listed())
            .filter(|e| holds(scopes, &e.scope))
            .filter_map(|e| {
                let mut tool = e.definition.clone();
                tool.as_object_mut()?
                    .insert("name".into(), Value::String(e.exposed.clone()?));
                Some(tool)
            })
            .collect()
    }

    /// The internal name a call of `exposed` is proposed under; `None` for a name the gateway
    /// does not know (the client is answered −32602).
    pub fn internal_of(&self, exposed: &str) -> Option<String> {
        let table = lock(&self.table);
        table
            .entries
            .values()
            .flatten()
            .find(|e| e.exposed.as_deref() == Some(exposed))
            .and_then(|e| e.internal.clone())
    }

    /// `airlock mcp tools`: every server's state and every discovered tool's row.
    /// The definitions `server` listed, in its order (what `mcp init` drafts from).
    pub fn definitions(&self, server: &str) -> Vec<Value> {
        lock(&self.table)
            .entries
            .get(server)
            .map(|entries| entries.iter().map(|e| e.definition.clone()).collect())
            .unwrap_or_default()
    }

    /// Why `server` is not connected, if it is not.
    pub fn server_error(&self, server: &str) -> Option<String> {
        match lock(&self.servers).get(server) {
            Some(ServerState::Connected(_)) => None,
            Some(ServerState::Failed(message)) => Some(message.clone()),
            None => Some("not started".to_owned()),
        }
    }

    pub fn report(&self) -> Value {
        let servers: Vec<Value> = {
            let servers = lock(&self.servers);
            self.config()
                .servers
                .keys()
                .map(|id| match servers.get(id) {
                    Some(ServerState::Connected(upstream)) => json!({
                        "id": id,
                        "status": "connected",
                        "protocol_version": upstream.protocol_version(),
                        "error": null,
                    }),
                    Some(ServerState::Failed(message)) => json!({
                        "id": id,
                        "status": "failed",
                        "protocol_version": null,
                        "error": message,
                    }),
                    None => json!({"id": id, "status": "failed", "protocol_version": null, "error": "not started"}),
                })
                .collect()
        };
        let table = lock(&self.table);
        let tools: Vec<Value> = table
            .entries
            .values()
            .flatten()
            .map(Entry::to_json)
            .collect();
        json!({"servers": servers, "tools": tools})
    }

    /// Closes every upstream session (stdio children end with it).
    pub async fn shutdown(&self) {
        let upstreams: Vec<Arc<Upstream>> = {
            let mut servers = lock(&self.servers);
            std::mem::take(&mut *servers)
                .into_values()
                .filter_map(|s| match s {
                    ServerState::Connected(u) => Some(u),
                    ServerState::Failed(_) => None,
                })
                .collect()
        };
        for upstream in upstreams {
            upstream.close();
        }
    }
}
