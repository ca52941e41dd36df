//! Shared by the end-to-end tests (`tests/it/e2e_*.rs`): a real Kubernetes
//! control plane with the CRDs installed, a `kube::Client` per test, and a namespace per test
//! that is deleted when the test ends, pass or fail.
//!
//! ```text
//! MCP_E2E_KUBECONFIG set? --yes--> that cluster
//!        | no
//!        v
//! e2e/cluster.sh up target/tmp/e2e-cluster-<pid>   (once per test binary; a watchdog stops it
//!        |                                          when this process exits)
//!        v
//! crds/*.yaml applied (server-side, manager mcp-operator-e2e), Established
//!        |
//!        v
//! [ Config ] --shared--> Client per test (each #[tokio::test] has its own runtime)
//!                        TestNamespace per test  e2e-<test>-<random>
//! ```
//!
//! The control plane is shared: tests isolate themselves by namespace, and name any
//! cluster-scoped object after their namespace (see [`TestNamespace::scoped_name`]).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
    PostParams, ValidationDirective,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::discovery::Scope;
use kube::{Client, Config, Resource};
use serde_json::Value;
use tokio::sync::OnceCell;

/// The field manager of everything these tests write.
pub const FIELD_MANAGER: &str = "mcp-operator-e2e";

/// Label on every namespace a test creates, so strays are easy to find.
pub const NAMESPACE_LABEL: &str = "mcp-operator.dev/e2e";

/// The control plane of this test binary, or why there is none. Every test that asks after a
/// failure gets the same message instead of starting another control plane.
static CLUSTER: OnceCell<Result<(Config, PathBuf), String>> = OnceCell::const_new();

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A client for the shared control plane, on the calling test's runtime. Starts the control
/// plane and installs the CRDs on first use.
pub async fn client() -> Client {
    let (config, _) = cluster().await;
    Client::try_from(config.clone()).expect("a client from the e2e kubeconfig")
}

/// A client for the shared control plane that acts as `user` (impersonation, as `kubectl --as`):
/// what that user may do is what RBAC grants it, nothing of the admin's.
pub async fn client_as(user: &str) -> Client {
    let (config, _) = cluster().await;
    let mut config = config.clone();
    config.auth_info.impersonate = Some(user.to_string());
    Client::try_from(config).expect("an impersonating client from the e2e kubeconfig")
}

/// The kubeconfig file of the shared control plane, for processes a test starts (the controller).
pub async fn kubeconfig_path() -> PathBuf {
    cluster().await.1.clone()
}

async fn cluster() -> &'static (Config, PathBuf) {
    CLUSTER
        .get_or_init(|| async { prepare().await })
        .await
        .as_ref()
        .unwrap_or_else(|e| panic!("no e2e control plane: {e}"))
}

/// A client and a fresh namespace for one test; `test` names the namespace.
pub async fn setup(test: &str) -> (Client, TestNamespace) {
    let client = client().await;
    let namespace = TestNamespace::create(&client, test).await;
    (client, namespace)
}

async fn prepare() -> Result<(Config, PathBuf), String> {
    mcp_operator::install_crypto_provider();
    let kubeconfig = match std::env::var_os("MCP_E2E_KUBECONFIG") {
        Some(path) => PathBuf::from(path),
        None => tokio::task::spawn_blocking(start_control_plane)
            .await
            .map_err(|e| format!("starting the control plane panicked: {e}"))??,
    };
    let kubeconfig_text = Kubeconfig::read_from(&kubeconfig)
        .map_err(|e| format!("reading {}: {e}", kubeconfig.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig_text, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("loading {}: {e}", kubeconfig.display()))?;
    let client = Client::try_from(config.clone()).map_err(|e| e.to_string())?;
    install_crds(&client).await?;
    Ok((config, kubeconfig))
}

/// Runs `e2e/cluster.sh up` in `target/tmp/e2e-cluster-<pid>`, owned by this process: the
/// script's watchdog stops the control plane when the test binary exits. Returns the kubeconfig.
fn start_control_plane() -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    remove_stale_control_planes(root);
    let pid = std::process::id();
    let dir = root.join(format!("e2e-cluster-{pid}"));
    let started = std::time::Instant::now();
    let out = Command::new("bash")
        .arg(repo().join("e2e/cluster.sh"))
        .arg("up")
        .arg(&dir)
        .env("E2E_OWNER_PID", pid.to_string())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running e2e/cluster.sh: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`e2e/cluster.sh up {}` failed ({}):\n{}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    eprintln!(
        "e2e: control plane up in {:.1}s; logs in {}/logs",
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    Ok(dir.join("kubeconfig"))
}

/// Control planes of earlier test binaries whose process is gone: the watchdog stopped them but
/// left their directory (and logs) behind. `down` removes it, stopping anything still running.
fn remove_stale_control_planes(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("e2e-cluster-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let _ = Command::new("bash")
            .arg(repo().join("e2e/cluster.sh"))
            .arg("down")
            .arg(entry.path())
            .stdin(Stdio::null())
            .output();
        let _ = std::fs::remove_dir_all(entry.path());
    }
}

/// Every CRD in `crds/`, in file order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut paths: Vec<_> = std::fs::read_dir(repo().join("crds"))
        .expect("crds/ exists")
        .map(|e| e.expect("crds/ is readable").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    paths
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).expect("crds/*.yaml is readable");
            serde_saphyr::from_multiple::<CustomResourceDefinition>(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect()
}

/// Applies the CRDs server-side and waits until each is Established. An apiserver that refuses
/// a CRD (a CEL rule that does not compile or is over the cost budget) fails here with its
/// own words.
async fn install_crds(client: &Client) -> Result<(), String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let crds = crds();
    if crds.is_empty() {
        return Err("crds/ holds no CustomResourceDefinition".into());
    }
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(crd))
            .await
            .map_err(|e| format!("the apiserver refused CRD {name}: {}", describe(&e)))?;
    }
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let established = kube::runtime::wait::await_condition(
            api.clone(),
            &name,
            kube::runtime::wait::conditions::is_crd_established(),
        );
        tokio::time::timeout(Duration::from_secs(60), established)
            .await
            .map_err(|_| format!("CRD {name} not Established within 60s"))?
            .map_err(|e| format!("waiting for CRD {name}: {e}"))?;
    }
    Ok(())
}

/// An error as a person reads it: for the apiserver's refusals, the code and its message.
pub fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            format!("{} {}: {}", status.code, status.reason, status.message)
        }
        other => other.to_string(),
    }
}

/// A namespace for one test, `e2e-<test>-<random>`. Dropping it deletes the namespace and any
/// cluster-scoped object the test registered, also when the test panics.
pub struct TestNamespace {
    name: String,
    config: Config,
    cluster_scoped: Mutex<Vec<(ApiResource, String)>>,
}

impl TestNamespace {
    pub async fn create(client: &Client, test: &str) -> TestNamespace {
        let mut slug: String = test
            .chars()
            .map(|c| match c.to_ascii_lowercase() {
                c @ ('a'..='z' | '0'..='9') => c,
                _ => '-',
            })
            .collect();
        slug.truncate(63 - "e2e--".len() - 6);
        let slug = slug.trim_matches('-');
        let suffix = RandomState::new().build_hasher().finish() & 0xff_ffff;
        let name = format!("e2e-{slug}-{suffix:06x}");
        let namespace: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {NAMESPACE_LABEL: "true"}},
        }))
        .expect("a namespace");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {}", describe(&e)));
        let config = CLUSTER
            .get()
            .and_then(|c| c.as_ref().ok())
            .expect("the control plane is prepared")
            .0
            .clone();
        TestNamespace {
            name,
            config,
            cluster_scoped: Mutex::new(vec![]),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A name for a cluster-scoped object that belongs to this test: `<namespace>-<name>`.
    pub fn scoped_name(&self, name: &str) -> String {
        format!("{}-{name}", self.name)
    }

    /// Deletes this cluster-scoped object together with the namespace.
    pub fn delete_later(&self, resource: ApiResource, name: &str) {
        self.cluster_scoped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((resource, name.to_owned()));
    }
}

impl Drop for TestNamespace {
    /// The test's runtime may be shutting down (or unwinding from a panic), so the deletion runs
    /// on a runtime of its own in a thread of its own. Deletion is asynchronous on the server:
    /// the namespace controller removes the contents.
    fn drop(&mut self) {
        let name = self.name.clone();
        let config = self.config.clone();
        let cluster_scoped = std::mem::take(
            &mut *self
                .cluster_scoped
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let deleting = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let Ok(client) = Client::try_from(config) else {
                    return;
                };
                let params = DeleteParams::background();
                for (resource, object) in cluster_scoped {
                    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
                    let deleted =
                        tokio::time::timeout(Duration::from_secs(10), api.delete(&object, &params));
                    if let Ok(Err(e)) = deleted.await
                        && !is_not_found(&e)
                    {
                        eprintln!("e2e: deleting {} {object}: {}", resource.kind, describe(&e));
                    }
                }
                // The operator that would revoke them has stopped with the test: an AgentSpec's
                // finalizer would keep the namespace terminating for good.
                strip_agent_finalizers(&client, &name).await;
                let api: Api<Namespace> = Api::all(client);
                let deleted =
                    tokio::time::timeout(Duration::from_secs(10), api.delete(&name, &params));
                match deleted.await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) if is_not_found(&e) => {}
                    Ok(Err(e)) => eprintln!("e2e: deleting namespace {name}: {}", describe(&e)),
                    Err(_) => eprintln!("e2e: deleting namespace {name}: no answer within 10s"),
                }
            });
        });
        let _ = deleting.join();
    }
}

/// Removes every finalizer from the AgentSpecs in `namespace` (test clean-up only).
async fn strip_agent_finalizers(client: &Client, namespace: &str) {
    let api: Api<mcp_operator::api::agent_spec::AgentSpec> =
        Api::namespaced(client.clone(), namespace);
    let Ok(Ok(list)) =
        tokio::time::timeout(Duration::from_secs(10), api.list(&Default::default())).await
    else {
        return;
    };
    for agent in list {
        let name = agent.metadata.name.clone().unwrap_or_default();
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            api.patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
            ),
        )
        .await;
    }
}

/// A Secret with one key, as a test puts a credential.
pub fn secret(name: &str, key: &str, value: &str) -> k8s_openapi::api::core::v1::Secret {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name},
        "stringData": {key: value},
    }))
    .expect("a Secret")
}

pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// The API resource and scope of a manifest's `apiVersion` and `kind`, from discovery.
pub async fn resource_of(client: &Client, manifest: &Value) -> (ApiResource, Scope) {
    let api_version = manifest["apiVersion"].as_str().unwrap_or_default();
    let kind = manifest["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("discovering {api_version} {kind}: {}", describe(&e)));
    (resource, capabilities.scope)
}

/// How a manifest is sent to the apiserver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// `kubectl create`: POST, unknown fields refused.
    Create,
    /// `kubectl apply --server-side`: an apply patch, unknown fields refused.
    ServerSideApply,
}

/// Sends one manifest (its namespace, if namespaced, is `namespace`) with `fieldValidation=Strict`;
/// with `dry_run`, the apiserver validates and admits it but stores nothing.
pub async fn write(
    client: &Client,
    how: Write,
    manifest: &Value,
    namespace: Option<&str>,
    dry_run: bool,
) -> kube::Result<DynamicObject> {
    let (resource, scope) = resource_of(client, manifest).await;
    let namespace = match scope {
        Scope::Namespaced => namespace,
        Scope::Cluster => None,
    };
    let mut manifest = manifest.clone();
    if let Some(namespace) = namespace {
        manifest["metadata"]["namespace"] = namespace.into();
    }
    let name = manifest["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    match how {
        Write::Create => {
            let mut query = format!("fieldManager={FIELD_MANAGER}&fieldValidation=Strict");
            if dry_run {
                query.push_str("&dryRun=All");
            }
            let url = format!("{}?{query}", DynamicObject::url_path(&resource, namespace));
            let request = http::Request::post(url)
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(serde_json::to_vec(&manifest).expect("JSON"))
                .expect("a request");
            client.request(request).await
        }
        Write::ServerSideApply => {
            let api: Api<DynamicObject> = match namespace {
                Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            let params = PatchParams {
                dry_run,
                force: true,
                field_manager: Some(FIELD_MANAGER.into()),
                field_validation: Some(ValidationDirective::Strict),
            };
            api.patch(&name, &params, &Patch::Apply(&manifest)).await
        }
    }
}

/// Applies one manifest (server-side, strict) in `namespace`; a refusal fails the test, naming
/// what was applied and the apiserver's reason.
pub async fn apply(client: &Client, manifest: &Value, namespace: &str) -> DynamicObject {
    write(
        client,
        Write::ServerSideApply,
        manifest,
        Some(namespace),
        false,
    )
    .await
    .unwrap_or_else(|e| panic!("applying {manifest}: {}", describe(&e)))
}

/// Every YAML document of one file.
pub fn yaml_documents(path: &Path) -> Vec<Value> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// Gives `user` a namespaced Role `name` with `rules` in `namespace` (and nothing else): the
/// tenant a test then acts as, through impersonation (`kubectl --as` or [`client_as`]).
pub async fn grant_role(
    admin: &Client,
    namespace: &str,
    name: &str,
    user: &str,
    rules: serde_json::Value,
) {
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let role: Role =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "rules": rules}))
            .expect("a Role");
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .expect("a RoleBinding");
    let pp = PostParams::default();
    Api::<Role>::namespaced(admin.clone(), namespace)
        .create(&pp, &role)
        .await
        .unwrap_or_else(|e| panic!("creating Role {name}: {}", describe(&e)));
    Api::<RoleBinding>::namespaced(admin.clone(), namespace)
        .create(&pp, &binding)
        .await
        .unwrap_or_else(|e| panic!("creating RoleBinding {name}: {}", describe(&e)));
}

/// Polls `check` every 250 ms until it returns Ok, or panics after `limit` with `what` and the
/// last thing `check` saw.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) => {
                if tokio::time::Instant::now() > deadline {
                    panic!("timed out after {limit:?} waiting for {what}; last seen: {last}");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The condition of one type in an object's `status.conditions`, as JSON: any kind
/// (McpServer, AgentSpec, McpTenantPolicy, …).
pub fn condition<K: serde::Serialize>(object: &K, type_: &str) -> Option<Value> {
    let object = serde_json::to_value(object).ok()?;
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// Waits until the named object's condition `type_` has `status` (and `reason`, when given),
/// and returns the object: one wait for every kind.
pub async fn wait_condition<K>(
    api: &Api<K>,
    name: &str,
    type_: &str,
    status: &str,
    reason: Option<&str>,
    limit: Duration,
) -> K
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
    K::DynamicType: Default,
{
    let what = format!(
        "{} {name}: {type_}={status} {reason:?}",
        K::kind(&Default::default())
    );
    eventually(limit, &what, || async {
        let object = api.get(name).await.map_err(|e| e.to_string())?;
        match condition(&object, type_) {
            Some(c) if c["status"] == status && reason.is_none_or(|r| c["reason"] == r) => {
                Ok(object)
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// An AgentSpec named `name` with this spec.
pub fn agent_spec(name: &str, spec: Value) -> mcp_operator::api::agent_spec::AgentSpec {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "AgentSpec",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("a valid AgentSpec")
}

/// Applies an AgentSpec (server-side apply, forced) and returns it as stored.
pub async fn apply_agent(
    client: &Client,
    namespace: &str,
    name: &str,
    spec: Value,
) -> mcp_operator::api::agent_spec::AgentSpec {
    Api::<mcp_operator::api::agent_spec::AgentSpec>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&agent_spec(name, spec)),
        )
        .await
        .unwrap_or_else(|e| panic!("AgentSpec {name}: {}", describe(&e)))
}

/// An McpServer run from a stdio command: `stdio` is `spec.stdio` (image, command, …).
pub fn stdio_server_manifest(name: &str, stdio: Value) -> Value {
    serde_json::json!({
        "apiVersion": "mcp-operator.dev/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": name},
        "spec": {"stdio": stdio},
    })
}
