//! Where the process's spans go: stderr as before (`RUST_LOG`, default `warn`), and, when an
//! OTLP endpoint is named, an OpenTelemetry exporter (issue 31).
//!
//! The endpoint is `--otlp-endpoint URL`, else the standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
//! / `OTEL_EXPORTER_OTLP_ENDPOINT`; without any of them nothing is exported and nothing is
//! started. The exporter speaks OTLP over HTTP, `http/protobuf` unless
//! `OTEL_EXPORTER_OTLP_PROTOCOL=http/json` (a `grpc` setting is refused with a message: that
//! transport is not built in). The other `OTEL_*` variables (`OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`) are read by the
//! OpenTelemetry SDK as usual. The service is `airlock` unless `OTEL_SERVICE_NAME` says
//! otherwise.
//!
//! What is exported: the gateway's request spans and their children (`airlock_mcp::telemetry`),
//! core's `run`, `step` and `call` spans, and the metrics the gateway records. Spans are batched
//! on a thread of the SDK's and flushed when the command ends.

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The exporters of a process that exports; dropping it without [`Telemetry::shutdown`] loses
/// the last batch.
#[derive(Default)]
pub struct Telemetry {
    traces: Option<SdkTracerProvider>,
    metrics: Option<SdkMeterProvider>,
}

/// The variables that name where traces go, most specific first.
const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Whether telemetry is wanted: the flag, or a standard variable naming an endpoint.
fn wanted(flag: Option<&str>) -> bool {
    flag.is_some()
        || ENDPOINT_VARIABLES
            .iter()
            .any(|name| std::env::var(name).is_ok_and(|v| !v.trim().is_empty()))
}

/// The protocol `OTEL_EXPORTER_OTLP_PROTOCOL` names (`http/protobuf` when unset).
fn protocol() -> Result<Protocol, String> {
    let named = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_default();
    match named.trim() {
        "" | "http/protobuf" => Ok(Protocol::HttpBinary),
        "http/json" => Ok(Protocol::HttpJson),
        other => Err(format!(
            "OTEL_EXPORTER_OTLP_PROTOCOL={other:?}: airlock exports over OTLP/HTTP; use \
             http/protobuf (the default) or http/json, and the collector's HTTP port (4318)"
        )),
    }
}

/// `base` + `path`, for an endpoint named by the flag (the standard variables are read, and
/// their signal paths added, by the SDK).
fn signal_url(base: &str, path: &str) -> String {
    format!("{}/{path}", base.trim_end_matches('/'))
}

/// Installs the subscriber: stderr as `RUST_LOG` says, and the exporters when wanted. An error
/// is a setting that cannot work (the caller exits 2); nothing is installed then.
pub fn init(flag: Option<&str>) -> Result<Telemetry, String> {
    // Tool arguments and results on spans: only when the operator opts in, redacted.
    let content = std::env::var("AIRLOCK_OTEL_TOOL_CONTENT").ok();
    airlock_mcp::telemetry::set_content_export(airlock_mcp::telemetry::ContentExport::parse(
        content.as_deref(),
    )?);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let stderr = tracing_subscriber::fmt::layer()
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_filter(filter);
    if !wanted(flag) {
        let _ = tracing_subscriber::registry().with(stderr).try_init();
        return Ok(Telemetry::default());
    }
    let protocol = protocol()?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut resource = Resource::builder()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name("airlock");
    }
    let resource = resource.build();

    let mut spans = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol);
    if let Some(base) = flag {
        spans = spans.with_endpoint(signal_url(base, "v1/traces"));
    }
    let spans = spans
        .build()
        .map_err(|e| format!("cannot build the OTLP span exporter: {e}"))?;
    let traces = SdkTracerProvider::builder()
        .with_batch_exporter(spans)
        .with_resource(resource.clone())
        .build();

    let mut measures = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_protocol(protocol);
    if let Some(base) = flag {
        measures = measures.with_endpoint(signal_url(base, "v1/metrics"));
    }
    let measures = measures
        .build()
        .map_err(|e| format!("cannot build the OTLP metric exporter: {e}"))?;
    let metrics = SdkMeterProvider::builder()
        .with_periodic_exporter(measures)
        .with_resource(resource)
        .build();
    opentelemetry::global::set_meter_provider(metrics.clone());
    airlock_mcp::telemetry::set_exporting();

    // Only airlock's spans leave the process, whatever RUST_LOG says about stderr.
    // The spans' own attributes only: no source locations, thread names or busy/idle times.
    let exported = tracing_opentelemetry::layer()
        .with_tracer(traces.tracer("airlock"))
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(tracing_subscriber::filter::FilterExt::and(
            tracing_subscriber::filter::Targets::new()
                .with_target("airlock_mcp", tracing::Level::INFO)
                .with_target("airlock_core", tracing::Level::INFO)
                .with_target("airlock_http", tracing::Level::INFO),
            // Spans only: a log event's message may quote an upstream's error text.
            tracing_subscriber::filter::filter_fn(|metadata| metadata.is_span()),
        ));
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(exported)
        .try_init();
    Ok(Telemetry {
        traces: Some(traces),
        metrics: Some(metrics),
    })
}

impl Telemetry {
    /// Sends what is batched, then stops the exporters. Failures are reported on stderr only:
    /// the command's own answer stands.
    pub fn shutdown(self) {
        if let Some(traces) = self.traces
            && let Err(error) = traces.shutdown()
        {
            eprintln!("warning: exporting the last spans failed: {error}");
        }
        if let Some(metrics) = self.metrics
            && let Err(error) = metrics.shutdown()
        {
            eprintln!("warning: exporting the last metrics failed: {error}");
        }
    }
}
