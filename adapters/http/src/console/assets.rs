//! The console's only two assets, compiled into the binary (no CDN: the machines are offline).
//! Both are our own files, small enough to review: `console.css` and `console.js`.

use axum::extract::Path;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("../../assets/console.css");
const JS: &str = include_str!("../../assets/console.js");

/// `GET /assets/{name}`.
pub async fn serve(Path(name): Path<String>) -> Response {
    let (body, content_type) = match name.as_str() {
        "console.css" => (CSS, "text/css; charset=utf-8"),
        "console.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return crate::problem::Problem::no_route().into_response(),
    };
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Revalidate on every load, so a new binary's assets are picked up at once.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
