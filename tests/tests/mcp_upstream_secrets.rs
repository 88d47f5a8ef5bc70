//! Upstream credentials kept out of the gateway file (issue 31 item 3): an HTTP upstream's
//! `headers` may name an environment variable (`${env:NAME}`) or a file (`${file:/path}`). The
//! real binary connects to a loopback HTTP server written here, which records the headers it
//! is sent: the secrets arrive resolved, and nothing airlock prints carries them. A reference
//! to an unset variable stops that server's connection before any request is made, and a
//! malformed one stops the file from loading.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Output;
use std::sync::{Arc, Mutex};

use airlock_e2e::DataDir;

/// A loopback HTTP server that records each request's header lines and answers 500.
fn recording_server() -> (u16, Arc<Mutex<Vec<String>>>) {
    answering_server(
        "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            .to_owned(),
    )
}

/// A loopback HTTP server that records each request's header lines (and its body, as a last
/// line `body: …`) and sends `answer` to every request.
fn answering_server(answer: String) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().expect("a clone of the stream"));
            let mut line = String::new();
            let mut length = 0usize;
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                let header = line.trim_end().to_owned();
                if let Some((name, value)) = header.split_once(": ")
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.parse().unwrap_or(0);
                }
                record.lock().expect("the record").push(header);
                line.clear();
            }
            let mut body = vec![0; length];
            if length > 0 && std::io::Read::read_exact(&mut reader, &mut body).is_ok() {
                record
                    .lock()
                    .expect("the record")
                    .push(format!("body: {}", String::from_utf8_lossy(&body)));
            }
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (port, seen)
}

fn gateway_file(data: &DataDir, port: u16, headers: &str) -> std::path::PathBuf {
    let path = data.path().join("gateway.toml");
    std::fs::write(
        &path,
        format!(
            r#"schema_version = 1
tenant_id = "acme"
principal_id = "alice"
scopes = ["mcp.remote.call"]
origin_trust = "user"

[servers.remote]
url = "http://127.0.0.1:{port}/mcp"

[servers.remote.headers]
{headers}
"#
        ),
    )
    .expect("write the gateway file");
    path
}

fn mcp_tools(data: &DataDir, config: &std::path::Path) -> Output {
    data.command("operator", &["mcp", "tools", "--config"])
        .arg(config)
        .output()
        .expect("airlock runs")
}

fn printed(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn header_secrets_from_the_environment_and_a_file_reach_the_upstream_and_nowhere_else() {
    let data = DataDir::new();
    let (port, seen) = recording_server();
    // PATH is set in every test process: no test has to change the environment.
    let path_value = std::env::var("PATH").expect("PATH is set");
    let secret_file = data.path().join("api-key");
    std::fs::write(&secret_file, "k3y-from-a-file-5b1e\n").expect("write the secret file");
    let config = gateway_file(
        &data,
        port,
        &format!(
            "Authorization = \"Bearer ${{env:PATH}}\"\nX-Api-Key = \"${{file:{}}}\"\nX-Plain = \"cost $${{not-a-ref}}\"",
            secret_file.display()
        ),
    );
    let output = mcp_tools(&data, &config);
    let headers = seen.lock().expect("the record").clone();
    // Header names compare without case, values exactly.
    let has = |wanted: &str| {
        let (name, value) = wanted.split_once(": ").expect("name: value");
        headers.iter().any(|h| {
            h.split_once(": ")
                .is_some_and(|(n, v)| n.eq_ignore_ascii_case(name) && v == value)
        })
    };
    assert!(
        has(&format!("authorization: Bearer {path_value}")),
        "the variable's value arrives: {headers:?}"
    );
    assert!(
        has("x-api-key: k3y-from-a-file-5b1e"),
        "the file's content arrives without its newline: {headers:?}"
    );
    assert!(
        has("x-plain: cost ${not-a-ref}"),
        "$${{ is a literal: {headers:?}"
    );
    let printed = printed(&output);
    assert!(
        !printed.contains("k3y-from-a-file-5b1e"),
        "the file's secret is never printed: {printed}"
    );
    assert!(
        !printed.contains(&path_value),
        "the variable's value is never printed: {printed}"
    );
    assert!(
        printed.contains("remote") && printed.contains("500"),
        "the server's failure is reported: {printed}"
    );
}

#[test]
fn an_unset_variable_stops_the_connection_before_any_request_and_names_only_the_variable() {
    let data = DataDir::new();
    let (port, seen) = recording_server();
    let config = gateway_file(
        &data,
        port,
        "Authorization = \"Bearer ${env:AIRLOCK_TEST_NEVER_SET_7F3A}\"",
    );
    let output = mcp_tools(&data, &config);
    let printed = printed(&output);
    assert!(
        printed.contains("environment variable AIRLOCK_TEST_NEVER_SET_7F3A is not set"),
        "{printed}"
    );
    assert!(
        seen.lock().expect("the record").is_empty(),
        "no request was made"
    );
}

#[test]
fn a_malformed_reference_stops_the_file_from_loading_with_its_path() {
    let data = DataDir::new();
    let (port, seen) = recording_server();
    let config = gateway_file(&data, port, "Authorization = \"Bearer ${TOKEN}\"");
    // Loading stops before any connection; the server only gives the file a port.
    let output = mcp_tools(&data, &config);
    assert_ne!(output.status.code(), Some(0));
    let printed = printed(&output);
    assert!(
        printed.contains("servers.remote.headers.Authorization")
            && printed.contains("unknown reference '${…}'")
            && !printed.contains("TOKEN"),
        "the header is named, the text between the braces is not: {printed}"
    );
    drop(seen);
}

/// `[servers.X.oauth]`: the gateway asks the token endpoint (client credentials, the secret
/// from a file) and calls the upstream with the token; neither the secret nor the token is
/// printed.
#[test]
fn an_oauth_client_gets_a_token_and_calls_the_upstream_with_it() {
    let data = DataDir::new();
    let token = r#"{"access_token":"tok-e2e-7d41","token_type":"Bearer","expires_in":3600}"#;
    let (token_port, token_seen) = answering_server(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{token}",
        token.len()
    ));
    let (port, seen) = recording_server();
    let secret_file = data.path().join("client-secret");
    std::fs::write(&secret_file, "cl13nt-s3cr3t\n").expect("write the secret file");
    let config = gateway_file(&data, port, "X-Trace = \"e2e\"");
    let text = std::fs::read_to_string(&config).expect("the gateway file");
    std::fs::write(
        &config,
        format!(
            "{text}\n[servers.remote.oauth]\ntoken_url = \"http://127.0.0.1:{token_port}/token\"\n\
             client_id = \"airlock-e2e\"\nclient_secret = \"${{file:{}}}\"\nscopes = [\"mcp:read\"]\n\
             token_endpoint_auth = \"client_secret_post\"\n",
            secret_file.display()
        ),
    )
    .expect("write the gateway file");
    let output = mcp_tools(&data, &config);
    let asked = token_seen.lock().expect("the record").clone();
    assert!(
        asked.iter().any(|l| l
            == "body: grant_type=client_credentials&client_id=airlock-e2e&client_secret=cl13nt-s3cr3t&scope=mcp%3Aread"),
        "the token endpoint is asked with the secret from the file: {asked:?}"
    );
    let headers = seen.lock().expect("the record").clone();
    assert!(
        headers
            .iter()
            .any(|h| h.eq_ignore_ascii_case("authorization: Bearer tok-e2e-7d41")),
        "the upstream is called with the token: {headers:?}"
    );
    let printed = printed(&output);
    assert!(
        !printed.contains("cl13nt-s3cr3t") && !printed.contains("tok-e2e-7d41"),
        "neither the secret nor the token is printed: {printed}"
    );
}

#[test]
fn an_oauth_table_beside_an_authorization_header_is_refused() {
    let data = DataDir::new();
    let (port, _) = recording_server();
    let config = gateway_file(&data, port, "Authorization = \"Bearer x\"");
    let text = std::fs::read_to_string(&config).expect("the gateway file");
    std::fs::write(
        &config,
        format!(
            "{text}\n[servers.remote.oauth]\ntoken_url = \"https://auth.example/token\"\n\
             client_id = \"c\"\nclient_secret = \"${{env:X}}\"\n"
        ),
    )
    .expect("write the gateway file");
    let output = mcp_tools(&data, &config);
    assert_ne!(output.status.code(), Some(0));
    let printed = printed(&output);
    assert!(
        printed.contains("servers.remote.oauth")
            && printed.contains("remove the Authorization header"),
        "{printed}"
    );
}
