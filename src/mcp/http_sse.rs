//! The old HTTP+SSE transport (protocol 2024-11-05 and servers that never moved on): a GET opens
//! an event stream whose first `endpoint` event names the URL to POST messages to; responses come
//! back as `message` events on the stream. A background task reads the stream; each event counts
//! against the byte cap and the task ends when the connection is dropped.

use std::sync::Arc;

use http::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use url::Url;

use super::error::McpError;
use super::http::{Http, Response, content_type};
use super::rpc::{self, Incoming, RpcReply};
use super::sse::{SseMessage, SseReader};

/// An open HTTP+SSE connection.
pub struct HttpSse {
    http: Arc<Http>,
    post_url: Url,
    messages: mpsc::Receiver<Result<Value, McpError>>,
    reader: JoinHandle<()>,
}

impl Drop for HttpSse {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl HttpSse {
    /// Opens the event stream and waits for the endpoint event.
    pub async fn connect(http: Http) -> Result<Self, McpError> {
        let http = Arc::new(http);
        let request = http
            .get(&http.endpoint().url)
            .header(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let response = http.send(request, "open the event stream").await?;
        let status = response.status();
        if !status.is_success() {
            return Err(McpError::NotMcp(format!(
                "opening the SSE stream answered HTTP {}; is the URL the server's SSE endpoint (often ending in /sse)?",
                status.as_u16()
            )));
        }
        if !content_type(&response).starts_with("text/event-stream") {
            return Err(McpError::NotMcp(format!(
                "opening the SSE stream answered with content type {:?}, not an event stream",
                content_type(&response)
            )));
        }
        let (endpoint_tx, endpoint_rx) = oneshot::channel();
        let (messages_tx, messages) = mpsc::channel(64);
        let reader = tokio::spawn(read_stream(
            http.clone(),
            response,
            endpoint_tx,
            messages_tx,
        ));
        let endpoint = match endpoint_rx.await {
            Ok(Ok(endpoint)) => endpoint,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(McpError::ProtocolError(
                    "the SSE stream ended before it named the endpoint to post messages to".into(),
                ));
            }
        };
        let post_url = same_origin_endpoint(&http.endpoint().url, &endpoint)?;
        Ok(HttpSse {
            http,
            post_url,
            messages,
            reader,
        })
    }

    /// Sends one request and waits for its response on the stream.
    pub async fn request(
        &mut self,
        body: &Value,
        id: u64,
        step: &'static str,
    ) -> Result<RpcReply, McpError> {
        self.post(body, step).await?;
        loop {
            let value = match self.messages.recv().await {
                Some(message) => message?,
                None => {
                    return Err(McpError::ProtocolError(
                        "the SSE stream closed before the request was answered".into(),
                    ));
                }
            };
            match rpc::classify(value, id) {
                Incoming::Reply(reply) => return Ok(reply),
                Incoming::Other(_) => {}
                Incoming::Malformed(why) => {
                    return Err(McpError::ProtocolError(format!(
                        "a message on the SSE stream is {why}"
                    )));
                }
            }
        }
    }

    /// The next message on the stream, whatever it is (a notification, a server request, a
    /// stray response); `None` once the stream has ended. Cancel-safe.
    pub async fn next_message(&mut self) -> Option<Result<Value, McpError>> {
        self.messages.recv().await
    }

    /// The share of the response budget the stream's messages hold.
    pub fn allowance(&self) -> Arc<super::budget::Allowance> {
        self.http.allowance()
    }

    pub async fn notify(&mut self, body: &Value) -> Result<(), McpError> {
        self.post(body, "").await
    }

    async fn post(&self, body: &Value, step: &'static str) -> Result<(), McpError> {
        let request = self
            .http
            .post(&self.post_url)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(serde_json::to_vec(body).expect("a JSON value serialises"));
        let response = self.http.send(request, step).await?;
        let status = response.status();
        let _ = self.http.read_body(response).await;
        if !status.is_success() {
            return Err(McpError::ProtocolError(format!(
                "posting a message answered HTTP {}",
                status.as_u16()
            )));
        }
        Ok(())
    }
}

/// The endpoint event may be relative; it must stay on the stream's origin so a server cannot
/// point us (with our credentials) at another host.
fn same_origin_endpoint(base: &Url, endpoint: &str) -> Result<Url, McpError> {
    let url = base.join(endpoint.trim()).map_err(|_| {
        McpError::ProtocolError("the SSE endpoint event does not hold a valid URL".into())
    })?;
    if url.origin() != base.origin() {
        return Err(McpError::BlockedEndpoint(format!(
            "the server's SSE endpoint event points to another origin ({}); refusing to send credentials there",
            url.host_str().unwrap_or("?")
        )));
    }
    Ok(url)
}

async fn read_stream(
    http: Arc<Http>,
    mut response: Response,
    endpoint_tx: oneshot::Sender<Result<String, McpError>>,
    messages: mpsc::Sender<Result<Value, McpError>>,
) {
    let mut endpoint_tx = Some(endpoint_tx);
    // One event may not exceed the cap; keep-alive comments between events cost nothing.
    let mut reader = SseReader::per_event(http.max_response_bytes());
    let fail =
        |e: McpError, endpoint_tx: &mut Option<oneshot::Sender<Result<String, McpError>>>| {
            match endpoint_tx.take() {
                Some(tx) => {
                    let _ = tx.send(Err(e));
                }
                None => {
                    let _ = messages.try_send(Err(e));
                }
            }
        };
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return,
            Err(e) => return fail(http.transport_error(&e), &mut endpoint_tx),
        };
        // What the stream carries stays with the read (its messages wait in the channel, its
        // replies become the listing), so every byte is charged.
        if let Err(e) = http.charge(chunk.len()).await {
            return fail(e, &mut endpoint_tx);
        }
        let events = match reader.feed(&chunk) {
            Ok(events) => events,
            Err(e) => return fail(e, &mut endpoint_tx),
        };
        for event in events {
            match event {
                SseMessage::Endpoint(endpoint) => {
                    if let Some(tx) = endpoint_tx.take() {
                        let _ = tx.send(Ok(endpoint));
                    }
                }
                SseMessage::Json(message) => {
                    if messages.send(Ok(message)).await.is_err() {
                        return;
                    }
                }
                SseMessage::NotJson | SseMessage::Empty => {
                    let message = Err(McpError::ProtocolError(
                        "a message on the SSE stream is not JSON".into(),
                    ));
                    if messages.send(message).await.is_err() {
                        return;
                    }
                }
                SseMessage::Other => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_must_stay_on_origin() {
        let base = Url::parse("http://127.0.0.1:9000/sse").unwrap();
        assert_eq!(
            same_origin_endpoint(&base, "/messages?session_id=1")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:9000/messages?session_id=1"
        );
        let err = same_origin_endpoint(&base, "http://169.254.169.254/x").unwrap_err();
        assert_eq!(err.reason(), "BlockedEndpoint");
    }
}
