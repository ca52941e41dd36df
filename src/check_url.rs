//! The `check-url` subcommand: GET one http(s) URL and exit 0 on a 2xx answer, else say why on
//! stderr and exit 1. The operator's image has no shell and no curl; this is what its `helm
//! test` hook (and anyone checking a Service from inside the cluster) runs instead.
//!
//! Exit codes: 0 a 2xx answer; 1 no answer, or another status; 2 the URL itself is wrong.

use std::process::ExitCode;
use std::time::Duration;

/// Flags of `mcp-operator check-url`.
#[derive(clap::Args, Debug)]
pub struct CheckUrlArgs {
    /// The URL to GET (http or https), e.g. http://10.0.0.10:8080/readyz.
    pub url: String,
    /// Deadline for the whole request: connect, send, the answer's status line and headers.
    #[arg(long, default_value = "5s", value_parser = crate::core::duration::parse_duration)]
    pub timeout: Duration,
}

/// Why a check failed, in words a person reading `helm test` output acts on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckFailure {
    #[error("not an http(s) URL: {0}")]
    BadUrl(String),
    #[error("no answer: {0}")]
    Unreachable(String),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    #[error("answered {0}, not 2xx")]
    Status(u16),
}

/// GETs `url` once (no redirects followed, no proxy): the status when it is 2xx.
pub async fn check(url: &str, timeout: Duration) -> Result<u16, CheckFailure> {
    let parsed =
        reqwest::Url::parse(url).map_err(|e| CheckFailure::BadUrl(format!("{url} ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(CheckFailure::BadUrl(url.to_owned()));
    }
    // Idempotent; main installs it too, the unit tests call this directly.
    crate::install_crypto_provider();
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(concat!(
            "mcp-operator-check-url/",
            env!("CARGO_PKG_VERSION")
        ))
        .build()
        .map_err(|e| CheckFailure::Unreachable(root_cause(&e)))?;
    let response = tokio::time::timeout(timeout, client.get(parsed).send())
        .await
        .map_err(|_| CheckFailure::TimedOut(timeout))?
        .map_err(|e| CheckFailure::Unreachable(root_cause(&e)))?;
    let status = response.status().as_u16();
    if response.status().is_success() {
        Ok(status)
    } else {
        Err(CheckFailure::Status(status))
    }
}

/// The innermost error's text: "Connection refused (os error 111)" rather than reqwest's
/// "error sending request".
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Runs the check, printing the outcome (the status on stdout, the failure on stderr).
pub fn main(args: CheckUrlArgs) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    match runtime.block_on(check(&args.url, args.timeout)) {
        Ok(status) => {
            println!("{}: {status}", args.url);
            ExitCode::SUCCESS
        }
        Err(failure @ CheckFailure::BadUrl(_)) => {
            eprintln!("check-url: {failure}");
            ExitCode::from(2)
        }
        Err(failure) => {
            eprintln!("check-url: {}: {failure}", args.url);
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use axum::http::StatusCode;
    use axum::routing::get;

    /// A server on a loopback port: /ok answers 200, /down 503, /moved 302, /slow never.
    async fn server() -> String {
        let app = axum::Router::new()
            .route("/ok", get(|| async { "ok" }))
            .route("/down", get(|| async { StatusCode::SERVICE_UNAVAILABLE }))
            .route(
                "/moved",
                get(|| async { (StatusCode::FOUND, [("location", "/ok")]) }),
            )
            .route("/slow", get(std::future::pending::<&'static str>));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    const SHORT: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn a_2xx_answer_passes_and_anything_else_says_what_it_was() {
        let base = server().await;
        assert_eq!(check(&format!("{base}/ok"), SHORT).await, Ok(200));
        assert_eq!(
            check(&format!("{base}/down"), SHORT).await,
            Err(CheckFailure::Status(503))
        );
        // A redirect is an answer of its own, not followed.
        assert_eq!(
            check(&format!("{base}/moved"), SHORT).await,
            Err(CheckFailure::Status(302))
        );
        assert_eq!(
            check(&format!("{base}/nowhere"), SHORT).await,
            Err(CheckFailure::Status(404))
        );
    }

    #[tokio::test]
    async fn no_answer_fails_with_the_reason_or_the_deadline() {
        // A port nothing listens on: bound, then closed.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let closed = listener.local_addr().expect("its address");
        drop(listener);
        match check(&format!("http://{closed}/readyz"), SHORT).await {
            Err(CheckFailure::Unreachable(reason)) => {
                assert!(reason.to_lowercase().contains("refused"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        let base = server().await;
        let deadline = Duration::from_millis(300);
        assert_eq!(
            check(&format!("{base}/slow"), deadline).await,
            Err(CheckFailure::TimedOut(deadline))
        );
    }

    #[tokio::test]
    async fn only_http_urls_are_checked() {
        for url in ["ftp://example.com/", "not a url", "http://", "/readyz"] {
            assert!(
                matches!(check(url, SHORT).await, Err(CheckFailure::BadUrl(_))),
                "{url}"
            );
        }
    }
}
