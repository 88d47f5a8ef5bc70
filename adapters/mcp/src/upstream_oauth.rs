//! An upstream's bearer token from an OAuth 2.1 client-credentials grant (issue 31 item 3):
//! `[servers.X.oauth]` names the token endpoint, the client and what to ask for; the gateway
//! asks for a token when it first needs one, keeps it, asks again shortly before it expires,
//! and sends it as `Authorization: Bearer …` on every request to that server.
//!
//! When the server answers 401 anyway (revoked, rotated, clock skew), the token is refreshed
//! once, and the request is sent again with the new token only if repeating it cannot repeat
//! an effect: a read (listing, `resources/read`, `prompts/get`, `initialize`, …) or a call of a
//! tool the file classifies `read_only`. Any other call fails with the 401; the next request
//! carries the new token. Neither the client secret nor a token appears in any message.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

use crate::config::{OAuthClient, TokenEndpointAuth};
use crate::secret_ref::{ProcessSecrets, SecretTemplate};

/// A token is asked for again this long before it expires (or at half its life, if shorter).
const REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// The life assumed when the endpoint gives no `expires_in`.
const DEFAULT_LIFE: Duration = Duration::from_secs(300);
/// The largest token response read.
const MAX_TOKEN_RESPONSE: usize = 64 * 1024;

/// Why no token could be had. No variant carries the secret or a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("client_secret: {0}")]
    Secret(String),
    #[error("token endpoint {url}: {reason}")]
    Endpoint { url: String, reason: String },
}

struct Token {
    access: String,
    refresh_at: Instant,
}

/// The longest a token request may take, connect to last byte.
const TOKEN_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Redirects followed for one MCP request at most.
const MAX_REDIRECTS: usize = 10;

/// The HTTP client of a server's MCP requests. Redirects are followed only when they keep the
/// request as it was and where it was meant to go: a 307 or 308 to the same origin, at most
/// [`MAX_REDIRECTS`] times (a 301/302/303 would turn the POST into a GET and lose the message,
/// and another origin would receive the token, the session id and the configured headers);
/// any other redirect is the answer. Idle connections are not pooled, as rmcp's own client
/// does not pool them. An error, not a panic, when it cannot be built.
pub fn mcp_http_client() -> Result<reqwest::Client, String> {
    crate::tls::install_default_provider();
    let same_origin = reqwest::redirect::Policy::custom(|attempt| {
        let keeps_the_request = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_the_request || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .redirect(same_origin)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// The HTTP client of a token endpoint: no redirect is followed (a redirected request would
/// carry the client's credentials elsewhere), and a request ends after
/// [`TOKEN_REQUEST_TIMEOUT`].
pub fn token_http_client() -> Result<reqwest::Client, String> {
    crate::tls::install_default_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(TOKEN_REQUEST_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// One server's tokens: asked for when needed, kept until shortly before they expire.
pub struct TokenSource {
    client: OAuthClient,
    http: reqwest::Client,
    token: tokio::sync::Mutex<Option<Token>>,
}

impl TokenSource {
    pub fn new(client: OAuthClient, http: reqwest::Client) -> Arc<TokenSource> {
        Arc::new(TokenSource {
            client,
            http,
            token: tokio::sync::Mutex::new(None),
        })
    }

    /// The current token, asked for first if there is none or it is due.
    pub async fn bearer(&self) -> Result<String, TokenError> {
        self.held_or_new(|held| Instant::now() < held.refresh_at)
            .await
    }

    /// After a 401 for `rejected`: a new token, unless another request already replaced it
    /// (then that one), so a burst of 401s asks the endpoint once.
    pub async fn refresh(&self, rejected: &str) -> Result<String, TokenError> {
        self.held_or_new(|held| held.access != rejected).await
    }

    /// The held token if `keep` says so, else a new one from the endpoint (asked for under
    /// the lock, so concurrent requests ask once).
    async fn held_or_new(&self, keep: impl Fn(&Token) -> bool) -> Result<String, TokenError> {
        let mut token = self.token.lock().await;
        if let Some(held) = token.as_ref()
            && keep(held)
        {
            return Ok(held.access.clone());
        }
        let fresh = self.request().await?;
        let access = fresh.access.clone();
        *token = Some(fresh);
        Ok(access)
    }

    /// One client-credentials request (RFC 6749 §4.4, form-encoded), the client authenticated
    /// by HTTP Basic or in the body as the file says.
    async fn request(&self) -> Result<Token, TokenError> {
        let client = &self.client;
        let secret = SecretTemplate::parse(&client.client_secret)
            .map_err(|e| TokenError::Secret(e.to_string()))?
            .resolve(&ProcessSecrets)
            .map_err(|e| TokenError::Secret(e.to_string()))?;
        // Built before the first await: the serializer is not `Send`.
        let body = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", "client_credentials");
            if client.auth == TokenEndpointAuth::ClientSecretPost {
                form.append_pair("client_id", &client.client_id);
                form.append_pair("client_secret", &secret);
            }
            if !client.scopes.is_empty() {
                form.append_pair("scope", &client.scopes.join(" "));
            }
            if let Some(audience) = &client.audience {
                form.append_pair("audience", audience);
            }
            if let Some(resource) = &client.resource {
                form.append_pair("resource", resource);
            }
            form.finish()
        };
        let failed = |reason: String| TokenError::Endpoint {
            url: client.token_url.clone(),
            reason,
        };
        let asked = Instant::now();
        let mut request = self.http.post(&client.token_url);
        if client.auth == TokenEndpointAuth::ClientSecretBasic {
            // RFC 6749 §2.3.1: each part form-encoded, then HTTP Basic.
            let encoded = |text: &str| {
                url::form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>()
            };
            request = request.basic_auth(encoded(&client.client_id), Some(encoded(&secret)));
        }
        let response = request
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| failed(format!("unreachable ({})", without_url(&e))))?;
        let status = response.status();
        // Read at most MAX_TOKEN_RESPONSE + 1 bytes, whatever the endpoint sends.
        let mut response = response;
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| failed(format!("unreadable answer ({})", without_url(&e))))?
        {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_TOKEN_RESPONSE {
                return Err(failed(format!(
                    "answered {status} with more than {MAX_TOKEN_RESPONSE} bytes"
                )));
            }
        }
        if !status.is_success() {
            // The body may echo the request; only the OAuth error code is repeated.
            let code = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
                .filter(|c| c.len() <= 64 && c.bytes().all(|b| b.is_ascii_graphic()));
            return Err(failed(match code {
                Some(code) => format!("answered {status} ({code})"),
                None => format!("answered {status}"),
            }));
        }
        #[derive(serde::Deserialize)]
        struct Answer {
            access_token: String,
            token_type: Option<String>,
            expires_in: Option<u64>,
        }
        let answer: Answer = serde_json::from_slice(&body)
            .map_err(|_| failed("answer is not a token response".to_owned()))?;
        if answer
            .token_type
            .as_deref()
            .is_some_and(|t| !t.eq_ignore_ascii_case("bearer"))
        {
            return Err(failed(
                "answered a token that is not a bearer token".to_owned(),
            ));
        }
        if answer.access_token.is_empty() || HeaderValue::from_str(&answer.access_token).is_err() {
            return Err(failed("answered an unusable access token".to_owned()));
        }
        let life = answer
            .expires_in
            .map_or(DEFAULT_LIFE, |s| Duration::from_secs(s.min(86_400 * 365)));
        let early = REFRESH_MARGIN.min(life / 2);
        Ok(Token {
            access: answer.access_token,
            refresh_at: asked + life - early,
        })
    }
}

/// A reqwest error's words without its URL (a URL may carry a query worth keeping private).
fn without_url(error: &reqwest::Error) -> String {
    let mut text = String::new();
    let mut source: Option<&dyn std::error::Error> = Some(error);
    if let Some(first) = source.and_then(std::error::Error::source) {
        source = Some(first);
    }
    if let Some(error) = source {
        text = error.to_string();
    }
    text
}

/// Whether sending `message` twice can repeat no effect: a request that only reads, or a
/// call of a tool whose configured class is `read_only`.
pub fn retry_safe(message: &ClientJsonRpcMessage, read_only_tool: &dyn Fn(&str) -> bool) -> bool {
    let ClientJsonRpcMessage::Request(request) = message else {
        return false;
    };
    match &request.request {
        ClientRequest::CallToolRequest(call) => read_only_tool(call.params.name.as_ref()),
        ClientRequest::InitializeRequest(_)
        | ClientRequest::DiscoverRequest(_)
        | ClientRequest::PingRequest(_)
        | ClientRequest::ListToolsRequest(_)
        | ClientRequest::ListResourcesRequest(_)
        | ClientRequest::ListResourceTemplatesRequest(_)
        | ClientRequest::ReadResourceRequest(_)
        | ClientRequest::ListPromptsRequest(_)
        | ClientRequest::GetPromptRequest(_)
        | ClientRequest::CompleteRequest(_)
        | ClientRequest::GetTaskRequest(_)
        | ClientRequest::ListSkillsRequest(_)
        | ClientRequest::GetSkillRequest(_)
        | ClientRequest::ReadResourceDirectoryRequest(_) => true,
        _ => false,
    }
}

/// Whether an upstream's answer was a 401: with a challenge (`AuthRequired`), or without one,
/// which rmcp's reqwest client reports as `HTTP 401 …`.
fn unauthorized<E: std::error::Error + Send + Sync + 'static>(
    error: &StreamableHttpError<E>,
) -> bool {
    match error {
        StreamableHttpError::AuthRequired(_) => true,
        StreamableHttpError::UnexpectedServerResponse(text) => text.starts_with("HTTP 401"),
        _ => false,
    }
}

/// rmcp's HTTP client with this server's bearer token on every request.
#[derive(Clone)]
pub struct BearerClient {
    inner: reqwest::Client,
    tokens: Arc<TokenSource>,
    read_only_tool: ReadOnlyTool,
}

/// Whether the file classifies an upstream tool (by its own name) `read_only`.
pub type ReadOnlyTool = Arc<dyn Fn(&str) -> bool + Send + Sync>;

impl BearerClient {
    pub fn new(
        inner: reqwest::Client,
        tokens: Arc<TokenSource>,
        read_only_tool: ReadOnlyTool,
    ) -> BearerClient {
        BearerClient {
            inner,
            tokens,
            read_only_tool,
        }
    }

    async fn token(&self) -> Result<String, StreamableHttpError<reqwest::Error>> {
        self.tokens.bearer().await.map_err(token_failure)
    }
}

/// The error of a request the server refused with 401, in words that carry nothing the server
/// sent; with why the token could not be refreshed, if it could not.
fn refused(refresh: Option<&TokenError>) -> StreamableHttpError<reqwest::Error> {
    let words = match refresh {
        None => "HTTP 401 Unauthorized: the server refused the OAuth token (refreshed for the next request)".to_owned(),
        Some(failure) => format!("HTTP 401 Unauthorized: the server refused the OAuth token, and no new one: {failure}"),
    };
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(words))
}

fn token_failure(error: TokenError) -> StreamableHttpError<reqwest::Error> {
    StreamableHttpError::UnexpectedServerResponse(Cow::Owned(format!("OAuth: {error}")))
}

impl StreamableHttpClient for BearerClient {
    type Error = reqwest::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>>>
    + Send
    + '_ {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            None,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
    }

    fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>>>
    + Send
    + '_ {
        let mut limits = StreamableHttpResponseLimits::default();
        limits.max_sse_event_size = max_sse_event_size;
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            None,
            custom_headers,
            limits,
        )
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let token = self.token().await?;
        let retry = retry_safe(&message, &*self.read_only_tool).then(|| message.clone());
        let first = self
            .inner
            .post_message_with_response_limits(
                Arc::clone(&uri),
                message,
                session_id.clone(),
                Some(token.clone()),
                custom_headers.clone(),
                limits,
            )
            .await;
        match first {
            Err(error) if unauthorized(&error) => {
                // A 401 is reported in fixed words: rmcp's text of an unchallenged one
                // carries the start of the body, which may echo the rejected token.
                drop(error);
                let fresh = match self.tokens.refresh(&token).await {
                    Ok(fresh) => fresh,
                    Err(failure) => return Err(refused(Some(&failure))),
                };
                let Some(message) = retry else {
                    return Err(refused(None));
                };
                match self
                    .inner
                    .post_message_with_response_limits(
                        uri,
                        message,
                        session_id,
                        Some(fresh),
                        custom_headers,
                        limits,
                    )
                    .await
                {
                    Err(again) if unauthorized(&again) => Err(refused(None)),
                    other => other,
                }
            }
            other => other,
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        let token = self.token().await?;
        self.inner
            .delete_session(uri, session_id, Some(token), custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        let token = self.token().await?;
        self.inner
            .get_stream(uri, session_id, last_event_id, Some(token), custom_headers)
            .await
    }

    /// rmcp passes its SSE event limit through these two; they must reach the inner client
    /// (the defaults would drop it).
    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        let token = self.token().await?;
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                Some(token),
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use rmcp::model::{
        CallToolRequest, CallToolRequestParams, ClientRequest, JsonRpcRequest, PingRequest,
        RequestId,
    };
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    use super::*;

    /// One request as the test server saw it.
    #[derive(Debug, Clone)]
    struct Seen {
        path: String,
        authorization: Option<String>,
        body: String,
    }

    /// A loopback HTTP/1.1 server answering each request with the next scripted response
    /// (status, content type, body), recording what it was sent.
    async fn server(script: Vec<(u16, &'static str, String)>) -> (String, Arc<Mutex<Vec<Seen>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let base = format!("http://{}", listener.local_addr().expect("an address"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let record = Arc::clone(&record);
                let script = Arc::clone(&script);
                tokio::spawn(async move {
                    let mut stream = BufReader::new(stream);
                    loop {
                        let mut line = String::new();
                        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let path = line.split(' ').nth(1).unwrap_or_default().to_owned();
                        let (mut length, mut authorization) = (0usize, None);
                        loop {
                            let mut header = String::new();
                            if stream.read_line(&mut header).await.unwrap_or(0) == 0 {
                                return;
                            }
                            let header = header.trim_end();
                            if header.is_empty() {
                                break;
                            }
                            let (name, value) = header.split_once(": ").unwrap_or((header, ""));
                            if name.eq_ignore_ascii_case("content-length") {
                                length = value.parse().unwrap_or(0);
                            }
                            if name.eq_ignore_ascii_case("authorization") {
                                authorization = Some(value.to_owned());
                            }
                        }
                        let mut body = vec![0; length];
                        if stream.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        record.lock().expect("record").push(Seen {
                            path,
                            authorization,
                            body: String::from_utf8_lossy(&body).into_owned(),
                        });
                        let (status, kind, body) = script
                            .lock()
                            .expect("script")
                            .pop_front()
                            .unwrap_or((500, "text/plain", "unscripted".to_owned()));
                        // 401 answers with a challenge; 4010 is a 401 without one.
                        let (status, challenge) = match status {
                            401 => (401, "www-authenticate: Bearer realm=\"test\"\r\n"),
                            4010 => (401, ""),
                            other => (other, ""),
                        };
                        let head = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: {kind}\r\ncontent-length: {}\r\n{challenge}\r\n",
                            body.len()
                        );
                        let stream = stream.get_mut();
                        if stream.write_all(head.as_bytes()).await.is_err()
                            || stream.write_all(body.as_bytes()).await.is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        (base, seen)
    }

    fn token(access: &str, expires_in: u64) -> (u16, &'static str, String) {
        (
            200,
            "application/json",
            format!(
                r#"{{"access_token":"{access}","token_type":"Bearer","expires_in":{expires_in}}}"#
            ),
        )
    }

    fn client(token_url: String, secret: &str) -> OAuthClient {
        OAuthClient {
            token_url,
            client_id: "airlock-gw".to_owned(),
            client_secret: secret.to_owned(),
            scopes: vec!["mcp:read".to_owned(), "mcp:write".to_owned()],
            audience: None,
            resource: Some("https://api.example/mcp".to_owned()),
            auth: TokenEndpointAuth::ClientSecretPost,
        }
    }

    /// The default (RFC 6749 §2.3.1): HTTP Basic with the form-encoded id and secret, and
    /// neither in the body.
    #[tokio::test]
    async fn by_default_the_client_authenticates_with_http_basic() {
        let (base, seen) = server(vec![token("tok-b", 3600)]).await;
        let mut basic = client(format!("{base}/token"), "p:w+d");
        basic.auth = TokenEndpointAuth::ClientSecretBasic;
        let source = TokenSource::new(basic, token_http_client().expect("an HTTP client"));
        assert_eq!(source.bearer().await, Ok("tok-b".to_owned()));
        let request = seen.lock().expect("seen")[0].clone();
        assert_eq!(
            request.authorization.as_deref(),
            Some("Basic YWlybG9jay1ndzpwJTNBdyUyQmQ="),
            "base64 of airlock-gw:p%3Aw%2Bd"
        );
        assert_eq!(
            request.body,
            "grant_type=client_credentials&scope=mcp%3Aread+mcp%3Awrite\
             &resource=https%3A%2F%2Fapi.example%2Fmcp"
        );
    }

    #[tokio::test]
    async fn a_token_is_asked_for_once_kept_and_asked_for_again_when_due() {
        let (base, seen) = server(vec![
            token("tok-1", 3600),
            token("tok-2", 0),
            token("tok-3", 0),
        ])
        .await;
        let source = TokenSource::new(
            client(format!("{base}/token"), "s3cr3t-literal"),
            token_http_client().expect("an HTTP client"),
        );
        assert_eq!(source.bearer().await, Ok("tok-1".to_owned()));
        assert_eq!(source.bearer().await, Ok("tok-1".to_owned()), "kept");
        assert_eq!(seen.lock().expect("seen").len(), 1, "asked once");
        let request = seen.lock().expect("seen")[0].clone();
        assert_eq!(request.path, "/token");
        assert_eq!(
            request.body,
            "grant_type=client_credentials&client_id=airlock-gw&client_secret=s3cr3t-literal\
             &scope=mcp%3Aread+mcp%3Awrite&resource=https%3A%2F%2Fapi.example%2Fmcp"
        );
        // After a 401 with tok-1 a new token is asked for; a token that lives 0 s is due at once.
        assert_eq!(source.refresh("tok-1").await, Ok("tok-2".to_owned()));
        assert_eq!(
            source.bearer().await,
            Ok("tok-3".to_owned()),
            "due, asked again"
        );
        assert_eq!(seen.lock().expect("seen").len(), 3);
        // A 401 for a token already replaced asks nothing: the replacement is the answer.
        assert_eq!(source.refresh("tok-1").await, Ok("tok-3".to_owned()));
        assert_eq!(seen.lock().expect("seen").len(), 3);
    }

    #[tokio::test]
    async fn a_refused_or_odd_answer_is_an_error_that_carries_no_secret() {
        let (base, _) = server(vec![
            (
                401,
                "application/json",
                r#"{"error":"invalid_client","error_description":"secret s3cr3t-literal is wrong"}"#
                    .to_owned(),
            ),
            (200, "application/json", r#"{"access_token":"t","token_type":"mac"}"#.to_owned()),
            (200, "text/plain", "s3cr3t-literal".to_owned()),
        ])
        .await;
        let source = TokenSource::new(
            client(format!("{base}/token"), "s3cr3t-literal"),
            token_http_client().expect("an HTTP client"),
        );
        for expected in [
            "answered 401 Unauthorized (invalid_client)",
            "not a bearer token",
            "not a token response",
        ] {
            let error = source.bearer().await.expect_err(expected).to_string();
            assert!(error.contains(expected), "{error}");
            assert!(!error.contains("s3cr3t"), "{error}");
        }
        let unset = TokenSource::new(
            client(
                format!("{base}/token"),
                "${env:AIRLOCK_TEST_NEVER_SET_9C2D}",
            ),
            token_http_client().expect("an HTTP client"),
        );
        assert_eq!(
            unset.bearer().await.map_err(|e| e.to_string()),
            Err(
                "client_secret: environment variable AIRLOCK_TEST_NEVER_SET_9C2D is not set"
                    .to_owned()
            )
        );
    }

    fn ping() -> ClientJsonRpcMessage {
        ClientJsonRpcMessage::Request(JsonRpcRequest::new(
            RequestId::Number(1),
            ClientRequest::PingRequest(PingRequest::default()),
        ))
    }

    fn call(tool: &'static str) -> ClientJsonRpcMessage {
        ClientJsonRpcMessage::Request(JsonRpcRequest::new(
            RequestId::Number(2),
            ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new(tool))),
        ))
    }

    #[test]
    fn only_reads_and_read_only_tools_may_be_sent_again() {
        let read_only = |name: &str| name == "search";
        assert!(retry_safe(&ping(), &read_only));
        assert!(retry_safe(&call("search"), &read_only));
        assert!(!retry_safe(&call("send_mail"), &read_only));
    }

    #[tokio::test]
    async fn a_401_refreshes_once_and_sends_again_only_what_cannot_repeat_an_effect() {
        let ok = (
            200,
            "application/json",
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_owned(),
        );
        let denied = (
            401,
            "application/json",
            r#"{"error":"invalid_token"}"#.to_owned(),
        );
        let (base, seen) = server(vec![
            token("tok-1", 3600),
            denied.clone(),
            token("tok-2", 3600),
            ok,
            denied,
            token("tok-3", 3600),
        ])
        .await;
        let inner = token_http_client().expect("an HTTP client");
        let tokens = TokenSource::new(client(format!("{base}/token"), "s"), inner.clone());
        let bearer = BearerClient::new(inner, tokens, Arc::new(|name: &str| name == "search"));
        let uri: Arc<str> = Arc::from(format!("{base}/mcp").as_str());
        let answered = bearer
            .post_message(Arc::clone(&uri), ping(), None, None, HashMap::new())
            .await;
        assert!(
            answered.is_ok(),
            "the ping is sent again with the new token: {answered:?}"
        );
        let refused = bearer
            .post_message(
                Arc::clone(&uri),
                call("send_mail"),
                None,
                None,
                HashMap::new(),
            )
            .await;
        assert!(refused.is_err(), "a write is not sent again");
        let requests: Vec<(String, Option<String>)> = seen
            .lock()
            .expect("seen")
            .iter()
            .map(|s| (s.path.clone(), s.authorization.clone()))
            .collect();
        let bearer_of = |t: &str| Some(format!("Bearer {t}"));
        assert_eq!(
            requests,
            vec![
                ("/token".to_owned(), None),
                ("/mcp".to_owned(), bearer_of("tok-1")),
                ("/token".to_owned(), None),
                ("/mcp".to_owned(), bearer_of("tok-2")),
                ("/mcp".to_owned(), bearer_of("tok-2")),
                ("/token".to_owned(), None),
            ],
            "one refresh per 401, one resend for the ping, none for the write"
        );
    }

    /// A 401 without a challenge (rmcp reports it as `HTTP 401 …` with the start of the body)
    /// is a 401 too; what the server sent, here the rejected token, is never in the error.
    #[tokio::test]
    async fn a_401_without_a_challenge_is_refreshed_and_its_body_is_not_repeated() {
        let echo = (
            4010,
            "text/plain",
            "invalid token tok-1 for this resource".to_owned(),
        );
        let (base, seen) = server(vec![
            token("tok-1", 3600),
            echo.clone(),
            token("tok-2", 3600),
            echo,
        ])
        .await;
        let inner = token_http_client().expect("an HTTP client");
        let tokens = TokenSource::new(client(format!("{base}/token"), "s"), inner.clone());
        let bearer = BearerClient::new(inner, tokens, Arc::new(|_: &str| true));
        let uri: Arc<str> = Arc::from(format!("{base}/mcp").as_str());
        let error = bearer
            .post_message(uri, ping(), None, None, HashMap::new())
            .await
            .map(|_| ())
            .expect_err("refused twice")
            .to_string();
        assert!(error.contains("HTTP 401"), "{error}");
        assert!(
            !error.contains("tok-1") && !error.contains("tok-2"),
            "{error}"
        );
        assert_eq!(
            seen.lock().expect("seen").len(),
            4,
            "token, call, token, call again"
        );
    }
}
