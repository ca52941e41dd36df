//! The physical floor `bench/sidecar.sh` measures the sidecar against: the least a Rust HTTP
//! proxy on loopback can do. It serves HTTP/1.1 on a bare hyper connection (no router, no
//! middleware), sends each request on to one upstream through hyper's pooled client (keep-alive,
//! TCP_NODELAY on both sides) and streams the answer back untouched — no JSON parsed, no grants,
//! no audit line. One current_thread runtime, as the sidecar runs. What it costs per call (from
//! `/proc`, printed by the script) is what any proxy between agent and server pays for the two
//! hops; the sidecar's cost above it is the price of what the sidecar checks.
//!
//!   floor_proxy LISTEN_ADDR UPSTREAM_BASE      e.g. 127.0.0.1:0 http://127.0.0.1:8000
//!
//! Prints `READY <port>` once listening. Run without arguments it does nothing (as a bench
//! target, `cargo bench` runs it so).

use std::convert::Infallible;
use std::net::SocketAddr;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

type Body = http_body_util::combinators::BoxBody<bytes::Bytes, hyper::Error>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` runs every bench target with `--bench`: nothing to measure then.
    if args.len() != 2 || args[0].starts_with("--") {
        return;
    }
    let listen: SocketAddr = args[0].parse().expect("LISTEN_ADDR is host:port");
    let upstream: Uri = args[1].parse().expect("UPSTREAM_BASE is a URL");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(serve(listen, upstream));
}

async fn serve(listen: SocketAddr, upstream: Uri) {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Incoming> =
        Client::builder(TokioExecutor::new()).build(connector);
    let listener = TcpListener::bind(listen).await.expect("the address binds");
    println!("READY {}", listener.local_addr().expect("bound").port());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let client = client.clone();
        let upstream = upstream.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                forward(client.clone(), upstream.clone(), request)
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The request as it came, to the same path on the upstream; the answer as it comes.
async fn forward(
    client: Client<HttpConnector, Incoming>,
    upstream: Uri,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = format!(
        "{}://{}{path}",
        upstream.scheme_str().unwrap_or("http"),
        upstream.authority().expect("UPSTREAM_BASE names a host")
    )
    .parse()
    .expect("a URL");
    parts.headers.remove(hyper::header::HOST);
    Ok(
        match client.request(Request::from_parts(parts, body)).await {
            Ok(answer) => answer.map(|b| b.boxed()),
            Err(e) => Response::builder()
                .status(502)
                .body(
                    http_body_util::Full::new(bytes::Bytes::from(e.to_string()))
                        .map_err(|never| match never {})
                        .boxed(),
                )
                .expect("a response"),
        },
    )
}
