//! The admission webhook, served over HTTPS by every replica (leader or not: admission must not
//! wait for an election). The apiserver sends pods labelled `mcp-operator.dev/agent` (the
//! configurations' objectSelector keeps every other pod away) on two paths, and pods that use
//! a Secret on a third:
//!
//! - `/inject` (MutatingWebhookConfiguration, CREATE): reads the AgentSpec the label names and
//!   its McpServers, and answers with the patch [`crate::inject::decide`] builds, or a refusal
//!   naming what is wrong.
//! - `/validate/pods` (ValidatingWebhookConfiguration, CREATE and UPDATE of pods and
//!   pods/ephemeralcontainers): runs after every mutation and refuses what would get around
//!   the sidecar ([`crate::inject::validate`]): another container mounting its volumes, a
//!   sidecar that is not the operator's, host networking, a changed agent label.
//! - `/validate/mcpservers` (the same ValidatingWebhookConfiguration, CREATE and UPDATE of
//!   McpServers, every one, no selector): the requester may `get` every Secret the server
//!   newly names, and under a policy requiring pinning may `approve` `mcpservers/approval`
//!   for the approvals it gives ([`mcp_servers`]).
//! - `/validate/secret-mounts` (the same ValidatingWebhookConfiguration, no objectSelector,
//!   matchConditions: the pod uses some Secret): refuses any pod that would read an
//!   McpServer's credential itself ([`secret_mounts`]), labelled or not.
//! - `/validate/pods-connect` (the same ValidatingWebhookConfiguration, CONNECT on pods/exec
//!   and pods/attach): refuses an exec or attach into the containers that may hold such a
//!   credential, the sidecar and a stdio server's own ([`connect`]).
//!
//! ```text
//!  apiserver ──POST /inject (AdmissionReview)──► TLS (certs::Resolver) ──► admit()
//!                                                  │  AgentSpec <label> (get; absent: refused)
//!                                                  │  McpServers it names (get) → endpoints
//!                                                  ▼
//!                                   inject::decide (pure) ──► patch | already injected | refusal
//!  apiserver ──POST /validate/pods──► validate(): CREATE: the same reads ─► validate::on_create
//!                                                 UPDATE: validate::on_update(old, new)
//!  apiserver ──POST /validate/mcpservers──► mcp_servers::validate: SubjectAccessReviews for
//!                                            the request's user (Secrets get, pins approve)
//!  certs::Keeper (every replica, every minute): Secret with CA + serving cert, caBundle of
//!  both configurations
//! ```
//!
//! Its client is not fenced by the leader's lease: followers answer admissions and keep the
//! certificate too.
//!
//! Who may call it: anything that reaches the Service, as far as this server knows (it asks
//! for no client certificate). A caller other than the apiserver admits nothing: only the
//! apiserver's call decides whether an object is stored. On `/inject` and `/validate/pods` it
//! learns nothing it could not read itself (the sidecar's settings are the chart's values); on
//! `/validate/mcpservers` a forged review tells it whether a user it names may get a Secret or
//! approve pins — RBAC facts it may not be allowed to read. See the chart's README for
//! limiting the Service to the apiserver.

pub mod certs;
mod connect;
pub mod mcp_servers;
mod secret_mounts;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::Listener;
use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::{Api, Client, ResourceExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::api::agent_spec::{AgentSpec, grants_config_map_name};
use crate::api::mcp_server::McpServer;
use crate::controller::shared::endpoint::endpoint;
use crate::inject::{self, GrantsTrust, Outcome, References, Refusal, SidecarSettings};

use super::context::Signing;
use super::metrics::Metrics;

/// Flags of the webhook (part of `mcp-operator controller`).
#[derive(clap::Args, Debug, Clone)]
pub struct WebhookArgs {
    /// Serve the sidecar-injection webhook (HTTPS) here; without it there is no webhook.
    #[arg(long)]
    pub webhook_addr: Option<SocketAddr>,
    /// The Service in front of the webhook port: the serving certificate names it.
    #[arg(long, default_value = "mcp-operator-webhook")]
    pub webhook_service: String,
    /// The Secret (in the pod's namespace) holding the webhook's CA and serving certificate.
    #[arg(long, default_value = "mcp-operator-webhook-tls")]
    pub webhook_secret: String,
    /// The MutatingWebhookConfiguration and the ValidatingWebhookConfiguration (one name for
    /// both) whose caBundle the operator keeps.
    #[arg(long, default_value = "mcp-operator")]
    pub webhook_configuration: String,
    /// The injected sidecar as JSON: {"image": …, "port", "healthPort", "resources",
    /// "securityContext", "logLevel", "startupPeriodSeconds", "startupFailureThreshold",
    /// "responseBudget", "extraArgs", "traces": {"endpoint", "protocol", "headersSecret",
    /// "sampler", "samplerArg", "resourceAttributes"}}. Required with --webhook-addr.
    #[arg(long, env = "MCP_OPERATOR_SIDECAR")]
    pub sidecar: Option<String>,
}

/// The injected sidecar's settings from `--sidecar`, or why there are none.
pub fn settings(args: &WebhookArgs) -> Result<SidecarSettings, String> {
    let text = args
        .sidecar
        .as_deref()
        .ok_or("--webhook-addr needs --sidecar (or MCP_OPERATOR_SIDECAR): the injected sidecar's image and settings")?;
    let settings: SidecarSettings = serde_json::from_str(text)
        .map_err(|e| format!("--sidecar is not valid sidecar settings: {e}"))?;
    // Refused here, not by every injected sidecar at its start (a pod that never runs).
    if let Some(n) = settings.response_budget
        && n < MIN_SIDECAR_RESPONSE_BUDGET
    {
        return Err(format!(
            "--sidecar: responseBudget must be at least {MIN_SIDECAR_RESPONSE_BUDGET} bytes (1 MiB, the sidecar's own minimum), not {n}"
        ));
    }
    if let Some(traces) = &settings.traces {
        traces.check().map_err(|e| format!("--sidecar: {e}"))?;
    }
    Ok(settings)
}

/// The smallest `--response-budget` the sidecar accepts.
const MIN_SIDECAR_RESPONSE_BUDGET: u64 = 1024 * 1024;

#[derive(Clone)]
struct Shared {
    client: Client,
    sidecar: Arc<SidecarSettings>,
    metrics: Arc<Metrics>,
    /// The chart's ClusterRole of pin approvers, named in refusals: `<configuration>-pin-approver`
    /// (the chart names the webhook configuration and that role after its full name).
    approver_role: Arc<str>,
    /// The signing keyring, kept current by its watch: the public keys go to every sidecar.
    signing: Signing,
}

/// Starts the webhook: the first certificate is made current before it listens (so a replica
/// never answers without one), then it serves and keeps the certificate current.
pub async fn start(
    args: &WebhookArgs,
    addr: SocketAddr,
    client: Client,
    namespace: String,
    metrics: Arc<Metrics>,
    signing: Signing,
) -> Result<SocketAddr, String> {
    let sidecar = Arc::new(settings(args)?);
    let resolver = Arc::new(certs::Resolver::default());
    let keeper = certs::Keeper {
        client: client.clone(),
        namespace,
        secret: args.webhook_secret.clone(),
        service: args.webhook_service.clone(),
        configuration: args.webhook_configuration.clone(),
        life: certs::Lifetime::default(),
    };
    // The first round is retried until it works: without a certificate the webhook cannot
    // answer, and every opted-in pod would be refused.
    let mut delay = Duration::from_secs(1);
    loop {
        match keeper.sync(&resolver).await {
            Ok(()) => break,
            Err(e) if resolver.loaded() => {
                tracing::warn!("the webhook serves, but: {e}");
                break;
            }
            Err(e) => {
                tracing::error!(
                    reason = "WebhookCertificate",
                    "the webhook cannot start yet: {e}"
                );
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
    tokio::spawn({
        let resolver = Arc::clone(&resolver);
        async move {
            loop {
                tokio::time::sleep(Duration::from_secs(60)).await;
                if let Err(e) = keeper.sync(&resolver).await {
                    tracing::warn!(reason = "WebhookCertificate", "{e}");
                }
            }
        }
    });

    let mut tls = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("binding the webhook address {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let tls_listener = TlsListener::spawn(listener, TlsAcceptor::from(Arc::new(tls)));
    let app = router(Shared {
        client,
        sidecar,
        metrics,
        approver_role: format!("{}-pin-approver", args.webhook_configuration).into(),
        signing,
    });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(tls_listener, app).await {
            tracing::error!("the webhook server stopped: {e}");
        }
    });
    Ok(bound)
}

fn router(shared: Shared) -> Router {
    Router::new()
        .route("/inject", post(inject_handler))
        .route(
            "/validate/pods",
            post(|s: State<Shared>, body: Bytes| validate_handler(s, body, Check::Pods)),
        )
        .route(
            "/validate/secret-mounts",
            post(|s: State<Shared>, body: Bytes| validate_handler(s, body, Check::SecretMounts)),
        )
        .route("/validate/mcpservers", post(validate_mcp_servers_handler))
        .route("/validate/pods-connect", post(validate_connect_handler))
        .with_state(shared)
}

/// TLS connections whose handshake finished; each handshake runs on its own task with a
/// deadline, so a slow or silent client never holds up the others.
struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    fn spawn(listener: TcpListener, acceptor: TlsAcceptor) -> Self {
        let local = listener
            .local_addr()
            .expect("a bound listener has an address");
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!("webhook accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
                    {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, "webhook TLS handshake failed: {e}"),
                        Err(_) => tracing::debug!(%peer, "webhook TLS handshake timed out"),
                    }
                });
            }
        });
        TlsListener { local, ready }
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept task never ends while the listener lives.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// The request's AdmissionReview of a `K`; a body that is not one is answered 400 (and counted
/// `Invalid`): the apiserver never sends one, so whoever did learns only that.
fn parse<K: kube::Resource + serde::de::DeserializeOwned>(
    s: &Shared,
    body: &Bytes,
    what: &str,
) -> Result<AdmissionRequest<K>, Box<Response>> {
    let review: AdmissionReview<K> = serde_json::from_slice(body).map_err(|e| {
        s.metrics.admission("Invalid");
        Box::new(
            (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "text/plain")],
                format!("not an AdmissionReview of {what}: {e}").into_bytes(),
            )
                .into_response(),
        )
    })?;
    // A review without a request (or of another version) is answered as the library says.
    review.try_into().map_err(|e| {
        s.metrics.admission("Invalid");
        Box::new(reply(AdmissionResponse::invalid(e).into_review()))
    })
}

/// The answer to the apiserver, as JSON.
fn reply(review: AdmissionReview<DynamicObject>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(&review).expect("an AdmissionReview serialises"),
    )
        .into_response()
}

async fn inject_handler(State(s): State<Shared>, body: Bytes) -> Response {
    match parse::<Pod>(&s, &body, "a Pod") {
        Ok(request) => reply(review_for(&s, request).await),
        Err(refused) => *refused,
    }
}

async fn review_for(s: &Shared, request: AdmissionRequest<Pod>) -> AdmissionReview<DynamicObject> {
    let response = AdmissionResponse::from(&request);
    let namespace = request.namespace.clone().unwrap_or_default();
    let pod_name = request
        .object
        .as_ref()
        .map(|p| {
            p.metadata
                .name
                .clone()
                .or_else(|| p.metadata.generate_name.clone())
                .unwrap_or_default()
        })
        .unwrap_or_default();
    let response = match admit(s, &request, &namespace).await {
        Ok(Admitted::NotLabelled) => {
            s.metrics.admission("NotLabelled");
            response
        }
        Ok(Admitted::Already(agent)) => {
            s.metrics.admission("AlreadyInjected");
            tracing::info!(
                namespace,
                pod = pod_name,
                agent,
                "the pod already has the MCP sidecar"
            );
            response
        }
        Ok(Admitted::Patch(agent, patch)) => match response.clone().with_patch(patch) {
            Ok(r) => {
                s.metrics.admission("Injected");
                tracing::info!(namespace, pod = pod_name, agent, "injected the MCP sidecar");
                r
            }
            Err(e) => {
                s.metrics.admission("Error");
                response.deny(format!("the sidecar patch could not be encoded: {e}"))
            }
        },
        Err(Denied::Refused(refusal)) => {
            s.metrics.admission("Refused");
            tracing::info!(namespace, pod = pod_name, "refused a pod: {refusal}");
            response.deny(refusal.to_string())
        }
        Err(Denied::Api(message)) => {
            s.metrics.admission("ApiError");
            tracing::warn!(
                namespace,
                pod = pod_name,
                "could not decide on a pod: {message}"
            );
            response.deny(message)
        }
    };
    response.into_review()
}

enum Admitted {
    NotLabelled,
    Already(String),
    Patch(String, json_patch::Patch),
}

enum Denied {
    Refused(Refusal),
    Api(String),
}

/// Reads what the decision needs and makes it. A read that fails refuses the pod with the
/// reason (the configuration's failurePolicy is Fail for opted-in pods anyway).
async fn admit(
    s: &Shared,
    request: &AdmissionRequest<Pod>,
    namespace: &str,
) -> Result<Admitted, Denied> {
    let Some(pod) = request.object.as_ref() else {
        return Ok(Admitted::NotLabelled);
    };
    let agent = match inject::agent_of(pod) {
        None => return Ok(Admitted::NotLabelled),
        Some(a) => a.map_err(Denied::Refused)?.to_owned(),
    };
    // Even a pod that has a sidecar already is judged against the AgentSpec: one it brought
    // itself is refused, not taken for the operator's.
    let (grants_config_map, refs, trust) = injection_inputs(s, namespace, &agent).await?;
    match inject::decide(pod, &agent, &grants_config_map, &refs, &trust, &s.sidecar)
        .map_err(Denied::Refused)?
    {
        Outcome::AlreadyInjected => Ok(Admitted::Already(agent)),
        Outcome::Inject(patch) => Ok(Admitted::Patch(agent, patch)),
    }
}

/// The AgentSpec's grants ConfigMap, the credential keys its McpServers reference and the keys
/// its grants are signed with: what the injected sidecar is built from.
async fn injection_inputs(
    s: &Shared,
    namespace: &str,
    agent: &str,
) -> Result<(String, References, GrantsTrust), Denied> {
    let read = Duration::from_secs(5);
    let specs: Api<AgentSpec> = Api::namespaced(s.client.clone(), namespace);
    let spec = tokio::time::timeout(read, specs.get_opt(agent))
        .await
        .map_err(|_| Denied::Api(format!("reading the AgentSpec {agent:?} timed out")))?
        .map_err(|e| Denied::Api(format!("reading the AgentSpec {agent:?} failed: {e}")))?
        .ok_or_else(|| {
            Denied::Refused(Refusal::UnknownAgentSpec {
                agent: agent.to_owned(),
                namespace: namespace.to_owned(),
            })
        })?;
    if spec.metadata.deletion_timestamp.is_some() {
        return Err(Denied::Refused(Refusal::AgentSpecDeleting {
            agent: agent.to_owned(),
            namespace: namespace.to_owned(),
        }));
    }
    // The sidecar obeys only grants signed by these keys for this AgentSpec.
    let keys = s.signing.keys.borrow().clone();
    let Some(keyring) = keys.keyring() else {
        return Err(Denied::Api(
            keys.problem(&s.signing.at.namespace, &s.signing.at.name)
                .unwrap_or_default(),
        ));
    };
    let trust = GrantsTrust {
        verify_keys: keyring.verifying_keys(),
        namespace: namespace.to_owned(),
        uid: spec.metadata.uid.clone().unwrap_or_default(),
        min_sequence: spec.status.as_ref().and_then(|s| s.grants_sequence),
    };
    // The grants reference exactly the credentials of the AgentSpec's McpServers that exist
    // (the controller fills each server's endpoint from its McpServer the same way).
    let servers: Api<McpServer> = Api::namespaced(s.client.clone(), namespace);
    let mut endpoints = Vec::new();
    for wanted in &spec.spec.servers {
        let server = tokio::time::timeout(read, servers.get_opt(&wanted.name))
            .await
            .map_err(|_| Denied::Api(format!("reading the McpServer {:?} timed out", wanted.name)))?
            .map_err(|e| {
                Denied::Api(format!(
                    "reading the McpServer {:?} failed: {e}",
                    wanted.name
                ))
            })?;
        if let Some(server) = server {
            endpoints.push(endpoint(&server));
        }
    }
    Ok((
        grants_config_map_name(&spec.name_any()),
        References::of(&endpoints),
        trust,
    ))
}

/// Which validation a path runs: both judge pods and answer alike.
#[derive(Clone, Copy, Debug)]
enum Check {
    /// `/validate/pods`: labelled pods, what would get around their sidecar.
    Pods,
    /// `/validate/secret-mounts`: any pod using a Secret, an McpServer's credential read
    /// around the sidecar.
    SecretMounts,
}

impl Check {
    fn path(self) -> &'static str {
        match self {
            Check::Pods => "/validate/pods",
            Check::SecretMounts => "/validate/secret-mounts",
        }
    }
}

async fn validate_handler(State(s): State<Shared>, body: Bytes, check: Check) -> Response {
    match parse::<Pod>(&s, &body, "a Pod") {
        Ok(request) => reply(validation_for(&s, request, check).await),
        Err(refused) => *refused,
    }
}

async fn validation_for(
    s: &Shared,
    request: AdmissionRequest<Pod>,
    check: Check,
) -> AdmissionReview<DynamicObject> {
    let response = AdmissionResponse::from(&request);
    let namespace = request.namespace.clone().unwrap_or_default();
    let pod_name = if request.name.is_empty() {
        request
            .object
            .as_ref()
            .and_then(|p| p.metadata.generate_name.clone())
            .unwrap_or_default()
    } else {
        request.name.clone()
    };
    let decision = match check {
        Check::Pods => validate(s, &request, &namespace).await,
        Check::SecretMounts => secret_mounts::validate(s, &request, &namespace).await,
    };
    let response = match decision {
        Ok(()) => {
            s.metrics.admission("Valid");
            response
        }
        Err(Denied::Refused(refusal)) => {
            s.metrics.admission("Refused");
            tracing::info!(
                namespace,
                pod = pod_name,
                operation = ?request.operation,
                subresource = request.sub_resource.as_deref().unwrap_or(""),
                webhook = check.path(),
                "refused a pod: {refusal}"
            );
            response.deny(refusal.to_string())
        }
        Err(Denied::Api(message)) => {
            s.metrics.admission("ApiError");
            tracing::warn!(
                namespace,
                pod = pod_name,
                webhook = check.path(),
                "could not validate a pod: {message}"
            );
            response.deny(message)
        }
    };
    response.into_review()
}

/// CREATE: the final pod against the sidecar the injection builds now; UPDATE (also of the
/// ephemeralcontainers subresource): what changed. Other operations are not sent.
async fn validate(
    s: &Shared,
    request: &AdmissionRequest<Pod>,
    namespace: &str,
) -> Result<(), Denied> {
    match (&request.operation, &request.old_object, &request.object) {
        (Operation::Create, _, Some(pod)) => {
            let agent = match inject::agent_of(pod) {
                None => return Ok(()),
                Some(a) => a.map_err(Denied::Refused)?.to_owned(),
            };
            let (_, refs, trust) = injection_inputs(s, namespace, &agent).await?;
            let expected = inject::validate::expected_sidecar(&agent, &refs, &trust, &s.sidecar);
            inject::validate::on_create(pod, &expected).map_err(Denied::Refused)
        }
        (Operation::Update, Some(old), Some(new)) => {
            inject::validate::on_update(old, new).map_err(Denied::Refused)
        }
        _ => Ok(()),
    }
}

async fn validate_connect_handler(State(s): State<Shared>, body: Bytes) -> Response {
    match parse::<DynamicObject>(&s, &body, "pod exec or attach options") {
        Ok(request) => reply(connect_validation_for(&s, request).await),
        Err(refused) => *refused,
    }
}

async fn connect_validation_for(
    s: &Shared,
    request: AdmissionRequest<DynamicObject>,
) -> AdmissionReview<DynamicObject> {
    let response = AdmissionResponse::from(&request);
    let namespace = request.namespace.clone().unwrap_or_default();
    let user = request.user_info.username.clone().unwrap_or_default();
    let subresource = request.sub_resource.clone().unwrap_or_default();
    let response = match connect::validate(s, &request, &namespace).await {
        Ok(()) => {
            s.metrics.admission("Valid");
            response
        }
        Err(Denied::Refused(refusal)) => {
            s.metrics.admission("Refused");
            tracing::info!(
                namespace,
                pod = request.name,
                user,
                subresource,
                "refused a connection into a pod: {refusal}"
            );
            response.deny(refusal.to_string())
        }
        Err(Denied::Api(message)) => {
            s.metrics.admission("ApiError");
            tracing::warn!(
                namespace,
                pod = request.name,
                subresource,
                "could not validate a connection into a pod: {message}"
            );
            response.deny(message)
        }
    };
    response.into_review()
}

async fn validate_mcp_servers_handler(State(s): State<Shared>, body: Bytes) -> Response {
    match parse::<McpServer>(&s, &body, "an McpServer") {
        Ok(request) => reply(mcp_server_validation_for(&s, request).await),
        Err(refused) => *refused,
    }
}

async fn mcp_server_validation_for(
    s: &Shared,
    request: AdmissionRequest<McpServer>,
) -> AdmissionReview<DynamicObject> {
    let response = AdmissionResponse::from(&request);
    let namespace = request.namespace.clone().unwrap_or_default();
    let user = request.user_info.username.clone().unwrap_or_default();
    let response = match mcp_servers::validate(&s.client, &request, &s.approver_role).await {
        Ok(()) => {
            s.metrics.admission("Valid");
            response
        }
        Err(mcp_servers::Denied::Refused(message)) => {
            s.metrics.admission("Refused");
            tracing::info!(
                namespace,
                mcpserver = request.name,
                user,
                operation = ?request.operation,
                "refused an McpServer: {message}"
            );
            response.deny(message)
        }
        Err(mcp_servers::Denied::Api(message)) => {
            s.metrics.admission("ApiError");
            tracing::warn!(
                namespace,
                mcpserver = request.name,
                user,
                "could not validate an McpServer: {message}"
            );
            response.deny(message)
        }
    };
    response.into_review()
}
