//! A tenant who may create pods but not read Secrets tries to read an McpServer's credential
//! with a pod of its own, unlabelled, around the sidecar (issue 20), on the real control plane.
//! No node: admission is what is judged, and a pod the apiserver stores is admitted.
//!
//! ```text
//!  apiserver ──(the chart's entries inject.mcp-operator.dev and
//!              secrets.pods.validate.mcp-operator.dev with its matchConditions,
//!              namespaceSelector = this test's namespace, url = the local controller)──►
//!  mcp-operator controller --webhook-addr 127.0.0.1:PORT --webhook-service localhost
//!  admin:   Secrets github-token, memory-env, unrelated · McpServers github (bearer
//!           github-token), memory (stdio, env from memory-env; token Secret memory-mcp-token)
//!  tenant:  pods mounting github-token, memory-mcp-token (refused), unrelated and a Secret
//!           that does not exist (admitted), a labelled pod (injected: its sidecar's volume
//!           holds github-token, admitted), a forged copy of memory's own pod (refused);
//!           memory's own pods, created by the ReplicaSet controller, are admitted
//! ```

use crate::e2e;
use crate::operator;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ApiResource, ListParams, PostParams};
use kube::{Client, ResourceExt};
use mcp_operator::api::agent_spec::AgentSpec;
use operator::{Operator, eventually, server_manifest};
use serde_json::{Value, json};

const SOON: Duration = Duration::from_secs(60);
const TENANT: &str = "guard-tenant";
const REFUSED: &str = "only the injected MCP sidecar may mount it";

/// The chart's webhook entry `name` of the configuration `kind`, as `helm template` renders it.
pub(crate) fn chart_entry(kind: &str, name: &str) -> Value {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(repo.join("e2e/helm.sh"))
        .args([
            "template",
            "mcp-operator",
            "charts/mcp-operator",
            "--namespace",
            "mcp-operator",
            "--skip-crds",
        ])
        .current_dir(repo)
        .stdin(Stdio::null())
        .output()
        .expect("bash runs e2e/helm.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap()
        .into_iter()
        .filter(|o| o["kind"] == kind)
        .flat_map(|o| o["webhooks"].as_array().cloned().unwrap_or_default())
        .find(|w| w["name"] == name)
        .unwrap_or_else(|| panic!("the chart renders the {kind} entry {name}"))
}

/// May create and read pods in its namespace, and nothing about Secrets.
async fn grant_tenant_role(admin: &Client, namespace: &str) {
    e2e::grant_role(
        admin,
        namespace,
        "tenant",
        TENANT,
        json!([{"apiGroups": [""], "resources": ["pods"],
                "verbs": ["get", "list", "create", "delete"]}]),
    )
    .await;
}

fn pod_with(name: &str, spec_extra: Value) -> Pod {
    let mut spec = json!({
        "automountServiceAccountToken": false,
        "containers": [{"name": "reader", "image": "busybox:1", "command": ["cat", "/creds/token"]}],
    });
    for (k, v) in spec_extra.as_object().cloned().unwrap_or_default() {
        spec[k] = v;
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// An unlabelled pod mounting `secret` as a volume in its container.
fn mounting(name: &str, secret: &str) -> Pod {
    pod_with(
        name,
        json!({
            "containers": [{"name": "reader", "image": "busybox:1", "command": ["cat", "/creds/token"],
                "volumeMounts": [{"name": "creds", "mountPath": "/creds"}]}],
            "volumes": [{"name": "creds", "secret": {"secretName": secret}}],
        }),
    )
}

/// The apiserver's refusal message, or why there was none.
async fn refusal(pods: &Api<Pod>, pod: &Pod) -> Result<String, String> {
    match pods.create(&PostParams::default(), pod).await {
        Ok(created) => {
            let _ = pods.delete(&created.name_any(), &Default::default()).await;
            Err("admitted".into())
        }
        Err(kube::Error::Api(s)) => Ok(s.message),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::test]
async fn a_tenant_cannot_mount_an_mcp_servers_credential_around_the_sidecar() {
    let (admin, ns) = e2e::setup("secret-guard").await;
    let namespace = ns.name().to_owned();
    grant_tenant_role(&admin, &namespace).await;
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &namespace);
    for (name, key) in [
        ("github-token", "token"),
        ("memory-env", "key"),
        ("unrelated", "x"),
    ] {
        secrets
            .create(
                &PostParams::default(),
                &e2e::secret(name, key, "e2e-placeholder"),
            )
            .await
            .unwrap();
    }

    // The operator with its webhook, and the chart's entry pointed at it.
    let port = crate::support::free_port();
    let configuration = ns.scoped_name("guard");
    let metrics_port = crate::support::free_port();
    let args = [
        "controller",
        "--watch-namespace",
        &namespace,
        "--identity",
        "op-guard",
        "--max-failure-backoff",
        "4s",
        "--bridge-image",
        "mcp-e2e.local/operator:1",
        "--metrics-addr",
        &format!("127.0.0.1:{metrics_port}"),
        "--webhook-addr",
        &format!("127.0.0.1:{port}"),
        "--webhook-service",
        "localhost",
        "--webhook-secret",
        "guard-webhook-tls",
        "--webhook-configuration",
        &configuration,
        "--sidecar",
        r#"{"image": "mcp-e2e.local/operator:1"}"#,
    ]
    .map(String::from);
    // Only this test's namespace: the control plane is shared with other tests.
    let here = json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}});
    // The caBundle keeper writes both configurations of its name: they exist before it
    // starts, so its first round finds them. The injection too, for the sidecar's own volume.
    let mut inject = chart_entry("MutatingWebhookConfiguration", "inject.mcp-operator.dev");
    inject["clientConfig"] = json!({"url": format!("https://localhost:{port}/inject")});
    inject["namespaceSelector"] = here.clone();
    let mutating: MutatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": configuration}, "webhooks": [inject]}))
            .unwrap();
    Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .create(&PostParams::default(), &mutating)
        .await
        .unwrap();
    ns.delete_later(
        ApiResource::erase::<MutatingWebhookConfiguration>(&()),
        &configuration,
    );
    let mut entry = chart_entry(
        "ValidatingWebhookConfiguration",
        "secrets.pods.validate.mcp-operator.dev",
    );
    entry["clientConfig"] =
        json!({"url": format!("https://localhost:{port}/validate/secret-mounts")});
    entry["namespaceSelector"] = here;
    let validating: ValidatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": configuration}, "webhooks": [entry]}))
            .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .create(&PostParams::default(), &validating)
        .await
        .expect("the apiserver accepts the chart's entry and its matchConditions");
    ns.delete_later(
        ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        &configuration,
    );

    let op = Operator::spawn(
        &e2e::kubeconfig_path().await,
        "op-guard",
        &args,
        &[],
        metrics_port,
    );
    operator::apply_server(
        &admin,
        &namespace,
        server_manifest(
            "github",
            "https://mcp.example.com/mcp",
            json!({"credentials": {"bearerToken": {"secretKeyRef": {"name": "github-token", "key": "token"}}}}),
        ),
    )
    .await;

    // The guard is in place once a pod mounting github-token is refused by it.
    let tenant = e2e::client_as(TENANT).await;
    let pods: Api<Pod> = Api::namespaced(tenant.clone(), &namespace);
    let message = eventually(SOON, "the Secret guard refusing", || async {
        match refusal(&pods, &mounting("reads-github", "github-token")).await? {
            m if m.contains(REFUSED) => Ok(m),
            other => Err(other),
        }
    })
    .await;
    assert!(
        message.contains("the Secret \"github-token\" (in the volume \"creds\")"),
        "{message}"
    );
    assert!(
        message.contains("the credential of the McpServer \"github\""),
        "{message}"
    );
    assert!(message.contains("mcp-operator.dev/agent="), "{message}");
    assert!(!message.contains("e2e-placeholder"), "{message}");

    // env valueFrom and envFrom are refused alike.
    let env = pod_with(
        "env-github",
        json!({"containers": [{"name": "reader", "image": "busybox:1",
            "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "github-token", "key": "token"}}}]}]}),
    );
    let message = refusal(&pods, &env).await.unwrap();
    assert!(
        message.contains("environment variable T of the container \"reader\""),
        "{message}"
    );
    let env_from = pod_with(
        "envfrom-github",
        json!({"containers": [{"name": "reader", "image": "busybox:1",
            "envFrom": [{"secretRef": {"name": "github-token"}}]}]}),
    );
    assert!(refusal(&pods, &env_from).await.unwrap().contains(REFUSED));

    // A Secret no McpServer names is the tenant's business; one that does not exist is not
    // named either (the pod is admitted, and waits for it like any pod).
    for (name, secret) in [
        ("reads-unrelated", "unrelated"),
        ("reads-nothing", "does-not-exist"),
    ] {
        let created = pods
            .create(&PostParams::default(), &mounting(name, secret))
            .await
            .unwrap_or_else(|e| {
                panic!("a pod mounting {secret} is admitted: {}", e2e::describe(&e))
            });
        assert_eq!(created.name_any(), name);
    }

    // An agent's pod, labelled: the injected sidecar's projected volume holds github-token,
    // and only the sidecar mounts it. The tenant's own container still may not.
    let agent: AgentSpec = serde_json::from_value(json!({
        "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "AgentSpec",
        "metadata": {"name": "bot"}, "spec": {"servers": [{"name": "github"}]},
    }))
    .unwrap();
    Api::<AgentSpec>::namespaced(admin.clone(), &namespace)
        .create(&PostParams::default(), &agent)
        .await
        .unwrap();
    let mut labelled = pod_with("agent", json!({}));
    labelled.metadata.labels =
        Some([("mcp-operator.dev/agent".to_string(), "bot".to_string())].into());
    let injected = pods
        .create(&PostParams::default(), &labelled)
        .await
        .unwrap_or_else(|e| panic!("the labelled pod is admitted: {}", e2e::describe(&e)));
    let volume = injected
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .and_then(|v| v.iter().find(|v| v.name == "mcp-credentials"))
        .expect("the sidecar's credentials volume");
    let sources = serde_json::to_string(&volume.projected).unwrap();
    assert!(sources.contains("\"github-token\""), "{sources}");
    let mut reaching = labelled.clone();
    reaching.metadata.name = Some("agent-reaching".into());
    reaching.spec.as_mut().unwrap().containers[0].env = Some(vec![
        serde_json::from_value(json!({"name": "T", "valueFrom": {"secretKeyRef": {"name": "github-token", "key": "token"}}}))
            .unwrap(),
    ]);
    assert!(refusal(&pods, &reaching).await.unwrap().contains(REFUSED));

    // A stdio server: its own pods (the ReplicaSet controller creates them through the
    // guard) are admitted; its token Secret and env Secret are closed to the tenant.
    operator::apply_server(
        &admin,
        &namespace,
        json!({
            "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpServer",
            "metadata": {"name": "memory"},
            "spec": {"stdio": {
                "image": "mcp-e2e.local/not-pulled:1", "imagePullPolicy": "Never",
                "command": ["npx", "-y", "@modelcontextprotocol/server-memory@2025.11.25"],
                "env": [{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "memory-env", "key": "key"}}}]
            }}
        }),
    )
    .await;
    let admin_pods: Api<Pod> = Api::namespaced(admin.clone(), &namespace);
    let own = eventually(SOON, "memory's own pod admitted", || async {
        let list = admin_pods
            .list(&ListParams::default().labels("mcp-operator.dev/mcpserver=memory"))
            .await
            .map_err(|e| e2e::describe(&e))?;
        list.items
            .into_iter()
            .next()
            .ok_or_else(|| "no pod of memory-mcp yet".to_string())
    })
    .await;
    let message = refusal(&pods, &mounting("reads-memory-token", "memory-mcp-token"))
        .await
        .unwrap();
    assert!(
        message.contains("the credential of the McpServer \"memory\""),
        "{message}"
    );

    // A copy of memory's own pod, naming its real ReplicaSet (uid and all) as controller, but
    // running the tenant's image: the owners are right, the code is not.
    let mut forged: Value = serde_json::to_value(&own).unwrap();
    // blockOwnerDeletion dropped: the cluster's OwnerReferencesPermissionEnforcement would
    // refuse it first, and a forger leaves it out.
    let mut owners = own.metadata.owner_references.clone().unwrap();
    owners[0].block_owner_deletion = None;
    forged["metadata"] = json!({
        "name": "forged-memory",
        "labels": own.labels(),
        "ownerReferences": owners,
    });
    forged.as_object_mut().unwrap().remove("status");
    forged["spec"].as_object_mut().unwrap().remove("nodeName");
    forged["spec"]["containers"][0]["image"] = json!("busybox:1");
    let forged: Pod = serde_json::from_value(forged).unwrap();
    let message = refusal(&pods, &forged).await.unwrap();
    assert!(message.contains(REFUSED), "{message}");
    assert!(message.contains("McpServer \"memory\""), "{message}");

    // The same copy without the owner references: refused too (labels prove nothing).
    let mut unowned = forged.clone();
    unowned.metadata.name = Some("unowned-memory".into());
    unowned.metadata.owner_references = None;
    unowned.spec.as_mut().unwrap().containers[0].image =
        own.spec.as_ref().unwrap().containers[0].image.clone();
    assert!(refusal(&pods, &unowned).await.unwrap().contains(REFUSED));

    let log = op.log_text();
    assert!(log.contains("refused a pod"), "{log}");
    assert!(!log.contains("e2e-placeholder"), "{log}");
}
