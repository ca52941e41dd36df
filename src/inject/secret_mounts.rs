//! The pure part of `/validate/secret-mounts`: a pod of any kind (labelled or not) that would
//! read an McpServer's credential itself, around the sidecar, is refused. The webhook gathers
//! the inputs (the namespace's McpServers as [`Protected`], and for a pod a ReplicaSet
//! controls, that ReplicaSet and its Deployment); nothing here does I/O.
//!
//! ```text
//!  McpServer a (credentials.bearerToken → Secret tok-a)   ─┐
//!  McpServer s (stdio: env → Secret api-key; <s>-mcp-token)├─► Protected {tok-a, api-key, s-mcp-token}
//!                                                          │
//!  Pod ── volumes[].secret / projected.sources[].secret ───┤   every use of a protected Secret
//!      ── containers[*].env[].valueFrom.secretKeyRef ──────┼─► refused, except:
//!      ── containers[*].envFrom[].secretRef ───────────────┤   (a) the volume mcp-credentials of a
//!      ── imagePullSecrets, other volume sources' refs ────┤       labelled pod, mounted by the
//!      ── ephemeral container → mounts / targets a user ───┘       mcp-sidecar init container alone
//!                                                              (b) a pod of s's own Deployment:
//!  Pod ─controller→ ReplicaSet ─controller→ Deployment <s>-mcp ─controller→ McpServer s (uid)
//!      and each container and volume using a Secret as the ReplicaSet's pod template has it,
//!      and only s's Secrets
//! ```
//!
//! UPDATE (a new ephemeral container) judges only the uses the update adds: a pod created
//! before an McpServer came to name its Secret stays updatable. A refusal names only Secrets
//! an McpServer names, so it never tells whether any other Secret exists.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Container, EnvFromSource, EnvVar, Pod, PodSpec, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::{AGENT_LABEL, CREDENTIALS_VOLUME, Refusal, SIDECAR_CONTAINER};

/// One McpServer of the namespace and the Secrets a pod could read its credentials from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProtectedServer {
    pub name: String,
    pub uid: String,
    /// Run by the operator (spec.stdio): its own Deployment's pods may use `secrets`.
    pub stdio: bool,
    /// Bearer token and header Secrets; for a stdio server also its token Secret and the
    /// Secrets its env names. Not a TLS CA bundle: a CA certificate is no credential.
    pub secrets: BTreeSet<String>,
}

/// Every McpServer of one namespace, by the Secrets they protect.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Protected {
    pub servers: Vec<ProtectedServer>,
}

impl Protected {
    /// The McpServers naming `secret`, sorted (empty: the Secret is not protected).
    pub fn servers_of(&self, secret: &str) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .servers
            .iter()
            .filter(|s| s.secrets.contains(secret))
            .map(|s| s.name.as_str())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    pub fn is_empty(&self) -> bool {
        self.servers.iter().all(|s| s.secrets.is_empty())
    }
}

/// Where a pod uses a Secret.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    /// A volume whose source names the Secret (`secret`, a `projected` source, or a volume
    /// plugin's secretRef).
    Volume { volume: String },
    /// `env[].valueFrom.secretKeyRef`.
    Env {
        kind: &'static str,
        container: String,
        variable: String,
    },
    /// `envFrom[].secretRef`.
    EnvFrom {
        kind: &'static str,
        container: String,
    },
    /// A container mounting a volume that names the Secret.
    Mount {
        kind: &'static str,
        container: String,
        volume: String,
    },
    /// An ephemeral container sharing the processes (and so the environment and files) of a
    /// container that uses the Secret.
    Target { container: String, target: String },
    /// `imagePullSecrets`: the kubelet sends it to whatever registry the image names.
    ImagePull,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Volume { volume } => write!(f, "in the volume {volume:?}"),
            Place::Env {
                kind,
                container,
                variable,
            } => write!(
                f,
                "in the environment variable {variable} of the {kind} {container:?}"
            ),
            Place::EnvFrom { kind, container } => {
                write!(f, "in envFrom of the {kind} {container:?}")
            }
            Place::Mount {
                kind,
                container,
                volume,
            } => write!(
                f,
                "by mounting the volume {volume:?} in the {kind} {container:?}"
            ),
            Place::Target { container, target } => write!(
                f,
                "through the ephemeral container {container:?}, which targets the container {target:?}"
            ),
            Place::ImagePull => write!(f, "in imagePullSecrets"),
        }
    }
}

/// One use of one Secret.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Use {
    pub secret: String,
    pub place: Place,
}

/// The pod's stdio workload chain as the webhook read it: the ReplicaSet the pod's controller
/// owner reference names, and the Deployment the ReplicaSet's names (either absent when it
/// does not exist).
#[derive(Clone, Copy, Debug, Default)]
pub struct Workload<'a> {
    pub replica_set: Option<&'a ReplicaSet>,
    pub deployment: Option<&'a Deployment>,
}

/// Every Secret name the pod uses anywhere, with where (protected or not).
pub fn uses(pod: &Pod) -> BTreeSet<Use> {
    let mut out = BTreeSet::new();
    let Some(spec) = pod.spec.as_ref() else {
        return out;
    };
    let volume_secrets: BTreeMap<&str, Vec<String>> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| (v.name.as_str(), volume_secrets(v)))
        .collect();
    for (volume, secrets) in &volume_secrets {
        for secret in secrets {
            out.insert(Use {
                secret: secret.clone(),
                place: Place::Volume {
                    volume: (*volume).to_owned(),
                },
            });
        }
    }
    for r in spec.image_pull_secrets.iter().flatten() {
        out.insert(Use {
            secret: r.name.clone(),
            place: Place::ImagePull,
        });
    }
    // What each container uses, by name: an ephemeral container targeting one uses it too.
    let mut by_container: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut container = |kind: &'static str,
                         name: &str,
                         env: Option<&Vec<EnvVar>>,
                         env_from: Option<&Vec<EnvFromSource>>,
                         mounts: Vec<&str>| {
        let mut found = Vec::new();
        for e in env.into_iter().flatten() {
            if let Some(r) = e
                .value_from
                .as_ref()
                .and_then(|f| f.secret_key_ref.as_ref())
            {
                found.push(Use {
                    secret: r.name.clone(),
                    place: Place::Env {
                        kind,
                        container: name.to_owned(),
                        variable: e.name.clone(),
                    },
                });
            }
        }
        for e in env_from.into_iter().flatten() {
            if let Some(r) = &e.secret_ref {
                found.push(Use {
                    secret: r.name.clone(),
                    place: Place::EnvFrom {
                        kind,
                        container: name.to_owned(),
                    },
                });
            }
        }
        for volume in mounts {
            for secret in volume_secrets.get(volume).into_iter().flatten() {
                found.push(Use {
                    secret: secret.clone(),
                    place: Place::Mount {
                        kind,
                        container: name.to_owned(),
                        volume: volume.to_owned(),
                    },
                });
            }
        }
        by_container
            .entry(name.to_owned())
            .or_default()
            .extend(found.iter().map(|u| u.secret.clone()));
        found
    };
    let mount_names = |c: &Container| -> Vec<String> {
        c.volume_mounts
            .iter()
            .flatten()
            .map(|m| m.name.clone())
            .collect()
    };
    for c in spec.init_containers.iter().flatten() {
        let mounts = mount_names(c);
        out.extend(container(
            "init container",
            &c.name,
            c.env.as_ref(),
            c.env_from.as_ref(),
            mounts.iter().map(String::as_str).collect(),
        ));
    }
    for c in &spec.containers {
        let mounts = mount_names(c);
        out.extend(container(
            "container",
            &c.name,
            c.env.as_ref(),
            c.env_from.as_ref(),
            mounts.iter().map(String::as_str).collect(),
        ));
    }
    let mut targets = Vec::new();
    for c in spec.ephemeral_containers.iter().flatten() {
        let mounts: Vec<String> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.name.clone())
            .collect();
        out.extend(container(
            "ephemeral container",
            &c.name,
            c.env.as_ref(),
            c.env_from.as_ref(),
            mounts.iter().map(String::as_str).collect(),
        ));
        if let Some(target) = &c.target_container_name {
            targets.push((c.name.clone(), target.clone()));
        }
    }
    for (container, target) in targets {
        for secret in by_container.get(&target).into_iter().flatten() {
            out.insert(Use {
                secret: secret.clone(),
                place: Place::Target {
                    container: container.clone(),
                    target: target.clone(),
                },
            });
        }
    }
    out
}

/// Every Secret a volume's source names.
fn volume_secrets(v: &Volume) -> Vec<String> {
    let mut names = Vec::new();
    if let Some(s) = &v.secret {
        names.extend(s.secret_name.clone());
    }
    if let Some(p) = &v.projected {
        names.extend(
            p.sources
                .iter()
                .flatten()
                .filter_map(|s| s.secret.as_ref())
                .map(|s| s.name.clone()),
        );
    }
    // Volume plugins read a Secret to reach their storage; one that sends it elsewhere would
    // send the credential there, so these count as uses too.
    let refs = [
        v.csi
            .as_ref()
            .and_then(|s| s.node_publish_secret_ref.as_ref()),
        v.cephfs.as_ref().and_then(|s| s.secret_ref.as_ref()),
        v.cinder.as_ref().and_then(|s| s.secret_ref.as_ref()),
        v.flex_volume.as_ref().and_then(|s| s.secret_ref.as_ref()),
        v.iscsi.as_ref().and_then(|s| s.secret_ref.as_ref()),
        v.rbd.as_ref().and_then(|s| s.secret_ref.as_ref()),
        v.scale_io.as_ref().map(|s| &s.secret_ref),
        v.storageos.as_ref().and_then(|s| s.secret_ref.as_ref()),
    ];
    names.extend(refs.into_iter().flatten().map(|r| r.name.clone()));
    names.extend(v.azure_file.as_ref().map(|s| s.secret_name.clone()));
    names.retain(|n| !n.is_empty());
    names
}

/// The uses of protected Secrets that `pod` adds (all of them on CREATE; on UPDATE those
/// `old` did not have), less the injected sidecar's own (exception (a)). `operator_sidecar`:
/// the pod's `mcp-sidecar` init container is the one the injection builds for its AgentSpec
/// (the webhook compared them, as `/validate/pods` does): the label alone proves nothing
/// where `/validate/pods` does not run (another namespaceSelector, failurePolicy Ignore).
pub fn new_protected_uses(
    pod: &Pod,
    old: Option<&Pod>,
    protected: &Protected,
    operator_sidecar: bool,
) -> Vec<Use> {
    let before = old.map(uses).unwrap_or_default();
    let labelled = operator_sidecar
        && pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(AGENT_LABEL))
            .is_some_and(|v| !v.is_empty());
    let injected_volume = labelled
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .any(|v| v.name == CREDENTIALS_VOLUME && v.projected.is_some());
    uses(pod)
        .into_iter()
        .filter(|u| !before.contains(u))
        .filter(|u| !protected.servers_of(&u.secret).is_empty())
        .filter(|u| {
            // The sidecar's projected volume, and the sidecar mounting it: every other
            // container mounting it is refused here too, whatever /validate/pods decides.
            !injected_volume
                || !match &u.place {
                    Place::Volume { volume } => volume == CREDENTIALS_VOLUME,
                    Place::Mount {
                        kind: "init container",
                        container,
                        volume,
                    } => volume == CREDENTIALS_VOLUME && container == SIDECAR_CONTAINER,
                    _ => false,
                }
        })
        .collect()
}

/// The name of the ReplicaSet that controls the pod, if one does (for the webhook to read).
pub fn controlling_replica_set(pod: &Pod) -> Option<&str> {
    controller(&pod.metadata, "apps/v1", "ReplicaSet").map(|o| o.name.as_str())
}

/// The name of the Deployment that controls the ReplicaSet, if one does.
pub fn controlling_deployment(rs: &ReplicaSet) -> Option<&str> {
    controller(&rs.metadata, "apps/v1", "Deployment").map(|o| o.name.as_str())
}

fn controller<'m>(
    meta: &'m ObjectMeta,
    api_version: &str,
    kind: &str,
) -> Option<&'m OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .filter(|o| o.api_version == api_version && o.kind == kind)
}

/// Whether `child`'s controller owner reference is `parent` itself: same kind, name and uid
/// (an owner reference is the pod author's to write; the uid of the object read back is not).
fn controlled_by(child: &ObjectMeta, kind: &str, api_version: &str, parent: &ObjectMeta) -> bool {
    controller(child, api_version, kind).is_some_and(|o| {
        Some(&o.name) == parent.name.as_ref() && Some(&o.uid) == parent.uid.as_ref()
    })
}

/// The stdio McpServer whose own Deployment runs this pod, verified link by link, and the
/// ReplicaSet's pod template; `None` if any link is missing or forged.
fn stdio_owner<'p>(
    pod: &Pod,
    protected: &'p Protected,
    workload: Workload<'_>,
) -> Option<(&'p ProtectedServer, PodSpec)> {
    let rs = workload.replica_set?;
    let deployment = workload.deployment?;
    if !controlled_by(&pod.metadata, "ReplicaSet", "apps/v1", &rs.metadata)
        || !controlled_by(&rs.metadata, "Deployment", "apps/v1", &deployment.metadata)
    {
        return None;
    }
    let owner = controller(
        &deployment.metadata,
        "mcp-operator.dev/v1alpha1",
        "McpServer",
    )?;
    let server = protected
        .servers
        .iter()
        .find(|s| s.stdio && s.name == owner.name && s.uid == owner.uid)?;
    // The operator names its Deployment after the server (controller::mcp_server::stdio_workload).
    if deployment.metadata.name.as_deref() != Some(&format!("{}-mcp", server.name)) {
        return None;
    }
    let template = rs.spec.as_ref()?.template.as_ref()?.spec.clone()?;
    Some((server, template))
}

/// Whether every container and volume of the pod that uses a Secret is as the template has
/// it: a pod that names the right owners but runs another image or command is not the
/// operator's workload.
fn as_in_template(pod: &Pod, template: &PodSpec, uses: &[Use]) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    if spec.host_pid.unwrap_or(false) != template.host_pid.unwrap_or(false)
        || spec.share_process_namespace.unwrap_or(false)
            != template.share_process_namespace.unwrap_or(false)
    {
        return false;
    }
    let same_container = |kind: &str, name: &str| {
        let (ours, theirs) = match kind {
            "init container" => (
                spec.init_containers.as_deref().unwrap_or_default(),
                template.init_containers.as_deref().unwrap_or_default(),
            ),
            "container" => (spec.containers.as_slice(), template.containers.as_slice()),
            _ => return false,
        };
        let (Some(a), Some(b)) = (
            ours.iter().find(|c| c.name == name),
            theirs.iter().find(|c| c.name == name),
        ) else {
            return false;
        };
        a.image == b.image
            && a.command == b.command
            && a.args == b.args
            && a.working_dir == b.working_dir
            && a.env == b.env
            && a.env_from == b.env_from
            && a.volume_mounts
                .iter()
                .flatten()
                .all(|m| b.volume_mounts.iter().flatten().any(|t| t == m))
    };
    let same_volume = |name: &str| {
        let find = |s: &PodSpec| s.volumes.iter().flatten().find(|v| v.name == name).cloned();
        find(spec).is_some_and(|v| Some(v) == find(template))
    };
    uses.iter().all(|u| match &u.place {
        Place::Volume { volume } => same_volume(volume),
        Place::Env {
            kind, container, ..
        }
        | Place::EnvFrom { kind, container }
        | Place::Mount {
            kind, container, ..
        } => same_container(kind, container),
        // Neither is in the operator's template, nor can a created pod have ephemeral
        // containers.
        Place::Target { .. } | Place::ImagePull => false,
    })
}

/// The decision: `uses` from [`new_protected_uses`]; `workload` as the webhook read it for a
/// pod a ReplicaSet controls (exception (b)).
pub fn decide(
    pod: &Pod,
    uses: &[Use],
    protected: &Protected,
    workload: Workload<'_>,
) -> Result<(), Refusal> {
    let Some(first) = uses.first() else {
        return Ok(());
    };
    if let Some((server, template)) = stdio_owner(pod, protected, workload)
        && uses.iter().all(|u| server.secrets.contains(&u.secret))
        && as_in_template(pod, &template, uses)
    {
        return Ok(());
    }
    // Name a Secret of another server first when the stdio pod reaches beyond its own: that
    // is the use to remove.
    let shown = stdio_owner(pod, protected, workload)
        .and_then(|(server, _)| uses.iter().find(|u| !server.secrets.contains(&u.secret)))
        .unwrap_or(first);
    Err(Refusal::ProtectedSecret {
        secret: shown.secret.clone(),
        servers: protected
            .servers_of(&shown.secret)
            .into_iter()
            .map(str::to_owned)
            .collect(),
        place: shown.place.to_string(),
    })
}

#[cfg(test)]
#[path = "secret_mounts_tests.rs"]
mod tests;
