//! The OTLP exporter's HTTP client: our reqwest (rustls with ring, as everywhere in the crate)
//! instead of the exporter's own, so the crate keeps one reqwest and one crypto provider. The
//! SDK's batch processor exports from its own thread; each post runs on the tokio runtime that
//! was current at [`Client::new`].

use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// Longest one export may take (the collector being down must not pile up requests).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest collector answer read (it is a small protobuf status).
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl Client {
    /// Needs the process's rustls provider installed (main does it first thing).
    pub fn new() -> Result<Self, String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "traces are set up outside a tokio runtime".to_string())?;
        let http = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .no_proxy()
            .build()
            .map_err(|e| format!("the HTTP client for OTLP export: {e}"))?;
        Ok(Client { http, runtime })
    }
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let http = self.http.clone();
        let (parts, body) = request.into_parts();
        let sent = self.runtime.spawn(async move {
            let mut builder = http
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body);
            builder = builder.version(parts.version);
            let answer = builder.send().await?;
            let status = answer.status();
            let headers = answer.headers().clone();
            let mut bytes = answer.bytes().await?;
            bytes.truncate(MAX_ANSWER_BYTES);
            Ok::<_, reqwest::Error>((status, headers, bytes))
        });
        let (status, headers, bytes) = sent.await??;
        let mut response = Response::new(bytes);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }
}
