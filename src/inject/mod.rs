//! Sidecar injection, the pure part: a Pod labelled `mcp-operator.dev/agent: <AgentSpec>` and the
//! Secret and ConfigMap keys that AgentSpec's grants reference → the JSON patch that adds the
//! sidecar. The admission webhook (`controller::webhook`) gathers the inputs and sends the
//! patch; nothing here does I/O. Uses `grants` and `core` only.
//!
//! ```text
//!  Pod (label mcp-operator.dev/agent=bot)          what the patch adds
//!  ────────────────────────────────────────        ─────────────────────────────────────────────
//!  initContainers[0]  ◄── mcp-sidecar             `mcp-operator sidecar`, restartPolicy: Always
//!                                                  (a native sidecar), startupProbe on /readyz:
//!                                                  the agent's containers start after it is ready
//!  volumes            ◄── mcp-grants               ConfigMap bot-mcp-grants (grants.json)
//!                     ◄── mcp-credentials          projected: exactly the referenced keys, as
//!                                                  secrets/<secret>/<key>, configmaps/<cm>/<key>
//!                     ◄── mcp-sidecar-state        emptyDir: the highest grants sequence the
//!                                                  sidecar accepted (survives its restarts)
//!  sidecar args       ◄── --grants-verify-keys, --agent-namespace, --agent-uid: the sidecar
//!                                                  obeys only grants the operator signed for
//!                                                  this AgentSpec ([`GrantsTrust`])
//!  sidecar env        ◄── RUST_LOG; OTEL_* when the chart's telemetry.otlp.endpoint is set
//!                                                  ([`traces`]: the sidecar exports its spans)
//!  containers[*].env  ◄── MCP_SERVER_URL           http://127.0.0.1:<port>/mcp (unless set)
//!  annotations        ◄── mcp-operator.dev/injected: bot
//!                     ◄── mcp-operator.dev/mounted-credentials: the projected files
//!                                                  (names and keys, no value; see `drift`)
//! ```
//!
//! A pod that already has the sidecar gets no patch (re-admission never injects twice); a pod
//! that brings a container of the sidecar's name that is not the one the injection builds is
//! refused. What a labelled pod may not do once injected (mount the sidecar's volumes, host
//! networking, change its label) is judged by [`validate`], behind `/validate/pods`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapProjection, ConfigMapVolumeSource, Container, ContainerPort, EnvVar,
    HTTPGetAction, KeyToPath, Pod, Probe, ProjectedVolumeSource, ResourceRequirements,
    SeccompProfile, SecretProjection, SecurityContext, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::grants::Endpoint;
use crate::grants::signature::VerifyingKeys;

pub mod connect;
pub mod drift;
pub use drift::{MOUNTS_ANNOTATION, PodDrift, drift};
pub mod secret_mounts;
pub mod traces;
pub use traces::TraceExport;
pub mod validate;
pub use validate::SIDECAR_VOLUMES;

/// The label that opts a pod in; its value names the AgentSpec in the pod's namespace.
pub const AGENT_LABEL: &str = "mcp-operator.dev/agent";
/// The annotation an injected pod carries: the AgentSpec it was injected for.
pub const INJECTED_ANNOTATION: &str = "mcp-operator.dev/injected";
/// The sidecar's container name (also how an injected pod is recognised).
pub const SIDECAR_CONTAINER: &str = "mcp-sidecar";
/// The grants ConfigMap volume.
pub const GRANTS_VOLUME: &str = "mcp-grants";
/// The projected volume of referenced Secret and ConfigMap keys.
pub const CREDENTIALS_VOLUME: &str = "mcp-credentials";
/// The sidecar's own emptyDir: what it must remember across its restarts (the highest grants
/// sequence accepted). Mounted in the sidecar only.
pub const STATE_VOLUME: &str = "mcp-sidecar-state";
/// Where the state volume is mounted in the sidecar.
pub const STATE_DIR: &str = "/var/run/mcp-operator/state";
/// Where the grants ConfigMap is mounted in the sidecar.
pub const GRANTS_DIR: &str = "/var/run/mcp-operator/grants";
/// Where the referenced keys are mounted in the sidecar.
pub const CREDENTIALS_DIR: &str = "/var/run/mcp-operator/credentials";
/// The environment variable telling the agent where its MCP endpoint is.
pub const SERVER_URL_ENV: &str = "MCP_SERVER_URL";

/// The sidecar's argument carrying [`GrantsTrust::min_sequence`].
pub const MIN_SEQUENCE_ARG: &str = "--grants-min-sequence=";

/// What the sidecar checks every grants document against: the operator's public keys (the
/// keyring's current and next) and the AgentSpec the pod is injected for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantsTrust {
    pub verify_keys: VerifyingKeys,
    pub namespace: String,
    pub uid: String,
    /// The sequence of the grants document the AgentSpec's status says is published: the
    /// sidecar of a new pod obeys none older (`--grants-min-sequence`), so an older signed
    /// document put back in the ConfigMap before the pod starts is refused too.
    pub min_sequence: Option<u64>,
}

/// How the injected sidecar looks: the chart's `injection.sidecar` values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SidecarSettings {
    /// The image holding `mcp-operator` (the operator's own image by default in the chart).
    pub image: String,
    #[serde(default = "default_pull_policy")]
    pub image_pull_policy: String,
    /// The agent's MCP endpoint port, on 127.0.0.1 inside the pod.
    #[serde(default = "default_port")]
    pub port: u16,
    /// /healthz, /readyz and /metrics (on every address of the pod: the kubelet probes it).
    #[serde(default = "default_health_port")]
    pub health_port: u16,
    #[serde(default)]
    pub resources: Option<ResourceRequirements>,
    /// Absent: restricted (non-root 65532, read-only root, no privilege escalation, no
    /// capabilities, RuntimeDefault seccomp).
    #[serde(default)]
    pub security_context: Option<SecurityContext>,
    /// The sidecar's `RUST_LOG`.
    #[serde(default = "default_log_level")]
    pub log_level: String,
    /// Seconds between startup probes and how many may fail before the kubelet restarts it.
    #[serde(default = "default_startup_period")]
    pub startup_period_seconds: i32,
    #[serde(default = "default_startup_failures")]
    pub startup_failure_threshold: i32,
    /// The sidecar's `--response-budget` (bytes of upstream answers held at once); absent:
    /// the sidecar's default. The chart sets it with the sidecar's memory limit in mind.
    #[serde(default)]
    pub response_budget: Option<u64>,
    /// Extra `mcp-operator sidecar` arguments.
    #[serde(default)]
    pub extra_args: Vec<String>,
    /// Where the sidecars export their spans (the chart's `telemetry`); absent: they do not.
    #[serde(default)]
    pub traces: Option<TraceExport>,
}

fn default_pull_policy() -> String {
    "IfNotPresent".into()
}
fn default_port() -> u16 {
    9500
}
fn default_health_port() -> u16 {
    9501
}
fn default_log_level() -> String {
    "info".into()
}
fn default_startup_period() -> i32 {
    1
}
fn default_startup_failures() -> i32 {
    120
}

impl SidecarSettings {
    /// The defaults with this image.
    pub fn with_image(image: &str) -> Self {
        serde_json::from_value(json!({ "image": image })).expect("the defaults deserialise")
    }

    /// The URL the agent's containers get in `MCP_SERVER_URL`.
    pub fn server_url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

/// The restricted security context (Pod Security Standards "restricted").
pub fn restricted_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        run_as_user: Some(65532),
        run_as_group: Some(65532),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The Secret and ConfigMap keys a set of grants references, by object name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct References {
    pub secrets: BTreeMap<String, BTreeSet<String>>,
    pub config_maps: BTreeMap<String, BTreeSet<String>>,
}

impl References {
    /// Every key the endpoints name: bearer tokens, header values, oauth2 client secrets and
    /// refresh tokens, CA bundles.
    pub fn of<'a>(endpoints: impl IntoIterator<Item = &'a Endpoint>) -> Self {
        let mut refs = References::default();
        let mut secret = |name: &str, key: &str| {
            refs.secrets
                .entry(name.to_owned())
                .or_default()
                .insert(key.to_owned());
        };
        let mut config_maps: Vec<(String, String)> = Vec::new();
        for endpoint in endpoints {
            if let Some(r) = &endpoint.bearer_token {
                secret(&r.name, &r.key);
            }
            for header in &endpoint.headers {
                secret(&header.secret_key_ref.name, &header.secret_key_ref.key);
            }
            for r in endpoint
                .oauth2
                .iter()
                .flat_map(|o| [&o.client_secret, &o.refresh_token])
                .flatten()
            {
                secret(&r.name, &r.key);
            }
            if let Some(tls) = &endpoint.tls {
                if let Some(r) = &tls.ca_bundle_secret {
                    secret(&r.name, &r.key);
                }
                if let Some(r) = &tls.ca_bundle_config_map {
                    config_maps.push((r.name.clone(), r.key.clone()));
                }
            }
        }
        for (name, key) in config_maps {
            refs.config_maps.entry(name).or_default().insert(key);
        }
        refs
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty() && self.config_maps.is_empty()
    }

    /// Every mounted file, relative to the credentials directory (`secrets/<name>/<key>`).
    pub fn paths(&self) -> Vec<String> {
        let one = |dir: &str, map: &BTreeMap<String, BTreeSet<String>>| {
            map.iter()
                .flat_map(|(name, keys)| keys.iter().map(move |k| format!("{dir}/{name}/{k}")))
                .collect::<Vec<_>>()
        };
        let mut paths = one("secrets", &self.secrets);
        paths.extend(one("configmaps", &self.config_maps));
        paths
    }
}

/// What admission does with a pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The pod already has the sidecar: admitted as it is.
    AlreadyInjected,
    /// Admitted with this patch.
    Inject(json_patch::Patch),
}

/// Why a labelled pod is refused. The message is shown to whoever created the pod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "the pod's label {AGENT_LABEL} is empty: set it to the name of an AgentSpec in the pod's namespace"
    )]
    EmptyLabel,
    #[error(
        "the pod's label {AGENT_LABEL} names the AgentSpec {agent:?}, which does not exist in namespace {namespace:?}: create it or fix the label (kubectl get agentspecs -n {namespace})"
    )]
    UnknownAgentSpec { agent: String, namespace: String },
    #[error(
        "the pod's label {AGENT_LABEL} names the AgentSpec {agent:?} in namespace {namespace:?}, which is being deleted: its grants are revoked"
    )]
    AgentSpecDeleting { agent: String, namespace: String },
    #[error(
        "the pod already has a {kind} named {name:?}, which the MCP sidecar injection adds: rename it"
    )]
    NameTaken { kind: &'static str, name: String },
    #[error(
        "the AgentSpec's grants reference the {kind} {name:?} key {key:?}, which cannot be mounted as a file"
    )]
    UnmountableKey {
        kind: &'static str,
        name: String,
        key: String,
    },
    #[error(
        "the pod brings its own {SIDECAR_CONTAINER} container ({field} differs from the one the operator injects now): the {SIDECAR_CONTAINER} container is the operator's; remove it from the pod spec and the operator injects it"
    )]
    OwnSidecar { field: String },
    #[error(
        "the pod is labelled {AGENT_LABEL} but has no {SIDECAR_CONTAINER} init container: the injection webhook did not run for it (check that the MutatingWebhookConfiguration of the mcp-operator chart exists and selects this namespace), or a later admission step removed it"
    )]
    MissingSidecar,
    #[error(
        "the {kind} {container:?} mounts the volume {volume:?}, which only the MCP sidecar may mount (it holds the grants, the credentials or the sidecar's state): remove that volumeMount; the agent reaches its MCP servers through the sidecar at ${SERVER_URL_ENV}"
    )]
    SidecarVolumeMounted {
        kind: &'static str,
        container: String,
        volume: String,
    },
    #[error(
        "the pod sets hostNetwork: true, which would put the MCP sidecar's 127.0.0.1 listener on the node, where every pod and process of the node could call it: remove hostNetwork, or the label {AGENT_LABEL} if this pod is no agent"
    )]
    HostNetwork,
    #[error(
        "the pod sets {field}: true, which lets its other containers read the MCP sidecar's credentials through /proc: remove {field}, or the label {AGENT_LABEL} if this pod is no agent"
    )]
    SharedProcesses { field: &'static str },
    #[error(
        "the label {AGENT_LABEL} cannot be added, changed or removed on an existing pod (it was {}, the update makes it {}): the sidecar is injected, or not, when the pod is created; delete the pod and create it with the label you want",
        label_value(.was),
        label_value(.now)
    )]
    LabelChanged {
        was: Option<String>,
        now: Option<String>,
    },
    #[error(
        "the image of the {SIDECAR_CONTAINER} container is the operator's and cannot be changed in a running pod (it was {was:?}, the update makes it {now:?}): change injection.sidecar.image in the operator's chart and recreate the pod"
    )]
    SidecarImageChanged { was: String, now: String },
    #[error(
        "the ephemeral container {container:?} targets the {SIDECAR_CONTAINER} container, whose process (and so its credentials) it could read: target one of the agent's containers instead (kubectl debug --target=<container>)"
    )]
    DebugsSidecar { container: String },
    #[error(
        "the pod uses the Secret {secret:?} ({place}), which is the credential of the McpServer {names}: only the injected MCP sidecar may mount it. Label the pod {AGENT_LABEL}=<AgentSpec> to get a sidecar that calls the server with it (the agent reaches it at ${SERVER_URL_ENV}), or use a Secret no McpServer names",
        names = .servers.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ")
    )]
    ProtectedSecret {
        secret: String,
        servers: Vec<String>,
        place: String,
    },
    #[error(
        "{action} the {SIDECAR_CONTAINER} container is refused: it holds the agent's MCP credentials and the grants state it trusts, which no one may read or change around it. Read its log with kubectl logs -c {SIDECAR_CONTAINER}, its state with its /readyz and /metrics, and debug the agent's own containers instead"
    )]
    ConnectSidecar { action: &'static str },
    #[error(
        "{action} the container {container:?} is refused: it holds the Secret {secret:?}, the credential of the McpServer {names}, which no one may read around the MCP sidecar. Read its log with kubectl logs -c {container}, or ask the platform team",
        names = .servers.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ")
    )]
    ConnectCredential {
        action: &'static str,
        container: String,
        secret: String,
        servers: Vec<String>,
    },
}

/// A label's value for a message: quoted, or "absent".
fn label_value(value: &Option<String>) -> String {
    match value {
        Some(v) => format!("{v:?}"),
        None => "absent".into(),
    }
}

/// The AgentSpec a pod opts into, if it is labelled (an empty value is refused).
pub fn agent_of(pod: &Pod) -> Option<Result<&str, Refusal>> {
    let value = pod.metadata.labels.as_ref()?.get(AGENT_LABEL)?;
    Some(if value.is_empty() {
        Err(Refusal::EmptyLabel)
    } else {
        Ok(value.as_str())
    })
}

/// Whether the pod has an init container of the sidecar's name (whether it is the operator's,
/// `decide` and `validate` judge by comparing it with the one the injection builds).
pub fn is_injected(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.name == SIDECAR_CONTAINER))
}

/// The patch that injects the sidecar for `agent` into `pod`, with exactly `refs` mounted.
pub fn decide(
    pod: &Pod,
    agent: &str,
    grants_config_map: &str,
    refs: &References,
    trust: &GrantsTrust,
    settings: &SidecarSettings,
) -> Result<Outcome, Refusal> {
    validate::refuse_host_namespaces(pod)?;
    // Injected already (a reinvocation after another webhook changed the pod) only if the
    // sidecar is the one the injection builds: a pod that brings its own would otherwise run
    // without the operator's.
    if let Some(own) = spec_init_container(pod, SIDECAR_CONTAINER) {
        let expected = sidecar_container(agent, refs, trust, settings);
        return match validate::sidecar_difference(own, &expected) {
            // Published since it was set (or lowered by hand): raised to what is published now.
            None if validate::floor_behind(own, &expected) => {
                let index = pod
                    .spec
                    .iter()
                    .flat_map(|s| s.init_containers.iter().flatten())
                    .position(|c| c.name == SIDECAR_CONTAINER)
                    .expect("the sidecar found above");
                let patch = json!([{
                    "op": "replace",
                    "path": format!("/spec/initContainers/{index}/args"),
                    "value": expected.args,
                }]);
                Ok(Outcome::Inject(
                    serde_json::from_value(patch).expect("a JSON patch"),
                ))
            }
            None => Ok(Outcome::AlreadyInjected),
            Some(field) => Err(Refusal::OwnSidecar { field }),
        };
    }
    check_mountable(refs)?;
    let spec = pod.spec.clone().unwrap_or_default();
    let volumes = spec.volumes.clone().unwrap_or_default();
    for name in [GRANTS_VOLUME, CREDENTIALS_VOLUME, STATE_VOLUME] {
        if volumes.iter().any(|v| v.name == name) {
            return Err(Refusal::NameTaken {
                kind: "volume",
                name: name.into(),
            });
        }
    }
    if spec.containers.iter().any(|c| c.name == SIDECAR_CONTAINER) {
        return Err(Refusal::NameTaken {
            kind: "container",
            name: SIDECAR_CONTAINER.into(),
        });
    }

    let mut ops: Vec<Value> = Vec::new();
    let sidecar = serde_json::to_value(sidecar_container(agent, refs, trust, settings))
        .expect("a container serialises");
    match &spec.init_containers {
        Some(_) => {
            ops.push(json!({"op": "add", "path": "/spec/initContainers/0", "value": sidecar}))
        }
        None => ops.push(json!({"op": "add", "path": "/spec/initContainers", "value": [sidecar]})),
    }
    let mut new_volumes = vec![grants_volume(grants_config_map), state_volume()];
    if !refs.is_empty() {
        new_volumes.push(credentials_volume(refs));
    }
    let new_volumes: Vec<Value> = new_volumes
        .iter()
        .map(|v| serde_json::to_value(v).expect("a volume serialises"))
        .collect();
    if spec.volumes.is_some() {
        for v in new_volumes {
            ops.push(json!({"op": "add", "path": "/spec/volumes/-", "value": v}));
        }
    } else {
        ops.push(json!({"op": "add", "path": "/spec/volumes", "value": new_volumes}));
    }
    let url = json!({"name": SERVER_URL_ENV, "value": settings.server_url()});
    for (i, container) in spec.containers.iter().enumerate() {
        match &container.env {
            Some(env) if env.iter().any(|e| e.name == SERVER_URL_ENV) => {}
            Some(_) => ops.push(
                json!({"op": "add", "path": format!("/spec/containers/{i}/env/-"), "value": url}),
            ),
            None => ops.push(
                json!({"op": "add", "path": format!("/spec/containers/{i}/env"), "value": [url]}),
            ),
        }
    }
    // Which AgentSpec, and what the projected volume holds (fixed from now on): the AgentSpec's
    // status counts the pods that lack a key its grants come to reference later.
    let mounts = drift::mounts_annotation(refs);
    match &pod.metadata.annotations {
        Some(_) => {
            for (key, value) in [(INJECTED_ANNOTATION, agent), (MOUNTS_ANNOTATION, &mounts)] {
                ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", escape(key)), "value": value}));
            }
        }
        None => ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {INJECTED_ANNOTATION: agent, MOUNTS_ANNOTATION: mounts}})),
    }
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops)).expect("the operations are JSON patch");
    Ok(Outcome::Inject(patch))
}

fn spec_init_container<'p>(pod: &'p Pod, name: &str) -> Option<&'p Container> {
    pod.spec
        .as_ref()?
        .init_containers
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
}

/// A JSON pointer segment (RFC 6901).
fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// Names and keys become path segments of the projected volume: one that is empty, `.`, `..`,
/// or holds a `/` would leave its directory (the sidecar refuses those too).
fn check_mountable(refs: &References) -> Result<(), Refusal> {
    let bad = |s: &str| s.is_empty() || s.contains('/') || s == "." || s == "..";
    for (kind, map) in [("Secret", &refs.secrets), ("ConfigMap", &refs.config_maps)] {
        for (name, keys) in map {
            for key in keys {
                if bad(name) || bad(key) {
                    return Err(Refusal::UnmountableKey {
                        kind,
                        name: name.clone(),
                        key: key.clone(),
                    });
                }
            }
        }
    }
    Ok(())
}

fn grants_volume(config_map: &str) -> Volume {
    Volume {
        name: GRANTS_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map.into(),
            // Not optional: the agent does not start without its grants, and once running, a
            // deleted ConfigMap leaves the last content in place (the kubelet keeps it).
            optional: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn state_volume() -> Volume {
    Volume {
        name: STATE_VOLUME.into(),
        empty_dir: Some(k8s_openapi::api::core::v1::EmptyDirVolumeSource {
            // A few bytes of JSON.
            size_limit: Some(Quantity("1Mi".into())),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Exactly the referenced keys, laid out as `sidecar::credentials` reads them. Optional: a
/// missing Secret makes that server unavailable in the sidecar (which names it) rather than
/// keeping the whole pod from starting.
fn credentials_volume(refs: &References) -> Volume {
    let items = |dir: &str, name: &str, keys: &BTreeSet<String>| -> Vec<KeyToPath> {
        keys.iter()
            .map(|key| KeyToPath {
                key: key.clone(),
                path: format!("{dir}/{name}/{key}"),
                mode: None,
            })
            .collect()
    };
    let mut sources: Vec<VolumeProjection> = Vec::new();
    for (name, keys) in &refs.secrets {
        sources.push(VolumeProjection {
            secret: Some(SecretProjection {
                name: name.clone(),
                items: Some(items("secrets", name, keys)),
                optional: Some(true),
            }),
            ..Default::default()
        });
    }
    for (name, keys) in &refs.config_maps {
        sources.push(VolumeProjection {
            config_map: Some(ConfigMapProjection {
                name: name.clone(),
                items: Some(items("configmaps", name, keys)),
                optional: Some(true),
            }),
            ..Default::default()
        });
    }
    Volume {
        name: CREDENTIALS_VOLUME.into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(sources),
            // Readable by the sidecar's user whatever the pod's fsGroup (the kubelet writes the
            // files as root). Only the sidecar mounts this volume: the agent's containers never
            // see the files.
            default_mode: Some(0o444),
        }),
        ..Default::default()
    }
}

fn sidecar_container(
    agent: &str,
    refs: &References,
    trust: &GrantsTrust,
    settings: &SidecarSettings,
) -> Container {
    let mut args = vec![
        "sidecar".to_string(),
        format!("--agent={agent}"),
        // Only grants the operator signed for this AgentSpec (and this incarnation of it) are
        // obeyed; both keys of the keyring, so a rotation keeps this pod verifying.
        format!("--grants-verify-keys={}", trust.verify_keys.to_arg()),
        format!("--agent-namespace={}", trust.namespace),
        format!("--agent-uid={}", trust.uid),
        format!("--state-dir={STATE_DIR}"),
        format!("--grants-file={GRANTS_DIR}/grants.json"),
    ];
    // Nothing older than what is published now, even in a pod whose state is still empty.
    args.extend(trust.min_sequence.map(|n| format!("{MIN_SEQUENCE_ARG}{n}")));
    args.extend([
        format!("--credentials-dir={CREDENTIALS_DIR}"),
        // What this pod mounts: a key the grants reference later is reported as a pod to
        // restart, not as a missing Secret.
        format!("--mounted-credentials={}", drift::mounts_annotation(refs)),
        format!("--listen=127.0.0.1:{}", settings.port),
        format!("--metrics-addr=0.0.0.0:{}", settings.health_port),
        "--log-format=json".to_string(),
    ]);
    args.extend(
        settings
            .response_budget
            .map(|n| format!("--response-budget={n}")),
    );
    args.extend(settings.extra_args.iter().cloned());
    let probe = |path: &str, period: i32, failures: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("mcp-health".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Default::default()
    };
    let mut mounts = vec![
        VolumeMount {
            name: GRANTS_VOLUME.into(),
            mount_path: GRANTS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        },
        VolumeMount {
            name: STATE_VOLUME.into(),
            mount_path: STATE_DIR.into(),
            ..Default::default()
        },
    ];
    if !refs.is_empty() {
        mounts.push(VolumeMount {
            name: CREDENTIALS_VOLUME.into(),
            mount_path: CREDENTIALS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    Container {
        name: SIDECAR_CONTAINER.into(),
        image: Some(settings.image.clone()),
        image_pull_policy: Some(settings.image_pull_policy.clone()),
        args: Some(args),
        env: Some(sidecar_env(agent, trust, settings)),
        ports: Some(vec![ContainerPort {
            name: Some("mcp-health".into()),
            container_port: i32::from(settings.health_port),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        // The native sidecar: started before the agent's containers, kept running beside them,
        // stopped after them.
        restart_policy: Some("Always".into()),
        startup_probe: Some(probe(
            "/readyz",
            settings.startup_period_seconds,
            settings.startup_failure_threshold,
        )),
        readiness_probe: Some(probe("/readyz", 5, 3)),
        liveness_probe: Some(probe("/healthz", 10, 3)),
        resources: Some(settings.resources.clone().unwrap_or_else(default_resources)),
        security_context: Some(
            settings
                .security_context
                .clone()
                .unwrap_or_else(restricted_security_context),
        ),
        volume_mounts: Some(mounts),
        ..Default::default()
    }
}

/// `RUST_LOG`, and the OpenTelemetry settings when traces are exported.
fn sidecar_env(agent: &str, trust: &GrantsTrust, settings: &SidecarSettings) -> Vec<EnvVar> {
    let mut env = vec![EnvVar {
        name: "RUST_LOG".into(),
        value: Some(settings.log_level.clone()),
        ..Default::default()
    }];
    if let Some(traces) = &settings.traces {
        env.extend(traces.env(agent, &trust.namespace));
    }
    env
}

fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".into(), Quantity("20m".into())),
            ("memory".into(), Quantity("32Mi".into())),
        ])),
        limits: Some(BTreeMap::from([(
            "memory".into(),
            Quantity("128Mi".into()),
        )])),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
