//! PostgreSQL for the end-to-end tests (SPEC §18): the server from `AIRLOCK_TEST_PG_URL` (a
//! printed skip without it; a failure under `CI=true`), one fresh schema per data dir, raw SQL
//! for checks the CLI does not expose, and a loopback proxy that can cut the server off.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The test server's URL, or `None` after printing that `test` was skipped. With `CI=true` a
/// missing server fails the test.
pub fn server(test: &str) -> Option<String> {
    match std::env::var("AIRLOCK_TEST_PG_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            crate::skip::skip_or_fail(
                test,
                "AIRLOCK_TEST_PG_URL is not set",
                "`. .ci/postgres.sh` (starts a private PostgreSQL on loopback and sets it)",
                "under CI=true the PostgreSQL end-to-end tests must run (.ci/run sources \
                 .ci/postgres.sh)",
            );
            None
        }
    }
}

/// Runs `f` with a connection to `url` on a throwaway runtime.
fn with_client<T>(
    url: &str,
    f: impl AsyncFnOnce(&tokio_postgres::Client) -> Result<T, tokio_postgres::Error>,
) -> Result<T, tokio_postgres::Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        f(&client).await
    })
}

/// A schema of its own on the test server, dropped at the end.
pub struct Scratch {
    pub base: String,
    pub schema: String,
    /// `base` with `search_path` set to the schema: what `--store` gets.
    pub url: String,
}

impl Scratch {
    pub fn new(base: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let schema = format!(
            "e2e_{}_{}_{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let sql = format!("CREATE SCHEMA {schema}");
        with_client(base, async |client| client.batch_execute(&sql).await)
            .unwrap_or_else(|e| panic!("create schema on the test server: {e}"));
        Scratch {
            base: base.to_owned(),
            url: with_search_path(base, &schema),
            schema,
        }
    }

    /// Every row of `sql` (run with the schema as `search_path`), each column as text.
    pub fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        let statements = format!("SET search_path = {}; {sql}", self.schema);
        with_client(&self.base, async |client| {
            client.simple_query(&statements).await
        })
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_owned))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let sql = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema);
        let _ = with_client(&self.base, async |client| client.batch_execute(&sql).await);
    }
}

/// `url` with `options=-c search_path=<schema>` added to its query.
pub fn with_search_path(url: &str, schema: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20search_path%3D{schema}")
}

/// `url` pointed at `127.0.0.1:port` instead of its own host and port.
pub fn via_port(url: &str, port: u16) -> String {
    let scheme_end = url.find("://").expect("a URL") + 3;
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let userinfo = authority.rfind('@').map_or("", |at| &authority[..=at]);
    format!(
        "{}{userinfo}127.0.0.1:{port}{}",
        &url[..scheme_end],
        &rest[authority_end..]
    )
}

/// The `host:port` a URL names (host defaults to localhost, port to 5432).
fn host_port(url: &str) -> String {
    let rest = &url[url.find("://").expect("a URL") + 3..];
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let host = authority.rsplit('@').next().unwrap_or("localhost");
    if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    }
}

/// A TCP proxy on loopback in front of the test server: [`Proxy::cut`] closes every forwarded
/// connection and refuses new ones, which is what a worker sees when its database is lost.
pub struct Proxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    pub fn start(server_url: &str) -> Proxy {
        let upstream = host_port(server_url);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let cut = Arc::new(AtomicBool::new(false));
        let streams = Arc::new(Mutex::new(Vec::<TcpStream>::new()));
        let (cut_flag, open) = (Arc::clone(&cut), Arc::clone(&streams));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if cut_flag.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                for stream in [&client, &server] {
                    if let Ok(copy) = stream.try_clone() {
                        open.lock().expect("streams").push(copy);
                    }
                }
                pump(&client, &server);
                pump(&server, &client);
            }
        });
        Proxy { port, cut, streams }
    }

    /// The server is gone: open connections close, new ones are refused.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for stream in self.streams.lock().expect("streams").drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

fn pump(from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let mut buffer = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buffer[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_rewritten_for_the_schema_and_the_proxy() {
        assert_eq!(
            with_search_path("postgres://a@h:1/d", "s"),
            "postgres://a@h:1/d?options=-c%20search_path%3Ds"
        );
        assert_eq!(
            via_port("postgres://a@h:1/d?x=1", 9),
            "postgres://a@127.0.0.1:9/d?x=1"
        );
        assert_eq!(host_port("postgres://a:b@h:7/d"), "h:7");
        assert_eq!(host_port("postgres://h/d"), "h:5432");
    }
}
