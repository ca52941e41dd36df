//! The Streamable HTTP transport: each JSON-RPC request is a POST whose answer is either a JSON
//! body or an event stream carrying the response. Every body counts against the byte cap.

use http::StatusCode;
use http::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;

use super::error::McpError;
use super::http::{Http, Response, content_type, is_html};
use super::rpc::{self, Answer, Incoming, RpcReply};
use super::sse::{SseMessage, SseReader};

pub const SESSION_HEADER: &str = "mcp-session-id";

/// One Streamable HTTP connection (session id included, when the server gave one).
pub struct StreamableHttp {
    pub http: Http,
    pub session_id: Option<HeaderValue>,
}

impl StreamableHttp {
    pub fn new(http: Http) -> Self {
        StreamableHttp {
            http,
            session_id: None,
        }
    }

    /// POSTs one request and waits for its response.
    pub async fn request(
        &mut self,
        body: &Value,
        id: u64,
        headers: HeaderMap,
        step: &'static str,
    ) -> Result<(Answer, HeaderMap), McpError> {
        let response = self.post(body, headers, step).await?;
        self.answer(response, id).await
    }

    /// POSTs one request whose answer may be a long-lived event stream (`subscriptions/listen`):
    /// a 2xx event stream is handed back unread, any other answer is read as [`Self::request`]
    /// reads it.
    pub async fn request_stream(
        &mut self,
        body: &Value,
        id: u64,
        headers: HeaderMap,
        step: &'static str,
    ) -> Result<Result<Response, Answer>, McpError> {
        let response = self.post(body, headers, step).await?;
        if response.status().is_success()
            && content_type(&response).starts_with("text/event-stream")
        {
            return Ok(Ok(response));
        }
        self.answer(response, id)
            .await
            .map(|(answer, _)| Err(answer))
    }

    /// Opens the session's GET event stream, on which a legacy server sends what it sends outside
    /// any request. A 2xx event stream is handed back unread; any other answer is its status.
    pub async fn get_stream(
        &mut self,
        headers: HeaderMap,
        step: &'static str,
    ) -> Result<Result<Response, StatusCode>, McpError> {
        let mut request = self
            .http
            .get(&self.http.endpoint().url)
            .header(ACCEPT, HeaderValue::from_static("text/event-stream"))
            .headers(headers);
        if let Some(session) = &self.session_id {
            request = request.header(SESSION_HEADER, session.clone());
        }
        let response = self.http.send(request, step).await?;
        let status = response.status();
        if status.is_success() && content_type(&response).starts_with("text/event-stream") {
            return Ok(Ok(response));
        }
        // Drain (bounded); nothing in it is ours to repeat.
        let _ = self.http.read_body(response).await;
        Ok(Err(status))
    }

    /// Reads the answer to request `id` from a POST's response.
    async fn answer(
        &mut self,
        response: Response,
        id: u64,
    ) -> Result<(Answer, HeaderMap), McpError> {
        let status = response.status();
        let response_headers = response.headers().clone();
        if !status.is_success() {
            // A JSON-RPC error in a 4xx body matters (era detection reads it); anything else in it
            // is not ours to repeat.
            let is_json = content_type(&response).starts_with("application/json");
            let body = self.http.read_body(response).await?;
            let reply = rpc::reply_in_error_body(is_json, &body, id);
            return Ok((Answer::Status(status, reply), response_headers));
        }
        let ctype = content_type(&response);
        let reply = if ctype.starts_with("text/event-stream") {
            self.reply_from_stream(response, id).await?
        } else if is_html(&response) {
            return Err(McpError::NotMcp(format!(
                "it answered HTTP {} with an HTML page instead of JSON-RPC; is the URL the MCP endpoint (often ending in /mcp)?",
                status.as_u16()
            )));
        } else {
            let body = self.http.read_body(response).await?;
            let value: Value = serde_json::from_slice(&body).map_err(|_| {
                McpError::NotMcp(format!(
                    "it answered HTTP {} with a body that is not JSON (content type {:?})",
                    status.as_u16(),
                    ctype
                ))
            })?;
            match rpc::classify(value, id) {
                Incoming::Reply(r) => r,
                Incoming::Other(_) => {
                    return Err(McpError::ProtocolError(
                        "the reply does not answer the request that was sent".into(),
                    ));
                }
                Incoming::Malformed(why) => {
                    return Err(McpError::ProtocolError(format!("the reply is {why}")));
                }
            }
        };
        Ok((Answer::Reply(reply), response_headers))
    }

    /// POSTs a notification; the server answers 202 (or 200) with nothing we need.
    pub async fn notify(&mut self, body: &Value, headers: HeaderMap) -> Result<(), McpError> {
        let response = self.post(body, headers, "").await?;
        // Drain (bounded) so the connection can be reused.
        let _ = self.http.read_body(response).await;
        Ok(())
    }

    /// Ends the session politely; failures do not matter.
    pub async fn close(&mut self) {
        if let Some(session) = self.session_id.take() {
            let request = self
                .http
                .delete(&self.http.endpoint().url)
                .header(SESSION_HEADER, session);
            let _ = tokio::time::timeout(
                std::time::Duration::from_secs(2),
                self.http.send(request, ""),
            )
            .await;
        }
    }

    async fn post(
        &mut self,
        body: &Value,
        headers: HeaderMap,
        step: &'static str,
    ) -> Result<Response, McpError> {
        let mut request = self
            .http
            .post(&self.http.endpoint().url)
            .header(
                ACCEPT,
                HeaderValue::from_static("application/json, text/event-stream"),
            )
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .headers(headers)
            .body(serde_json::to_vec(body).expect("a JSON value serialises"));
        if let Some(session) = &self.session_id {
            request = request.header(SESSION_HEADER, session.clone());
        }
        self.http.send(request, step).await
    }

    /// Reads an event stream until it carries our response; everything it carries counts against
    /// the byte cap.
    async fn reply_from_stream(
        &self,
        mut response: Response,
        id: u64,
    ) -> Result<RpcReply, McpError> {
        let mut reader = SseReader::whole(self.http.max_response_bytes());
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.http.transport_error(&e))?
        {
            self.http.charge(chunk.len()).await?;
            for event in reader.feed(&chunk)? {
                let value = match event {
                    SseMessage::Json(value) => value,
                    SseMessage::NotJson => {
                        return Err(McpError::ProtocolError(
                            "an event in the reply stream is not JSON".into(),
                        ));
                    }
                    SseMessage::Empty | SseMessage::Endpoint(_) | SseMessage::Other => continue,
                };
                match rpc::classify(value, id) {
                    Incoming::Reply(reply) => return Ok(reply),
                    Incoming::Other(_) => {}
                    Incoming::Malformed(why) => {
                        return Err(McpError::ProtocolError(format!(
                            "an event in the reply stream is {why}"
                        )));
                    }
                }
            }
        }
        Err(McpError::ProtocolError(
            "the reply stream ended without answering the request".into(),
        ))
    }
}
