//! McpServer admission on the real control plane, tried as a tenant would: a user `tenant-a`
//! with a namespaced Role (McpServers yes, Secrets no) and an approver bound to the chart's
//! pin-approver ClusterRole, both by impersonation (`kubectl --as`), against the controller's
//! webhook run on this machine.
//!
//! ```text
//!  helm template ─► ValidatingWebhookConfiguration (its mcpservers entry, clientConfig.url
//!                   https://localhost:<port>/validate/mcpservers, this namespace only),
//!                   ClusterRole <release>-pin-approver
//!  mcp-operator controller --webhook-addr 127.0.0.1:<port> --webhook-service localhost
//!     (it issues the certificate for `localhost` and writes both caBundles)
//!  tenant-a (Role: mcpservers, no secrets) ─► McpServer naming Secret admin-token ─► refused
//!  admin ─► the same McpServer ─► admitted, Ready (the token sent)
//!  tenant-a ─► edits another field ─► admitted; points it at another URL ─► refused
//!  McpTenantPolicy requirePinning picks `files` ─► tenant-a's approve annotation refused,
//!                                                  approver-a's admitted
//! ```

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use kube::api::{Api, ApiResource, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use mcp_operator::api::mcp_server::McpServer;
use mcp_operator::api::tenant_policy::McpTenantPolicy;
use serde_json::{Value, json};

use crate::e2e::{self, secret};
use crate::operator::{Operator, eventually, server_manifest, wait_condition};
use crate::support::{self, Fixtures};

const SOON: Duration = Duration::from_secs(45);

/// `helm template` of the chart (helm from `e2e/helm.sh`), CRDs left out.
fn render(release: &str, namespace: &str) -> Vec<Value> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(repo.join("e2e/helm.sh"))
        .args([
            "template",
            release,
            "charts/mcp-operator",
            "--namespace",
            namespace,
            "--skip-crds",
        ])
        .current_dir(repo)
        .stdin(Stdio::null())
        .output()
        .expect("bash runs e2e/helm.sh");
    assert!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_multiple::<Value>(&String::from_utf8_lossy(&out.stdout))
        .expect("helm prints YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn rendered<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("the chart renders no {kind} {name}"))
}

/// A client that acts as `user` (impersonation, as `kubectl --as=<user>`), in the group every
/// authenticated user is in.
async fn client_as(kubeconfig: &Path, user: &str) -> Client {
    let file = Kubeconfig::read_from(kubeconfig).expect("the e2e kubeconfig");
    let mut config = Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .expect("a config from the e2e kubeconfig");
    config.auth_info.impersonate = Some(user.to_string());
    config.auth_info.impersonate_groups = Some(vec!["system:authenticated".into()]);
    Client::try_from(config).expect("an impersonating client")
}

/// The apiserver's answer to a write: Ok, or the admission message.
fn refusal(result: Result<McpServer, kube::Error>) -> Option<String> {
    match result {
        Ok(_) => None,
        Err(kube::Error::Api(status)) => Some(status.message),
        Err(e) => panic!("not an apiserver answer: {e}"),
    }
}

async fn create(client: &Client, namespace: &str, manifest: Value) -> Option<String> {
    let server: McpServer = serde_json::from_value(manifest).expect("a valid McpServer");
    refusal(
        Api::<McpServer>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &server)
            .await,
    )
}

async fn merge(client: &Client, namespace: &str, name: &str, patch: Value) -> Option<String> {
    refusal(
        Api::<McpServer>::namespaced(client.clone(), namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await,
    )
}

async fn apply<K>(api: &Api<K>, object: Value) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    let object: K = serde_json::from_value(object).expect("a valid object");
    let name = object.meta().name.clone().expect("a name");
    api.patch(
        &name,
        &PatchParams::apply(e2e::FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {name}: {}", e2e::describe(&e)))
}

#[tokio::test]
async fn no_secret_for_a_tenant_who_cannot_read_it_and_no_pin_approved_without_the_right() {
    let (admin, ns) = e2e::setup("mcp-admission").await;
    let namespace = ns.name();
    let kubeconfig = e2e::kubeconfig_path().await;
    let release = ns.scoped_name("adm");
    let chart = render(&release, namespace);

    // The tenant: McpServers in its namespace, no Secrets. The approver: the same, and the
    // chart's pin-approver ClusterRole bound in this namespace.
    let roles: Api<Role> = Api::namespaced(admin.clone(), namespace);
    apply(
        &roles,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "mcpserver-editor"},
               "rules": [{"apiGroups": ["mcp-operator.dev"], "resources": ["mcpservers"],
                          "verbs": ["get", "list", "watch", "create", "update", "patch"]}]}),
    )
    .await;
    let approver_role = format!("{release}-mcp-operator-pin-approver");
    let approver: ClusterRole =
        serde_json::from_value(rendered(&chart, "ClusterRole", &approver_role).clone()).unwrap();
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &approver)
        .await
        .unwrap_or_else(|e| panic!("the chart's pin-approver role: {}", e2e::describe(&e)));
    ns.delete_later(ApiResource::erase::<ClusterRole>(&()), &approver_role);
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), namespace);
    for (name, kind, role, user) in [
        ("tenant-a-edits", "Role", "mcpserver-editor", "tenant-a"),
        ("approver-a-edits", "Role", "mcpserver-editor", "approver-a"),
        (
            "approver-a-approves",
            "ClusterRole",
            approver_role.as_str(),
            "approver-a",
        ),
    ] {
        apply(
            &bindings,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": name},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}),
        )
        .await;
    }

    // The chart's McpServer validation, sent to the controller on this machine and limited to
    // this namespace (the control plane is shared); an injection configuration of the same name
    // (the certificate keeper keeps both), selecting no pod here.
    let port = support::free_port();
    let configuration = ns.scoped_name("admission");
    let url = |path: &str| json!({"url": format!("https://localhost:{port}{path}")});
    let only_here = json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}});
    let mut validating = rendered(
        &chart,
        "ValidatingWebhookConfiguration",
        &format!("{release}-mcp-operator"),
    )
    .clone();
    validating["metadata"] = json!({"name": configuration});
    let hooks: Vec<Value> = validating["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["name"] == "mcpservers.validate.mcp-operator.dev")
        .map(|h| {
            let mut h = h.clone();
            h["clientConfig"] = url("/validate/mcpservers");
            h["namespaceSelector"] = only_here.clone();
            h
        })
        .collect();
    assert_eq!(hooks.len(), 1, "the chart validates McpServers");
    validating["webhooks"] = Value::Array(hooks);
    let validating: ValidatingWebhookConfiguration = serde_json::from_value(validating).unwrap();
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .create(&PostParams::default(), &validating)
        .await
        .unwrap_or_else(|e| panic!("the validating configuration: {}", e2e::describe(&e)));
    ns.delete_later(
        ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        &configuration,
    );
    let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": configuration},
        "webhooks": [{
            "name": "inject.mcp-operator.dev", "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "failurePolicy": "Ignore", "clientConfig": url("/inject"),
            "namespaceSelector": only_here,
            "objectSelector": {"matchExpressions": [{"key": "mcp-operator.dev/agent", "operator": "Exists"}]},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
        }],
    }))
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .create(&PostParams::default(), &mutating)
        .await
        .unwrap_or_else(|e| panic!("the mutating configuration: {}", e2e::describe(&e)));
    ns.delete_later(
        ApiResource::erase::<MutatingWebhookConfiguration>(&()),
        &configuration,
    );

    let fixtures = Fixtures::load();
    let upstream = fixtures.sdk_server(&["--bearer", "t0ken"]);
    Api::<Secret>::namespaced(admin.clone(), namespace)
        .create(
            &PostParams::default(),
            &secret("admin-token", "token", "t0ken"),
        )
        .await
        .unwrap();
    let operator = Operator::start_with(
        &kubeconfig,
        namespace,
        "admission",
        &[
            "--webhook-addr",
            &format!("127.0.0.1:{port}"),
            "--webhook-service",
            "localhost",
            "--webhook-secret",
            &format!("{configuration}-tls"),
            "--webhook-configuration",
            &configuration,
            "--sidecar",
            r#"{"image": "mcp-e2e.local/sidecar:1"}"#,
        ],
    );

    // Until the caBundle is written the apiserver cannot call the webhook and (Fail) refuses
    // every McpServer: wait for a dry run of one naming nothing to pass.
    let servers: Api<McpServer> = Api::namespaced(admin.clone(), namespace);
    eventually(SOON, "the webhook admitting a plain McpServer", || async {
        let plain: McpServer =
            serde_json::from_value(server_manifest("plain", &upstream.url, json!({}))).unwrap();
        servers
            .create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &plain,
            )
            .await
            .map(|_| ())
            .map_err(|e| format!("{}\n{}", e2e::describe(&e), operator.log_text()))
    })
    .await;

    let tenant = client_as(&kubeconfig, "tenant-a").await;
    let approver = client_as(&kubeconfig, "approver-a").await;
    let bearer = |name: &str| json!({"credentials": {"bearerToken": {"secretKeyRef": {"name": name, "key": "token"}}}});

    // The tenant names a Secret it may not read: refused, with who, which, and what to do.
    let message = create(
        &tenant,
        namespace,
        server_manifest("mine", &upstream.url, bearer("admin-token")),
    )
    .await
    .expect("the tenant's McpServer naming admin-token is refused");
    for part in [
        &format!(
            "user \"tenant-a\" may not get Secret \"admin-token\" in namespace \"{namespace}\""
        ),
        "named by spec.credentials.bearerToken.secretKeyRef",
        "Ask for get on it, or have someone who may read it create or change this McpServer",
    ] {
        assert!(message.contains(part), "{part:?} in: {message}");
    }
    // A Secret that does not exist is refused the same way: nothing tells which names exist.
    let absent = create(
        &tenant,
        namespace,
        server_manifest("mine", &upstream.url, bearer("no-such-secret")),
    )
    .await
    .expect("refused");
    assert_eq!(
        absent.replace("no-such-secret", "admin-token"),
        message,
        "the refusal says nothing about existence"
    );
    assert!(servers.get_opt("mine").await.unwrap().is_none());
    // A stdio server's environment is the same: the kubelet would hand it the Secret.
    let stdio = create(
        &tenant,
        namespace,
        json!({"apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpServer",
               "metadata": {"name": "memory"},
               "spec": {"stdio": {"image": "node:22-slim", "command": ["npx", "-y", "server-memory"],
                                  "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef":
                                          {"name": "admin-token", "key": "token"}}}]}}}),
    )
    .await
    .expect("the tenant's stdio server with admin-token in its environment is refused");
    assert!(
        stdio.contains("may not get Secret \"admin-token\"")
            && stdio.contains("named by spec.stdio.env[0].valueFrom.secretKeyRef"),
        "{stdio}"
    );

    // The other doors to the same Secret: an OAuth client secret and a refresh token are sent
    // to a token endpoint the tenant writes, so each is judged like a bearer token.
    for (grant, field, extra) in [
        (
            "client_credentials",
            "clientSecret",
            json!({"clientSecret": {"secretKeyRef": {"name": "admin-token", "key": "token"}}}),
        ),
        (
            "refresh_token",
            "refreshToken",
            json!({"refreshToken": {"secretKeyRef": {"name": "admin-token", "key": "token"}}}),
        ),
    ] {
        let mut oauth2 = json!({"tokenUrl": "https://auth.example.com/token",
                                "grantType": grant, "clientId": "tenant"});
        oauth2
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let refused = create(
            &tenant,
            namespace,
            server_manifest(
                "mine",
                &upstream.url,
                json!({"credentials": {"oauth2": oauth2}}),
            ),
        )
        .await
        .unwrap_or_else(|| panic!("the tenant's oauth2 {field} naming admin-token is refused"));
        assert!(
            refused.contains("may not get Secret \"admin-token\"")
                && refused.contains(&format!(
                    "named by spec.credentials.oauth2.{field}.secretKeyRef"
                )),
            "{refused}"
        );
    }

    // The admin's McpServer naming the same Secret: admitted, and the token works.
    assert_eq!(
        create(
            &admin,
            namespace,
            server_manifest("files", &upstream.url, bearer("admin-token"))
        )
        .await,
        None
    );
    wait_condition(&servers, "files", "Ready", "True", Some("Ready"), SOON).await;

    // The tenant edits another field of it: the admin's reference does not block that.
    assert_eq!(
        merge(
            &tenant,
            namespace,
            "files",
            json!({"spec": {"tools": {"deny": ["never_*"]}}})
        )
        .await,
        None,
        "an edit that names no new Secret"
    );
    // ...but sending the admin's token elsewhere is refused.
    let elsewhere = merge(
        &tenant,
        namespace,
        "files",
        json!({"spec": {"url": "https://evil.example/mcp"}}),
    )
    .await
    .expect("pointing the admin's token at another URL is refused");
    assert!(
        elsewhere.contains("may not get Secret \"admin-token\""),
        "{elsewhere}"
    );

    // Without a policy requiring pinning the owner approves, as before.
    let approve = |digest: char| {
        json!({"metadata": {"annotations": {
            "mcp-operator.dev/approve": format!("sha256:{}", digest.to_string().repeat(64))}}})
    };
    assert_eq!(merge(&tenant, namespace, "files", approve('a')).await, None);

    // A policy requires pinning for `files`: a new approval needs the approver's right.
    let policy_name = ns.scoped_name("pin-files");
    apply(
        &Api::<McpTenantPolicy>::all(admin.clone()),
        json!({"apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpTenantPolicy",
               "metadata": {"name": policy_name},
               "spec": {"namespaceSelector": only_here,
                        "rules": [{"servers": {"names": ["files"]}, "requirePinning": true}]}}),
    )
    .await;
    ns.delete_later(ApiResource::erase::<McpTenantPolicy>(&()), &policy_name);
    let refused = merge(&tenant, namespace, "files", approve('b'))
        .await
        .expect("the tenant's approval under requirePinning is refused");
    for part in [
        &format!(
            "user \"tenant-a\" may not approve tool or prompt definitions of McpServer \"files\" in namespace \"{namespace}\""
        ),
        &format!("McpTenantPolicy/{policy_name} requires pinning for it"),
        "the verb approve on mcpservers/approval (group mcp-operator.dev)",
        "ClusterRole",
    ] {
        assert!(refused.contains(part), "{part:?} in: {refused}");
    }
    let refused_spec = merge(
        &tenant,
        namespace,
        "files",
        json!({"spec": {"pinning": {"approved": {"echo": format!("sha256:{}", "c".repeat(64))}}}}),
    )
    .await
    .expect("an approval in spec.pinning.approved is refused too");
    assert!(
        refused_spec.contains("spec.pinning.approved echo="),
        "{refused_spec}"
    );
    // Prompts are pinned too: approving one by its name is the same door, equally shut.
    let refused_prompt = merge(
        &tenant,
        namespace,
        "files",
        json!({"spec": {"pinning": {"approved": {"review": format!("sha256:{}", "d".repeat(64))}}}}),
    )
    .await
    .expect("approving a prompt in spec.pinning.approved is refused too");
    assert!(
        refused_prompt.contains("spec.pinning.approved review=")
            && refused_prompt.contains("the verb approve on mcpservers/approval"),
        "{refused_prompt}"
    );
    // Other edits of the tenant's still pass; so does withdrawing the approval it gave before.
    assert_eq!(
        merge(
            &tenant,
            namespace,
            "files",
            json!({"spec": {"discovery": {"refreshInterval": "10m"}}})
        )
        .await,
        None
    );
    // The approver's approval passes.
    assert_eq!(
        merge(&approver, namespace, "files", approve('b')).await,
        None
    );
    let stored = servers.get("files").await.unwrap();
    assert_eq!(
        stored.metadata.annotations.unwrap_or_default()["mcp-operator.dev/approve"],
        format!("sha256:{}", "b".repeat(64))
    );
    assert_eq!(
        merge(
            &tenant,
            namespace,
            "files",
            json!({"metadata": {"annotations": {"mcp-operator.dev/approve": null}}})
        )
        .await,
        None
    );

    // Every refusal was logged with its reason, never a Secret's value.
    let log = operator.log_text();
    assert!(log.contains("refused an McpServer"), "{log}");
    assert!(!log.contains("t0ken"), "a Secret value in the log:\n{log}");
}

/// Pins survive a delete and recreate: the leader keeps them in `mcp-pins-<namespace>` in its
/// own namespace, and a recreated McpServer of the same name and URL starts from them, so a
/// tool the server added meanwhile waits for approval instead of being pinned as served.
#[tokio::test]
async fn a_recreated_mcp_server_keeps_its_pins() {
    let (admin, ns) = e2e::setup("mcp-pins").await;
    let namespace = ns.name();
    let kubeconfig = e2e::kubeconfig_path().await;
    let fixtures = Fixtures::load();
    let port = support::free_port().to_string();
    let upstream = fixtures.sdk_server(&["--port", &port]);
    // The Lease's namespace, and so the pin store's, is the watched namespace here.
    let _operator = Operator::start(&kubeconfig, namespace, "pins");
    let servers: Api<McpServer> = Api::namespaced(admin.clone(), namespace);
    let manifest = server_manifest(
        "pinned",
        &upstream.url,
        json!({"pinning": {"enabled": true}}),
    );
    assert_eq!(create(&admin, namespace, manifest.clone()).await, None);
    wait_condition(
        &servers,
        "pinned",
        "ToolsApproved",
        "True",
        Some("AllApproved"),
        SOON,
    )
    .await;

    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(admin.clone(), namespace);
    let store = format!("mcp-pins-{namespace}");
    let kept = eventually(
        SOON,
        "the pins kept in the operator's namespace",
        || async {
            let cm = config_maps
                .get_opt(&store)
                .await
                .map_err(|e| e2e::describe(&e))?
                .ok_or("no pin store ConfigMap yet")?;
            let data = cm.data.unwrap_or_default();
            let (key, value) = data
                .into_iter()
                .find(|(k, _)| k.starts_with("pinned."))
                .ok_or("no entry for pinned")?;
            let value: Value = serde_json::from_str(&value).map_err(|e| e.to_string())?;
            Ok((key, value))
        },
    )
    .await;
    assert!(
        kept.1["tools"]["read_file"]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(
        !kept.1.to_string().contains(&upstream.url),
        "no URL is kept"
    );

    // Deleted; meanwhile the server gains a tool; created again, as from Git.
    servers.delete("pinned", &Default::default()).await.unwrap();
    eventually(SOON, "the McpServer gone", || async {
        match servers.get_opt("pinned").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    drop(upstream);
    let changed = fixtures.sdk_server(&["--port", &port, "--chatty"]);
    assert!(changed.url.contains(&format!(":{port}")), "{}", changed.url);
    assert_eq!(create(&admin, namespace, manifest).await, None);
    let recreated = wait_condition(
        &servers,
        "pinned",
        "ToolsApproved",
        "False",
        Some("AwaitingApproval"),
        SOON,
    )
    .await;
    let pinning = recreated.status.unwrap().pinning.unwrap();
    let waiting: Vec<(&str, &str)> = pinning
        .waiting
        .iter()
        .map(|w| (w.name.as_str(), w.summary.as_str()))
        .collect();
    assert_eq!(
        waiting,
        [("report", "new tool")],
        "only the added tool waits"
    );
}
