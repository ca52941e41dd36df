//! The Helm chart's RBAC on the real control plane, with RBAC on: the chart is rendered with
//! `helm template` (helm built from its Go module by `e2e/helm.sh`), its ServiceAccount, roles
//! and bindings are applied, the controller runs with a token of that ServiceAccount and the
//! chart's own arguments, and does its whole job — while everything it does not need is refused.
//!
//! ```text
//! helm template ──► ServiceAccount, ClusterRole(+Binding), Role(+Binding) in <release ns>
//!                       │ TokenRequest
//!                       ▼
//!           kubeconfig (admin's server + CA, the token) ──► mcp-operator controller
//!                                                           (the Deployment's args)
//!   <tenant ns>: Secret, McpServers (bearer, spill), AgentSpec ─► status, ConfigMaps, Events
//!   McpTenantPolicy (cluster) ─► status, an Event in `default`; Lease in <release ns>
//! ```
//!
//! Also here, without a cluster: the chart's CRDs are the repository's, the chart lints and
//! renders with its options, and the Dockerfile's toolchain satisfies `rust-version`.

use crate::e2e::{self, secret};
use crate::operator;
use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::authorization::v1::{SelfSubjectAccessReview, SubjectAccessReview};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, ApiResource, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use mcp_operator::api::agent_spec::AgentSpec;
use mcp_operator::api::mcp_server::McpServer;
use mcp_operator::api::tenant_policy::McpTenantPolicy;
use operator::{Operator, apply_server, eventually, server_manifest, wait_condition};
use serde_json::{Value, json};
use support::Fixtures;

const SOON: Duration = Duration::from_secs(45);
const CHART: &str = "charts/mcp-operator";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

// ------------------------------------------------------------------------------ rendering

/// Runs helm through `e2e/helm.sh` (which builds it once from its Go module).
fn helm(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(repo().join("e2e/helm.sh"))
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()
        .expect("bash runs e2e/helm.sh");
    assert!(
        out.status.success(),
        "helm {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("helm prints UTF-8")
}

/// `helm template RELEASE charts/mcp-operator -n NAMESPACE [--set ...]`: every object, CRDs
/// left out.
fn render(release: &str, namespace: &str, sets: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template",
        release,
        CHART,
        "--namespace",
        namespace,
        "--skip-crds",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let text = helm(&args);
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("helm's output is YAML: {e}\n{text}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// The one object of this kind and name.
fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    match of_kind(objects, kind)
        .into_iter()
        .filter(|o| o["metadata"]["name"] == name)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [o] => o,
        other => panic!("expected one {kind} {name}, rendered {}", other.len()),
    }
}

fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    match of_kind(objects, kind).as_slice() {
        [o] => o,
        other => panic!("expected one {kind}, rendered {}", other.len()),
    }
}

/// Each rule flattened to `group/resource verb` (`@name` when limited to names).
fn permissions(role: &Value) -> BTreeSet<String> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        let names = strings(&rule["resourceNames"]);
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    let base = format!("{group}/{resource} {verb}");
                    if names.is_empty() {
                        out.insert(base);
                    } else {
                        out.extend(names.iter().map(|n| format!("{base} @{n}")));
                    }
                }
            }
        }
    }
    out
}

/// The container arguments of the rendered Deployment.
fn container_args(objects: &[Value]) -> Vec<String> {
    one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string argument").to_string())
        .collect()
}

// ------------------------------------------------------------------------------ no cluster

#[test]
fn the_charts_crds_are_the_repositorys_crds() {
    let chart = std::fs::read_to_string(repo().join(CHART).join("crds/crds.yaml")).unwrap();
    let repo_crds = std::fs::read_to_string(repo().join("crds/crds.yaml")).unwrap();
    assert!(
        chart == repo_crds,
        "charts/mcp-operator/crds/crds.yaml differs from crds/crds.yaml: \
         run `cp crds/crds.yaml charts/mcp-operator/crds/crds.yaml` and commit"
    );
}

#[test]
fn the_cluster_role_and_the_release_namespace_roles_grant_exactly_the_reviewed_permissions() {
    let objects = render("mcp-operator", "mcp-operator", &[]);
    let cluster = permissions(named(&objects, "ClusterRole", "mcp-operator"));
    let expected_cluster: BTreeSet<String> = [
        // Secrets: read when probed, watched by metadata for rotation; a stdio server's
        // token Secret created once and removed when it turns remote.
        "/secrets create",
        "/secrets delete",
        "/secrets get",
        "/secrets list",
        "/secrets watch",
        // ConfigMaps: CA bundles (get), watches, the catalogue spill and the grants (SSA:
        // create + patch), the spill removed (delete).
        "/configmaps create",
        "/configmaps delete",
        "/configmaps get",
        "/configmaps list",
        "/configmaps patch",
        "/configmaps watch",
        // A stdio McpServer's workload: Deployment and Service (SSA, removed when it turns
        // remote), Deployments watched by label, pods listed while it does not serve.
        "apps/deployments create",
        "apps/deployments delete",
        "apps/deployments get",
        "apps/deployments list",
        "apps/deployments patch",
        "apps/deployments watch",
        "/services create",
        "/services delete",
        "/services get",
        "/services patch",
        "networking.k8s.io/networkpolicies create",
        "networking.k8s.io/networkpolicies delete",
        "networking.k8s.io/networkpolicies get",
        "networking.k8s.io/networkpolicies patch",
        "/pods list",
        // Namespaces by metadata: tenant policy selectors.
        "/namespaces list",
        "/namespaces watch",
        // Opted-in pods by metadata: the AgentSpecs count their out-of-date pods.
        "/pods list",
        "/pods watch",
        // Events (kube-runtime's recorder).
        "events.k8s.io/events create",
        "events.k8s.io/events patch",
        // The three kinds: watched, their status written, and owner references with
        // blockOwnerDeletion on the ConfigMaps they own.
        "mcp-operator.dev/agentspecs list",
        "mcp-operator.dev/agentspecs watch",
        // The finalizer that makes a delete revoke the grants first.
        "mcp-operator.dev/agentspecs patch",
        "mcp-operator.dev/agentspecs/finalizers update",
        "mcp-operator.dev/agentspecs/status patch",
        "mcp-operator.dev/mcpservers list",
        "mcp-operator.dev/mcpservers watch",
        "mcp-operator.dev/mcpservers/finalizers update",
        "mcp-operator.dev/mcpservers/status patch",
        "mcp-operator.dev/mcptenantpolicies list",
        "mcp-operator.dev/mcptenantpolicies watch",
        "mcp-operator.dev/mcptenantpolicies/status patch",
        // The injection webhook: the AgentSpec a pod names and its McpServers, read one by
        // one; the caBundle of its own Mutating- and ValidatingWebhookConfiguration.
        "mcp-operator.dev/agentspecs get",
        "mcp-operator.dev/mcpservers get",
        // The Secret guard: the ReplicaSet of a pod that uses an McpServer's Secret (its
        // Deployment: deployments get above; the McpServers: mcpservers list above), and the
        // pod an exec or attach names.
        "apps/replicasets get",
        "/pods get",
        "admissionregistration.k8s.io/mutatingwebhookconfigurations get @mcp-operator",
        "admissionregistration.k8s.io/mutatingwebhookconfigurations update @mcp-operator",
        "admissionregistration.k8s.io/validatingwebhookconfigurations get @mcp-operator",
        "admissionregistration.k8s.io/validatingwebhookconfigurations update @mcp-operator",
        // The McpServer validation: SubjectAccessReviews for the writing user (Secrets get,
        // pins approve), and the labels of the server's Namespace (which policies select it).
        "authorization.k8s.io/subjectaccessreviews create",
        "/namespaces get",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(
        cluster
            .symmetric_difference(&expected_cluster)
            .collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "the ClusterRole changed: review it"
    );

    // Two Roles in the release namespace, each named for its one job, each bound to the
    // ServiceAccount by a RoleBinding of the same name.
    let lease: Vec<String> = permissions(named(&objects, "Role", "mcp-operator-leader-election"))
        .into_iter()
        .collect();
    assert_eq!(
        lease,
        [
            "coordination.k8s.io/leases create",
            "coordination.k8s.io/leases get @mcp-operator",
            "coordination.k8s.io/leases patch @mcp-operator",
        ],
        "the leader election Role changed: review it"
    );
    let tls: Vec<String> = permissions(named(&objects, "Role", "mcp-operator-webhook-tls"))
        .into_iter()
        .collect();
    assert_eq!(
        tls,
        [
            // The webhook's certificate Secret: created by the first replica, renewed in place.
            "/secrets create",
            "/secrets update @mcp-operator-webhook-tls",
        ],
        "the webhook TLS Role changed: review it"
    );
    let signing: Vec<String> = permissions(named(&objects, "Role", "mcp-operator-grants-signing"))
        .into_iter()
        .collect();
    assert_eq!(
        signing,
        [
            // The grants signing keyring: created by the leader, watched by every replica,
            // rotated in place.
            "/secrets create",
            "/secrets get @mcp-operator-grants-signing",
            "/secrets list @mcp-operator-grants-signing",
            "/secrets update @mcp-operator-grants-signing",
            "/secrets watch @mcp-operator-grants-signing",
        ],
        "the grants signing Role changed: review it"
    );
    let pins: Vec<String> = permissions(named(&objects, "Role", "mcp-operator-pin-store"))
        .into_iter()
        .collect();
    assert_eq!(
        pins,
        [
            // The kept pins: read, created on the first write, one server's entry merged.
            "/configmaps create",
            "/configmaps get",
            "/configmaps patch",
        ],
        "the pin store Role changed: review it"
    );
    assert_eq!(of_kind(&objects, "Role").len(), 4);
    // The pin approvers' ClusterRole: the one verb, bound by the platform (the chart binds it
    // to no one).
    let approver: Vec<String> =
        permissions(named(&objects, "ClusterRole", "mcp-operator-pin-approver"))
            .into_iter()
            .collect();
    assert_eq!(approver, ["mcp-operator.dev/mcpservers/approval approve"]);
    assert_eq!(of_kind(&objects, "ClusterRoleBinding").len(), 1);
    for role in [
        "mcp-operator-leader-election",
        "mcp-operator-pin-store",
        "mcp-operator-webhook-tls",
        "mcp-operator-grants-signing",
    ] {
        let binding = named(&objects, "RoleBinding", role);
        assert_eq!(binding["roleRef"]["name"], role);
        assert_eq!(binding["subjects"][0]["name"], "mcp-operator");
    }
    assert_eq!(of_kind(&objects, "RoleBinding").len(), 4);
    let args = container_args(&objects);
    assert!(
        args.contains(&"--lease-name=mcp-operator".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--signing-secret=mcp-operator-grants-signing".to_string()),
        "{args:?}"
    );
}

/// The `helm test` hook: a Pod checking /readyz and /metrics through the metrics Service with
/// `mcp-operator check-url`, restricted like the controller, with none of the selector labels
/// (else the Service, the PodDisruptionBudget and the ReplicaSet would count it); none without
/// the Service.
#[test]
fn the_helm_test_hook_checks_the_operator_through_its_metrics_service() {
    let objects = render("mcp-operator", "mcp-operator", &[]);
    let pod = one(&objects, "Pod");
    assert_eq!(pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    let labels = pod["metadata"]["labels"].as_object().expect("labels");
    assert!(
        !labels.contains_key("app.kubernetes.io/name")
            && !labels.contains_key("app.kubernetes.io/instance"),
        "{labels:?}"
    );
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
    let urls: Vec<&str> = pod["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .map(|c| {
            assert_eq!(c["args"][0], "check-url", "{c}");
            assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{c}");
            c["args"][2].as_str().expect("a URL")
        })
        .collect();
    assert_eq!(
        urls,
        [
            "http://$(MCP_OPERATOR_METRICS_SERVICE_HOST):8080/readyz",
            "http://$(MCP_OPERATOR_METRICS_SERVICE_HOST):8080/metrics",
        ]
    );
    let without = render(
        "mcp-operator",
        "mcp-operator",
        &["metrics.service.enabled=false"],
    );
    assert!(of_kind(&without, "Pod").is_empty());
}

#[test]
fn the_chart_lints_and_renders_its_options() {
    helm(&["lint", "--strict", CHART]);

    let defaults = render("mcp-operator", "mcp-operator", &[]);
    let deployment = one(&defaults, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(pod["serviceAccountName"], "mcp-operator");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let env: Vec<_> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e["valueFrom"]["fieldRef"]["fieldPath"].clone(),
            )
        })
        .collect();
    assert!(
        env.contains(&("POD_NAME", json!("metadata.name"))),
        "{env:?}"
    );
    assert!(
        env.contains(&("POD_NAMESPACE", json!("metadata.namespace"))),
        "{env:?}"
    );
    let args = container_args(&defaults);
    for expected in [
        "controller",
        "--log-format=json",
        "--metrics-addr=0.0.0.0:8080",
        "--lease-namespace=$(POD_NAMESPACE)",
        "--pin-store-namespace=$(POD_NAMESPACE)",
        "--identity=$(POD_NAME)",
        "--tenant-default=allow",
        "--preload-budget=100000",
        "--concurrency=32",
        "--response-budget=134217728",
        "--max-failure-backoff=60s",
    ] {
        assert!(
            args.contains(&expected.to_string()),
            "{expected} in {args:?}"
        );
    }
    assert!(!args.contains(&"--allow-loopback".to_string()), "{args:?}");
    assert!(of_kind(&defaults, "ServiceMonitor").is_empty());
    let service = |objects: &[Value], name: &str| -> Value {
        of_kind(objects, "Service")
            .into_iter()
            .find(|s| s["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no Service {name}"))
            .clone()
    };
    assert_eq!(
        service(&defaults, "mcp-operator-metrics")["spec"]["ports"][0]["port"],
        8080
    );
    // Injection: the webhook Service, the configuration with its objectSelector, the flags and
    // the sidecar's settings from the values.
    assert_eq!(
        service(&defaults, "mcp-operator-webhook")["spec"]["ports"][0]["targetPort"],
        "webhook"
    );
    let hook = &one(&defaults, "MutatingWebhookConfiguration")["webhooks"][0];
    assert_eq!(hook["failurePolicy"], "Fail");
    assert_eq!(
        hook["objectSelector"]["matchExpressions"][0],
        json!({"key": "mcp-operator.dev/agent", "operator": "Exists"})
    );
    assert_eq!(
        hook["clientConfig"]["service"]["name"],
        "mcp-operator-webhook"
    );
    // Pod validation: the same selector and failure policy, CREATE and UPDATE of pods and of
    // their ephemeral containers.
    let validation = &one(&defaults, "ValidatingWebhookConfiguration")["webhooks"][0];
    assert_eq!(validation["name"], "pods.validate.mcp-operator.dev");
    assert_eq!(validation["failurePolicy"], "Fail");
    assert_eq!(validation["objectSelector"], hook["objectSelector"]);
    assert_eq!(
        validation["rules"][0]["operations"],
        json!(["CREATE", "UPDATE"])
    );
    assert_eq!(
        validation["rules"][0]["resources"],
        json!(["pods", "pods/ephemeralcontainers"])
    );
    assert_eq!(
        validation["clientConfig"]["service"]["path"],
        "/validate/pods"
    );
    // McpServer validation: every McpServer (no selector), CREATE and UPDATE, the same
    // failure policy.
    let servers = &one(&defaults, "ValidatingWebhookConfiguration")["webhooks"][1];
    assert_eq!(servers["name"], "mcpservers.validate.mcp-operator.dev");
    assert_eq!(servers["failurePolicy"], "Fail");
    assert!(servers["objectSelector"].is_null() && servers["namespaceSelector"].is_null());
    assert_eq!(
        servers["rules"],
        json!([{"apiGroups": ["mcp-operator.dev"], "apiVersions": ["v1alpha1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["mcpservers"],
                "scope": "Namespaced"}])
    );
    assert_eq!(
        servers["clientConfig"]["service"]["path"],
        "/validate/mcpservers"
    );
    // Exec and attach into a container holding an McpServer's credential: CONNECT, with the
    // Secret guard's failure policy and namespaces (never kube-system or the release's own).
    let connect = &one(&defaults, "ValidatingWebhookConfiguration")["webhooks"][3];
    assert_eq!(connect["name"], "connect.pods.validate.mcp-operator.dev");
    assert_eq!(connect["failurePolicy"], "Fail");
    assert_eq!(
        connect["rules"],
        json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CONNECT"],
                "resources": ["pods/exec", "pods/attach"], "scope": "Namespaced"}])
    );
    assert_eq!(
        connect["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["kube-system", "mcp-operator"])
    );
    assert_eq!(
        connect["clientConfig"]["service"]["path"],
        "/validate/pods-connect"
    );
    for expected in [
        "--webhook-addr=0.0.0.0:9443",
        "--webhook-service=mcp-operator-webhook",
        "--webhook-secret=mcp-operator-webhook-tls",
        "--webhook-configuration=mcp-operator",
    ] {
        assert!(
            args.contains(&expected.to_string()),
            "{expected} in {args:?}"
        );
    }
    let sidecar: Value = serde_json::from_str(
        args.iter()
            .find_map(|a| a.strip_prefix("--sidecar="))
            .expect("--sidecar"),
    )
    .expect("--sidecar is JSON");
    let sidecar: mcp_operator::inject::SidecarSettings =
        serde_json::from_value(sidecar).expect("--sidecar is what the controller reads");
    assert_eq!(sidecar.image, "ghcr.io/mcp-operator/mcp-operator:0.1.0");
    // The injected sidecar's --response-budget: 64 MiB inside its 128Mi limit.
    assert_eq!(sidecar.response_budget, Some(64 * 1024 * 1024));
    assert_eq!(
        sidecar.security_context.as_ref().unwrap().run_as_non_root,
        Some(true)
    );
    assert_eq!(of_kind(&defaults, "PodDisruptionBudget").len(), 1);

    let changed = render(
        "ops",
        "platform",
        &[
            "controller.allowLoopback=true",
            "controller.watchNamespace=team-a",
            "controller.tenantDefault=deny",
            "controller.logFormat=text",
            "controller.preloadBudget=2000000",
            "metrics.port=9090",
            "metrics.serviceMonitor.enabled=true",
            "image.tag=v9",
            "replicaCount=1",
            "injection.sidecar.image.repository=sidecar.example/mcp",
            "injection.sidecar.port=9600",
            "injection.sidecar.responseBudget=33554432",
        ],
    );
    let sidecar: mcp_operator::inject::SidecarSettings = serde_json::from_str(
        container_args(&changed)
            .iter()
            .find_map(|a| a.strip_prefix("--sidecar="))
            .expect("--sidecar"),
    )
    .expect("--sidecar is what the controller reads");
    assert_eq!(sidecar.image, "sidecar.example/mcp:v9");
    assert_eq!(sidecar.server_url(), "http://127.0.0.1:9600/mcp");
    assert_eq!(sidecar.response_budget, Some(32 * 1024 * 1024));
    assert!(of_kind(&defaults, "PrometheusRule").is_empty());
    let monitored = render(
        "mcp-operator",
        "mcp-operator",
        &[
            "metrics.prometheusRule.enabled=true",
            "metrics.sidecarPodMonitor.enabled=true",
        ],
    );
    let alerts: Vec<&str> = one(&monitored, "PrometheusRule")["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| r["alert"].as_str().expect("an alert"))
        .collect();
    assert_eq!(
        alerts,
        [
            "McpServerNotReady",
            "McpOperatorReconcileErrors",
            "McpInjectionFailing",
            "McpSidecarDenialsRising",
            "McpToolDefinitionChanged",
        ]
    );
    let pod_monitor = one(&monitored, "PodMonitor");
    assert_eq!(
        pod_monitor["spec"]["selector"]["matchExpressions"][0]["key"],
        "mcp-operator.dev/agent"
    );
    assert_eq!(
        pod_monitor["spec"]["podMetricsEndpoints"][0]["port"],
        "mcp-health"
    );
    let off = render("mcp-operator", "mcp-operator", &["injection.enabled=false"]);
    assert!(of_kind(&off, "MutatingWebhookConfiguration").is_empty());
    assert_eq!(
        of_kind(&off, "ClusterRole").len(),
        1,
        "no webhook, no pin approvals to check"
    );
    assert!(of_kind(&off, "ValidatingWebhookConfiguration").is_empty());
    // No webhook, no certificate Secret to write: the leader election, pin store and grants
    // signing Roles (grants are signed without injection too) and their bindings.
    for kind in ["Role", "RoleBinding"] {
        let names: Vec<&Value> = of_kind(&off, kind)
            .into_iter()
            .map(|o| &o["metadata"]["name"])
            .collect();
        assert_eq!(
            names,
            [
                &json!("mcp-operator-leader-election"),
                &json!("mcp-operator-pin-store"),
                &json!("mcp-operator-grants-signing")
            ],
            "{kind}"
        );
    }
    assert!(
        !container_args(&off)
            .iter()
            .any(|a| a.starts_with("--webhook-addr")),
        "no webhook without injection"
    );
    let args = container_args(&changed);
    for expected in [
        "--allow-loopback",
        "--watch-namespace=team-a",
        "--tenant-default=deny",
        "--log-format=text",
        "--preload-budget=2000000",
        "--metrics-addr=0.0.0.0:9090",
        "--lease-name=ops-mcp-operator",
    ] {
        assert!(
            args.contains(&expected.to_string()),
            "{expected} in {args:?}"
        );
    }
    let deployment = one(&changed, "Deployment");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/mcp-operator/mcp-operator:v9"
    );
    assert_eq!(
        one(&changed, "ServiceMonitor")["spec"]["endpoints"][0]["port"],
        "metrics"
    );
    assert!(
        of_kind(&changed, "PodDisruptionBudget").is_empty(),
        "one replica, no PDB"
    );
    let binding = one(&changed, "ClusterRoleBinding");
    // One namespace watched: McpServers are validated there only.
    assert_eq!(
        one(&changed, "ValidatingWebhookConfiguration")["webhooks"][1]["namespaceSelector"],
        json!({"matchLabels": {"kubernetes.io/metadata.name": "team-a"}})
    );
    assert_eq!(binding["subjects"][0]["namespace"], "platform");
    assert_eq!(
        named(&changed, "Role", "ops-mcp-operator-leader-election")["rules"][1]["resourceNames"],
        json!(["ops-mcp-operator"])
    );
}

/// `RUST_VERSION` in the Dockerfile is at least Cargo.toml's `rust-version`.
/// `telemetry.*` reaches the controller's container as the OTEL_* environment and every
/// injected sidecar through `--sidecar`; unset, neither gets any.
#[test]
fn the_charts_telemetry_reaches_the_controller_and_the_injected_sidecars() {
    let sidecar_of = |objects: &[Value]| -> mcp_operator::inject::SidecarSettings {
        serde_json::from_str(
            container_args(objects)
                .iter()
                .find_map(|a| a.strip_prefix("--sidecar="))
                .expect("--sidecar"),
        )
        .expect("--sidecar is what the controller reads")
    };
    let env_of = |objects: &[Value]| -> Vec<Value> {
        one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .expect("env")
            .clone()
    };
    let defaults = render("mcp-operator", "mcp-operator", &[]);
    assert_eq!(sidecar_of(&defaults).traces, None);
    assert!(
        env_of(&defaults)
            .iter()
            .all(|e| !e["name"].as_str().unwrap().starts_with("OTEL_")),
        "{:?}",
        env_of(&defaults)
    );

    let sets = [
        "telemetry.otlp.endpoint=http://otel-collector.observability:4318",
        "telemetry.otlp.headersSecret.name=otlp-auth",
        "telemetry.sampler=parentbased_traceidratio",
        "telemetry.samplerArg=0.25",
        "telemetry.resourceAttributes=deployment.environment=prod",
    ];
    let mut lint = vec!["lint", "--strict", CHART];
    for set in &sets {
        lint.extend(["--set", set]);
    }
    helm(&lint);
    let traced = render("mcp-operator", "mcp-operator", &sets);
    let traces = sidecar_of(&traced).traces.expect("the sidecars' traces");
    traces.check().expect("settings the controller starts with");
    assert_eq!(traces.endpoint, "http://otel-collector.observability:4318");
    assert_eq!(traces.protocol, "http/protobuf");
    let headers = traces.headers_secret.as_ref().expect("headersSecret");
    assert_eq!(
        (headers.name.as_str(), headers.key.as_str()),
        ("otlp-auth", "headers")
    );
    assert_eq!(traces.sampler.as_deref(), Some("parentbased_traceidratio"));
    assert_eq!(traces.sampler_arg.as_deref(), Some("0.25"));
    assert_eq!(
        traces.resource_attributes.as_deref(),
        Some("deployment.environment=prod")
    );
    let env = env_of(&traced);
    let value = |name: &str| -> Value {
        env.iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {env:?}"))
            .clone()
    };
    assert_eq!(
        value("OTEL_EXPORTER_OTLP_ENDPOINT")["value"],
        "http://otel-collector.observability:4318"
    );
    assert_eq!(
        value("OTEL_EXPORTER_OTLP_PROTOCOL")["value"],
        "http/protobuf"
    );
    assert_eq!(
        value("OTEL_EXPORTER_OTLP_HEADERS")["valueFrom"]["secretKeyRef"],
        json!({"name": "otlp-auth", "key": "headers", "optional": true})
    );
    assert_eq!(
        value("OTEL_TRACES_SAMPLER")["value"],
        "parentbased_traceidratio"
    );
    assert_eq!(value("OTEL_TRACES_SAMPLER_ARG")["value"], "0.25");
    assert_eq!(
        value("OTEL_RESOURCE_ATTRIBUTES")["value"],
        "k8s.namespace.name=$(POD_NAMESPACE),k8s.pod.name=$(POD_NAME),deployment.environment=prod"
    );
    // $(POD_NAME) expands only variables defined before it.
    let position = |name: &str| env.iter().position(|e| e["name"] == name).unwrap();
    assert!(position("POD_NAME") < position("OTEL_RESOURCE_ATTRIBUTES"));
    assert!(position("POD_NAMESPACE") < position("OTEL_RESOURCE_ATTRIBUTES"));
}

#[test]
fn the_dockerfile_toolchain_satisfies_rust_version() {
    let version = |s: &str| -> (u32, u32) {
        let mut parts = s.trim().trim_matches('"').split('.');
        let major = parts
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a major version");
        let minor = parts
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a minor version");
        (major, minor)
    };
    let cargo = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let msrv = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version"))
        .and_then(|l| l.split('=').nth(1))
        .map(version)
        .expect("Cargo.toml has rust-version");
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let pinned = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("ARG RUST_VERSION="))
        .map(version)
        .expect("the Dockerfile pins ARG RUST_VERSION=");
    assert!(
        pinned >= msrv,
        "the Dockerfile builds with Rust {pinned:?}, older than rust-version {msrv:?}"
    );
    assert!(dockerfile.contains("cargo build --release --locked"));
    assert!(dockerfile.contains("USER 65532:65532"));
    assert!(dockerfile.contains(r#"ENTRYPOINT ["/mcp-operator"]"#));
}

// ------------------------------------------------------------------------------ the cluster

/// The chart's RBAC objects applied for a release named after the namespace; the
/// cluster-scoped ones are deleted with it. Returns the rendered objects.
async fn install_rbac(client: &Client, release_ns: &e2e::TestNamespace) -> Vec<Value> {
    let release = release_ns.name();
    let objects = render(release, release, &[]);
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        // Their caBundle is the controller's to keep; they call nothing (see
        // calling_no_namespace).
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        for object in of_kind(&objects, kind) {
            let object = &calling_no_namespace(object);
            e2e::write(
                client,
                e2e::Write::ServerSideApply,
                object,
                Some(release),
                false,
            )
            .await
            .unwrap_or_else(|e| panic!("applying the chart's {kind}: {}", e2e::describe(&e)));
        }
    }
    let name = format!("{release}-mcp-operator");
    release_ns.delete_later(ApiResource::erase::<ClusterRole>(&()), &name);
    release_ns.delete_later(
        ApiResource::erase::<ClusterRole>(&()),
        &format!("{name}-pin-approver"),
    );
    release_ns.delete_later(ApiResource::erase::<ClusterRoleBinding>(&()), &name);
    release_ns.delete_later(
        ApiResource::erase::<
            k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
        >(&()),
        &name,
    );
    release_ns.delete_later(
        ApiResource::erase::<
            k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
        >(&()),
        &name,
    );
    objects
}

/// The chart's ValidatingAdmissionPolicy that keeps status the operator's, and its binding
/// limited to `namespace`.
fn status_guard(objects: &[Value], namespace: &str) -> Vec<Value> {
    let policy = one(objects, "ValidatingAdmissionPolicy").clone();
    let mut binding = one(objects, "ValidatingAdmissionPolicyBinding").clone();
    binding["spec"]["matchResources"] = json!({"namespaceSelector": {"matchLabels":
        {"kubernetes.io/metadata.name": namespace}}});
    vec![policy, binding]
}

/// Nothing serves this release's webhook Service, and a configuration is cluster-wide: every
/// hook is applied selecting no namespace (its caBundle is still kept). Else every McpServer
/// written on the shared control plane, and every labelled pod another test creates while this
/// one runs (the real-node tests' agents), would be refused with "failed calling webhook".
fn calling_no_namespace(object: &Value) -> Value {
    let mut object = object.clone();
    if object["kind"] == "ValidatingWebhookConfiguration"
        || object["kind"] == "MutatingWebhookConfiguration"
    {
        for hook in object["webhooks"].as_array_mut().into_iter().flatten() {
            hook["namespaceSelector"] =
                json!({"matchLabels": {"mcp-operator.dev/e2e": "no-namespace"}});
        }
    }
    object
}

/// A kubeconfig for the same apiserver as `admin` (server and CA copied) that authenticates
/// with `token` only.
fn token_kubeconfig(admin: &Path, token: &str, out: &Path) {
    let text = std::fs::read_to_string(admin).expect("the admin kubeconfig");
    let admin: Value = serde_saphyr::from_str(&text).expect("the admin kubeconfig is YAML");
    let current = admin["current-context"].as_str().unwrap_or_default();
    let cluster_name = admin["contexts"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == current))
        .map(|c| c["context"]["cluster"].clone())
        .unwrap_or_else(|| admin["clusters"][0]["name"].clone());
    let cluster = admin["clusters"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == cluster_name))
        .map(|c| c["cluster"].clone())
        .expect("the admin kubeconfig names its cluster");
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster}],
        "users": [{"name": "mcp-operator", "user": {"token": token}}],
        "contexts": [{"name": "mcp-operator", "context": {"cluster": "e2e", "user": "mcp-operator"}}],
        "current-context": "mcp-operator",
    });
    std::fs::write(out, serde_json::to_vec_pretty(&config).unwrap()).expect("writing a kubeconfig");
}

/// A one-hour token of the ServiceAccount (TokenRequest, signed by the apiserver).
async fn service_account_token(client: &Client, namespace: &str, name: &str) -> String {
    let request: TokenRequest = serde_json::from_value(json!({
        "spec": {"audiences": [], "expirationSeconds": 3600},
    }))
    .unwrap();
    let response = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for {name}: {}", e2e::describe(&e)));
    response.status.expect("a token").token
}

async fn client_for(kubeconfig: &Path) -> Client {
    let text = kube::config::Kubeconfig::read_from(kubeconfig).expect("the token kubeconfig");
    let config = Config::from_custom_kubeconfig(text, &Default::default())
        .await
        .expect("a config from the token kubeconfig");
    Client::try_from(config).expect("a client")
}

/// One replica of the controller, started with the arguments of the chart's Deployment: the
/// downward API filled in (`$(POD_NAME)`, `$(POD_NAMESPACE)`), the metrics address on a free
/// loopback port, and `extra`.
fn start_replica(
    chart_args: &[String],
    kubeconfig: &Path,
    pod_namespace: &str,
    pod_name: &str,
    extra: &[&str],
) -> Operator {
    let port = crate::support::free_port();
    let webhook_port = crate::support::free_port();
    let args: Vec<String> = chart_args
        .iter()
        .map(|a| {
            if a.starts_with("--metrics-addr=") {
                format!("--metrics-addr=127.0.0.1:{port}")
            } else if a.starts_with("--webhook-addr=") {
                format!("--webhook-addr=127.0.0.1:{webhook_port}")
            } else {
                a.replace("$(POD_NAMESPACE)", pod_namespace)
                    .replace("$(POD_NAME)", pod_name)
            }
        })
        .chain(extra.iter().map(|a| a.to_string()))
        .collect();
    let env = [("POD_NAME", pod_name), ("POD_NAMESPACE", pod_namespace)];
    Operator::spawn(kubeconfig, pod_name, &args, &env, port)
}

async fn events_about(client: &Client, namespace: &str, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reporting_controller.as_deref() == Some("mcp-operator")
        })
        .collect()
}

/// A platform engineer installs the chart's RBAC and runs the controller as its
/// ServiceAccount: Secrets are resolved, McpServers become Ready, a large catalogue spills
/// into a ConfigMap and the ConfigMap goes away when it fits again, grants are published,
/// statuses and events are written, the Lease is taken — and nothing is forbidden.
#[tokio::test]
async fn the_controller_does_its_whole_job_with_only_the_charts_rbac() {
    let (client, release_ns) = e2e::setup("rbac").await;
    let tenant_ns = e2e::TestNamespace::create(&client, "rbac-tenant").await;
    let (release, tenant) = (release_ns.name(), tenant_ns.name());
    let objects = install_rbac(&client, &release_ns).await;
    let service_account = one(&objects, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let token = service_account_token(&client, release, &service_account).await;
    token_kubeconfig(&e2e::kubeconfig_path().await, &token, &kubeconfig);

    // The token is the ServiceAccount's: the apiserver says so.
    let as_sa = client_for(&kubeconfig).await;
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({
        "spec": {"resourceAttributes": {"group": "mcp-operator.dev", "resource": "mcpservers",
                                        "verb": "watch"}},
    }))
    .unwrap();
    let review = Api::<SelfSubjectAccessReview>::all(as_sa.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    assert!(
        review.status.unwrap().allowed,
        "the token can watch McpServers"
    );

    // What the tenant applies before the controller starts.
    let fixtures = Fixtures::load();
    let small = fixtures.sdk_server(&["--bearer", "t0ken"]);
    let hostile = fixtures.hostile_server();
    Api::<Namespace>::all(client.clone())
        .patch(
            tenant,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"mcp-operator.dev/e2e-tenant": tenant}}})),
        )
        .await
        .unwrap();
    let bearer = json!({"credentials": {"bearerToken": {"secretKeyRef": {"name": "token", "key": "token"}}}});
    apply_server(
        &client,
        tenant,
        server_manifest("files", &small.url, bearer.clone()),
    )
    .await;
    apply_server(
        &client,
        tenant,
        server_manifest(
            "big",
            &format!("{}/bulk/mcp?tools=5000&pages=10", hostile.url),
            json!({"timeouts": {"connect": "60s"}}),
        ),
    )
    .await;
    e2e::apply_agent(
        &client,
        tenant,
        "assistant",
        json!({"servers": [{"name": "files", "allow": ["read_*"]}]}),
    )
    .await;
    // A policy selecting only the tenant namespace; its second rule's selector is invalid,
    // so its status says so and an event goes to `default` (the policy is cluster-scoped).
    let policy_name = tenant_ns.scoped_name("bounds");
    let policy: McpTenantPolicy = serde_json::from_value(json!({
        "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "McpTenantPolicy",
        "metadata": {"name": policy_name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"mcp-operator.dev/e2e-tenant": tenant}},
            "rules": [
                {"servers": {"names": ["files"]}, "maxAccess": "read"},
                {"servers": {"selector": {"matchExpressions": [{"key": "tier", "operator": "In"}]}}},
            ],
        },
    }))
    .unwrap();
    Api::<McpTenantPolicy>::all(client.clone())
        .patch(
            &policy_name,
            &PatchParams::apply(e2e::FIELD_MANAGER).force(),
            &Patch::Apply(&policy),
        )
        .await
        .unwrap_or_else(|e| panic!("McpTenantPolicy: {}", e2e::describe(&e)));
    tenant_ns.delete_later(ApiResource::erase::<McpTenantPolicy>(&()), &policy_name);

    // The chart's status guard, bound to the tenant namespace only (the control plane is
    // shared, and other tests' controllers write status as other users): the controller's
    // ServiceAccount must pass it in everything below.
    for object in status_guard(&objects, tenant) {
        e2e::write(&client, e2e::Write::ServerSideApply, &object, None, false)
            .await
            .unwrap_or_else(|e| panic!("the chart's status guard: {}", e2e::describe(&e)));
        let resource = e2e::resource_of(&client, &object).await.0;
        tenant_ns.delete_later(resource, object["metadata"]["name"].as_str().unwrap());
    }

    // Two replicas, as the Deployment runs them, limited to the tenant namespace (the control
    // plane is shared with other tests); the Lease lives in the release namespace.
    let args = container_args(&objects);
    let extra = ["--allow-loopback", "--watch-namespace", tenant];
    let mut leader = start_replica(&args, &kubeconfig, release, "replica-a", &extra);
    let lease_name = format!("{release}-mcp-operator");
    let leases: Api<Lease> = Api::namespaced(client.clone(), release);
    eventually(SOON, "replica-a holds the Lease", || async {
        let lease = leases
            .get(&lease_name)
            .await
            .map_err(|e| e2e::describe(&e))?;
        let holder = lease.spec.and_then(|s| s.holder_identity);
        match holder.as_deref() {
            Some("replica-a") => Ok(()),
            other => Err(format!("holder {other:?}")),
        }
    })
    .await;
    let standby = start_replica(&args, &kubeconfig, release, "replica-b", &extra);

    // The webhook's TLS with the chart's RBAC: one Secret both replicas share, its CA bundle
    // in the Mutating- and the ValidatingWebhookConfiguration.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), release);
    let configs: Api<k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration> =
        Api::all(client.clone());
    let validations: Api<
        k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
    > = Api::all(client.clone());
    eventually(SOON, "the webhook's caBundle from its Secret", || async {
        let secret = secrets
            .get_opt(&format!("{lease_name}-webhook-tls"))
            .await
            .map_err(|e| e2e::describe(&e))?
            .ok_or("no webhook Secret yet")?;
        let ca = secret
            .data
            .unwrap_or_default()
            .remove("ca.crt")
            .ok_or("no ca.crt")?;
        let config = configs
            .get(&lease_name)
            .await
            .map_err(|e| e2e::describe(&e))?;
        let bundle = config.webhooks.unwrap_or_default()[0]
            .client_config
            .ca_bundle
            .clone();
        let validation = validations
            .get(&lease_name)
            .await
            .map_err(|e| e2e::describe(&e))?
            .webhooks
            .unwrap_or_default()[0]
            .client_config
            .ca_bundle
            .clone();
        if bundle.as_ref() == Some(&ca) && validation.as_ref() == Some(&ca) {
            Ok(())
        } else {
            Err("a caBundle is not the Secret's ca.crt".to_string())
        }
    })
    .await;

    // The Secret is missing: a condition and a Warning event say which.
    let servers: Api<McpServer> = Api::namespaced(client.clone(), tenant);
    wait_condition(
        &servers,
        "files",
        "Ready",
        "False",
        Some("SecretNotFound"),
        SOON,
    )
    .await;
    eventually(SOON, "a SecretNotFound event", || async {
        let events = events_about(&client, tenant, "files").await;
        if events
            .iter()
            .any(|e| e.reason.as_deref() == Some("SecretNotFound"))
        {
            Ok(())
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;

    // The Secret arrives: resolved (get), the server is read with it, a Recovered event.
    Api::<Secret>::namespaced(client.clone(), tenant)
        .patch(
            "token",
            &PatchParams::apply(e2e::FIELD_MANAGER).force(),
            &Patch::Apply(&secret("token", "token", "t0ken")),
        )
        .await
        .unwrap();
    let files = wait_condition(&servers, "files", "Ready", "True", Some("Ready"), SOON).await;
    assert!(files.status.unwrap().catalog.unwrap().catalog.tool_count > 0);
    eventually(SOON, "a Recovered event", || async {
        let events = events_about(&client, tenant, "files").await;
        if events
            .iter()
            .any(|e| e.reason.as_deref() == Some("Recovered"))
        {
            Ok(())
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;

    // A careless Role (every `mcp-operator.dev` resource, every verb: `mcpservers/status` too)
    // still writes no status: the chart's policy admits the operator's ServiceAccount only, and
    // says why.
    e2e::grant_role(
        &client,
        tenant,
        "careless",
        "careless-tenant",
        json!([{"apiGroups": ["mcp-operator.dev"], "resources": ["*"], "verbs": ["*"]}]),
    )
    .await;
    let careless = e2e::client_as("careless-tenant").await;
    for (kind, name) in [("mcpservers", "files"), ("agentspecs", "assistant")] {
        let attributes = json!({"namespace": tenant, "group": "mcp-operator.dev",
                                "resource": kind, "subresource": "status", "verb": "patch"});
        let resource = ApiResource {
            group: "mcp-operator.dev".into(),
            version: "v1alpha1".into(),
            api_version: "mcp-operator.dev/v1alpha1".into(),
            kind: String::new(),
            plural: kind.into(),
        };
        let api =
            Api::<kube::api::DynamicObject>::namespaced_with(careless.clone(), tenant, &resource);
        // The Role and the policy take effect within moments of being written (the
        // apiserver's caches); a dry run is admitted or refused like the write.
        let message = eventually(
            SOON,
            &format!("{kind}/status refused by the policy"),
            || async {
                if !may(&client, "careless-tenant", attributes.clone()).await {
                    return Err("RBAC does not let careless-tenant patch it yet".to_string());
                }
                let dry_run = PatchParams {
                    dry_run: true,
                    ..PatchParams::default()
                };
                let patch = Patch::Merge(json!({"status": {"observedGeneration": 1}}));
                match api.patch_status(name, &dry_run, &patch).await {
                    Ok(_) => Err("admitted".to_string()),
                    Err(e) => Ok(e2e::describe(&e)),
                }
            },
        )
        .await;
        eprintln!("what careless-tenant reads: {message}");
        // The other verb on the same subresource: a whole-status replace (PUT).
        let mut object = api.get(name).await.unwrap();
        object.data["status"] = json!({"observedGeneration": 1});
        let replaced = api
            .replace_status(
                name,
                &PostParams {
                    dry_run: true,
                    ..PostParams::default()
                },
                &object,
            )
            .await
            .expect_err("a tenant's status replace is refused");
        for message in [message, e2e::describe(&replaced)] {
            for expected in [
                "is the operator's record",
                &format!("only system:serviceaccount:{release}:{service_account} writes it"),
                "not careless-tenant",
            ] {
                assert!(message.contains(expected), "{kind}/{name}: {message}");
            }
        }
    }

    // The large catalogue spills into a ConfigMap (create through server-side apply).
    let big = wait_condition(
        &servers,
        "big",
        "Ready",
        "True",
        None,
        Duration::from_secs(90),
    )
    .await;
    let spill = big
        .status
        .unwrap()
        .catalog_config_map
        .expect("the catalogue spilled");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), tenant);
    assert!(config_maps.get_opt(&spill).await.unwrap().is_some());

    // The grants ConfigMap is published and the AgentSpec's status names it.
    let agents: Api<AgentSpec> = Api::namespaced(client.clone(), tenant);
    let grants = eventually(SOON, "the AgentSpec's grants ConfigMap", || async {
        let agent = agents
            .get("assistant")
            .await
            .map_err(|e| e2e::describe(&e))?;
        match agent.status.and_then(|s| s.grants_config_map) {
            Some(name) => Ok(name),
            None => Err("no grantsConfigMap in status".into()),
        }
    })
    .await;
    let grants_cm = config_maps.get(&grants).await.unwrap();
    let data = grants_cm.data.unwrap_or_default();
    assert!(
        data.contains_key("grants.json"),
        "{grants} holds grants.json"
    );
    assert!(data.contains_key("grants.sig"), "{grants} is signed");
    // The leader created the signing keyring in the release namespace.
    let keyring_name = container_args(&objects)
        .iter()
        .find_map(|a| a.strip_prefix("--signing-secret=").map(str::to_string))
        .expect("the chart names the signing Secret");
    let keyring = Api::<Secret>::namespaced(client.clone(), release)
        .get_opt(&keyring_name)
        .await
        .unwrap()
        .expect("the grants signing Secret");
    assert!(keyring.data.unwrap_or_default().contains_key("current"));
    // Rotating it is a right of the chart's RBAC too: signed again with the new key.
    let before: Value = serde_json::from_str(&data["grants.sig"]).unwrap();
    Api::<Secret>::namespaced(client.clone(), release)
        .patch(
            &keyring_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"mcp-operator.dev/rotate": "now"}}})),
        )
        .await
        .unwrap();
    eventually(
        SOON,
        "the grants signed again with the next key",
        || async {
            let cm = config_maps
                .get(&grants)
                .await
                .map_err(|e| e2e::describe(&e))?;
            let sig: Value = serde_json::from_str(&cm.data.unwrap_or_default()["grants.sig"])
                .map_err(|e| e.to_string())?;
            if sig["keyId"] != before["keyId"] {
                Ok(())
            } else {
                Err(format!("still {}", sig["keyId"]))
            }
        },
    )
    .await;

    // The policy's status (a cluster-scoped status patch) and its event in `default`.
    let policies: Api<McpTenantPolicy> = Api::all(client.clone());
    eventually(SOON, "the McpTenantPolicy's status", || async {
        let p = policies
            .get(&policy_name)
            .await
            .map_err(|e| e2e::describe(&e))?;
        match p.status.as_ref().and_then(|s| s.selected_namespaces) {
            Some(1) => Ok(()),
            other => Err(format!("selectedNamespaces {other:?}")),
        }
    })
    .await;
    eventually(SOON, "an event about the policy in `default`", || async {
        let events = events_about(&client, "default", &policy_name).await;
        if events.is_empty() {
            Err("none yet".into())
        } else {
            Ok(())
        }
    })
    .await;

    // The catalogue fits in status again: the spill ConfigMap is deleted.
    apply_server(
        &client,
        tenant,
        server_manifest("big", &small.url, bearer.clone()),
    )
    .await;
    eventually(SOON, "the spill ConfigMap deleted", || async {
        match config_maps.get_opt(&spill).await {
            Ok(None) => Ok(()),
            Ok(Some(_)) => Err("still there".into()),
            Err(e) => Err(e2e::describe(&e)),
        }
    })
    .await;
    // The ConfigMap goes before the status is written: wait for the status too.
    eventually(
        SOON,
        "status no longer names the spill ConfigMap",
        || async {
            let big = servers.get("big").await.map_err(|e| e2e::describe(&e))?;
            match big.status.and_then(|s| s.catalog_config_map) {
                None => Ok(()),
                Some(cm) => Err(format!("still names {cm}")),
            }
        },
    )
    .await;

    // The Secret is deleted: the same warning again is counted in the event's series (the
    // recorder's patch).
    Api::<Secret>::namespaced(client.clone(), tenant)
        .delete("token", &Default::default())
        .await
        .unwrap();
    eventually(SOON, "the SecretNotFound event counted twice", || async {
        let events = events_about(&client, tenant, "files").await;
        let series = events
            .iter()
            .filter(|e| e.reason.as_deref() == Some("SecretNotFound"))
            .find_map(|e| e.series.as_ref().map(|s| s.count));
        match series {
            Some(count) if count >= 2 => Ok(()),
            other => Err(format!("series count {other:?}")),
        }
    })
    .await;

    // A stdio server: its Deployment and Service applied (get + create/patch), its pods listed
    // while it does not serve; turned remote, both are deleted.
    operator::apply_server(
        &client,
        tenant,
        e2e::stdio_server_manifest(
            "memory",
            json!({"image": "mcp-e2e.local/not-pulled:1", "imagePullPolicy": "Never",
                   "command": ["npx", "-y", "@modelcontextprotocol/server-memory"]}),
        ),
    )
    .await;
    wait_condition(
        &servers,
        "memory",
        "Ready",
        "False",
        Some("WorkloadNotReady"),
        SOON,
    )
    .await;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), tenant);
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), tenant);
    assert!(deployments.get_opt("memory-mcp").await.unwrap().is_some());
    assert!(services.get_opt("memory-mcp").await.unwrap().is_some());
    let policies: Api<k8s_openapi::api::networking::v1::NetworkPolicy> =
        Api::namespaced(client.clone(), tenant);
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), tenant);
    assert!(policies.get_opt("memory-mcp").await.unwrap().is_some());
    assert!(secrets.get_opt("memory-mcp-token").await.unwrap().is_some());
    apply_server(
        &client,
        tenant,
        server_manifest("memory", &small.url, bearer.clone()),
    )
    .await;
    eventually(
        SOON,
        "the workload of the server turned remote deleted",
        || async {
            let d = deployments
                .get_opt("memory-mcp")
                .await
                .map_err(|e| e2e::describe(&e))?;
            let s = services
                .get_opt("memory-mcp")
                .await
                .map_err(|e| e2e::describe(&e))?;
            let p = policies
                .get_opt("memory-mcp")
                .await
                .map_err(|e| e2e::describe(&e))?;
            let t = secrets
                .get_opt("memory-mcp-token")
                .await
                .map_err(|e| e2e::describe(&e))?;
            match (d, s, p, t) {
                (None, None, None, None) => Ok(()),
                (d, s, p, t) => Err(format!(
                    "deployment {}, service {}, network policy {}, token secret {}",
                    d.is_some(),
                    s.is_some(),
                    p.is_some(),
                    t.is_some()
                )),
            }
        },
    )
    .await;

    // Deleting the AgentSpec: its finalizer publishes the revoked grants, then (no pod runs)
    // the ConfigMap and the finalizer go.
    agents
        .delete("assistant", &Default::default())
        .await
        .unwrap();
    eventually(
        SOON,
        "the AgentSpec and its grants ConfigMap gone",
        || async {
            let a = agents
                .get_opt("assistant")
                .await
                .map_err(|e| e2e::describe(&e))?;
            let cm = config_maps
                .get_opt(&grants)
                .await
                .map_err(|e| e2e::describe(&e))?;
            match (a, cm) {
                (None, None) => Ok(()),
                (a, cm) => Err(format!(
                    "agentspec {}, configmap {}",
                    a.is_some(),
                    cm.is_some()
                )),
            }
        },
    )
    .await;

    // The leader shuts down and releases the Lease; the standby takes it and reconciles.
    assert!(
        leader.terminate(Duration::from_secs(20)).is_some(),
        "the leader exits within 20s of SIGTERM"
    );
    eventually(SOON, "replica-b holds the Lease", || async {
        let lease = leases
            .get(&lease_name)
            .await
            .map_err(|e| e2e::describe(&e))?;
        match lease.spec.and_then(|s| s.holder_identity).as_deref() {
            Some("replica-b") => Ok(()),
            other => Err(format!("holder {other:?}")),
        }
    })
    .await;
    eventually(SOON, "replica-b reconciling", || async {
        let log = standby.log_text();
        if log.contains("became the leader") {
            Ok(())
        } else {
            Err(log)
        }
    })
    .await;

    // Nothing the controller tried was refused; the standby stood by without errors too.
    for replica in [&leader, &standby] {
        let log = replica.log_text();
        assert!(
            !log.to_lowercase().contains("forbidden"),
            "{}: the controller was refused something:\n{log}",
            replica.log.display()
        );
        assert!(!log.is_empty(), "{} logged nothing", replica.log.display());
    }
    assert!(
        leader.log_text().contains("released the lease"),
        "{}",
        leader.log_text()
    );
}

/// Asks the apiserver whether the chart's ServiceAccount may do something.
async fn may(client: &Client, user: &str, attributes: Value) -> bool {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "resourceAttributes": attributes,
        },
    }))
    .unwrap();
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap_or_else(|e| panic!("SubjectAccessReview: {}", e2e::describe(&e)))
        .status
        .expect("a review status")
        .allowed
}

/// What the ServiceAccount can do, asked of the apiserver's authorizer: everything the
/// controller needs, and none of what it does not. (It can read Secrets in every namespace:
/// McpServers anywhere may name one, and RBAC cannot limit a watch to metadata.)
#[tokio::test]
async fn the_service_account_can_do_nothing_else() {
    let (client, release_ns) = e2e::setup("rbac-deny").await;
    let release = release_ns.name();
    let objects = install_rbac(&client, &release_ns).await;
    let sa = one(&objects, "ServiceAccount")["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let user = format!("system:serviceaccount:{release}:{sa}");
    let lease = format!("{release}-mcp-operator");
    let mcp = "mcp-operator.dev";
    let attrs = |group: &str, resource: &str, verb: &str, namespace: &str| {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        json!({"group": group, "resource": resource, "subresource": subresource,
               "verb": verb, "namespace": namespace})
    };
    let named = |group: &str, resource: &str, verb: &str, namespace: &str, name: &str| {
        let mut a = attrs(group, resource, verb, namespace);
        a["name"] = name.into();
        a
    };

    let allowed = [
        attrs(mcp, "mcpservers", "watch", ""),
        attrs(mcp, "mcpservers/status", "patch", "tenant-a"),
        attrs(mcp, "agentspecs/status", "patch", "tenant-a"),
        attrs(mcp, "mcptenantpolicies/status", "patch", ""),
        attrs(mcp, "mcpservers/finalizers", "update", "tenant-a"),
        attrs("", "secrets", "get", "tenant-a"),
        // By necessity: Secrets anywhere, also in kube-system.
        attrs("", "secrets", "list", "kube-system"),
        // A stdio server's token Secret: created once, removed when the server turns remote.
        attrs("", "secrets", "create", "tenant-a"),
        attrs("", "secrets", "delete", "tenant-a"),
        attrs("", "configmaps", "create", "tenant-a"),
        attrs("", "configmaps", "delete", "tenant-a"),
        attrs("", "namespaces", "watch", ""),
        // The McpServer validation: the writing user's rights asked of the authorizer, the
        // policies and the server's Namespace read.
        attrs("authorization.k8s.io", "subjectaccessreviews", "create", ""),
        attrs("", "namespaces", "get", ""),
        attrs(mcp, "mcptenantpolicies", "list", ""),
        // The opted-in pods, watched by metadata for the AgentSpecs' pod counts.
        attrs("", "pods", "list", "tenant-a"),
        attrs("", "pods", "watch", "tenant-a"),
        attrs("events.k8s.io", "events", "create", "default"),
        attrs("coordination.k8s.io", "leases", "create", release),
        named("coordination.k8s.io", "leases", "patch", release, &lease),
        // The injection webhook: the AgentSpec a pod names and its McpServers; its certificate
        // Secret in the release namespace; its own webhook configuration's caBundle.
        attrs(mcp, "agentspecs", "get", "tenant-a"),
        attrs(mcp, "mcpservers", "get", "tenant-a"),
        // The exec and attach guard: the pod a request names.
        attrs("", "pods", "get", "tenant-a"),
        // The finalizer that revokes a deleted AgentSpec's grants.
        attrs(mcp, "agentspecs", "patch", "tenant-a"),
        // The grants signing keyring in the release namespace.
        named(
            "",
            "secrets",
            "update",
            release,
            &format!("{lease}-grants-signing"),
        ),
        attrs("", "secrets", "create", release),
        named(
            "",
            "secrets",
            "update",
            release,
            &format!("{lease}-webhook-tls"),
        ),
        named(
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            "update",
            "",
            &lease,
        ),
    ];
    for a in allowed {
        assert!(may(&client, &user, a.clone()).await, "{user} needs {a}");
    }

    let refused = [
        // The McpServer, AgentSpec and policy specs belong to people.
        attrs(mcp, "mcpservers", "create", "tenant-a"),
        attrs(mcp, "mcpservers", "patch", "tenant-a"),
        attrs(mcp, "mcpservers", "update", "tenant-a"),
        attrs(mcp, "mcpservers", "delete", "tenant-a"),
        attrs(mcp, "agentspecs", "update", "tenant-a"),
        attrs(mcp, "agentspecs", "delete", "tenant-a"),
        attrs(mcp, "mcptenantpolicies", "delete", ""),
        attrs(mcp, "mcptenantpolicies", "patch", ""),
        attrs(mcp, "mcpservers/status", "update", "tenant-a"),
        // Secrets are never changed (but the webhook's own, in the release namespace): a
        // stdio server's token Secret is created and deleted whole, never rewritten.
        named("", "secrets", "update", release, "someone-elses"),
        attrs("", "secrets", "patch", "tenant-a"),
        attrs("", "secrets", "update", "tenant-a"),
        attrs("", "secrets", "deletecollection", "tenant-a"),
        // ConfigMaps are applied, never replaced wholesale.
        attrs("", "configmaps", "update", "tenant-a"),
        attrs("", "configmaps", "deletecollection", "tenant-a"),
        // Namespaces are read, never changed.
        attrs("", "namespaces", "patch", ""),
        attrs("", "namespaces", "delete", ""),
        // Events of the old core API, and deleting events.
        attrs("", "events", "create", "tenant-a"),
        attrs("events.k8s.io", "events", "delete", "tenant-a"),
        // Only its own Lease, only in the release namespace, never deleted.
        named(
            "coordination.k8s.io",
            "leases",
            "patch",
            release,
            "kube-scheduler",
        ),
        named(
            "coordination.k8s.io",
            "leases",
            "get",
            release,
            "someone-else",
        ),
        attrs("coordination.k8s.io", "leases", "list", release),
        named("coordination.k8s.io", "leases", "delete", release, &lease),
        attrs("coordination.k8s.io", "leases", "create", "kube-system"),
        named(
            "coordination.k8s.io",
            "leases",
            "patch",
            "kube-system",
            &lease,
        ),
        // Only its own webhook configuration; pods are never touched (the webhook answers
        // the apiserver, it writes no pod) nor read one by one (the opted-in ones are watched
        // by metadata).
        named(
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            "update",
            "",
            "someone-elses",
        ),
        attrs(
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            "create",
            "",
        ),
        attrs("", "pods", "patch", "tenant-a"),
        // Pods are listed and watched (a stdio server's, to say why it does not serve;
        // opted-in agent pods, to count those out of date) and read one by one by the webhook
        // (the pod an exec names): never changed or exec'd into.
        attrs("", "pods", "delete", "tenant-a"),
        attrs("", "pods/exec", "create", "tenant-a"),
        // It asks about others' rights; it holds none of them: no pin approval of its own.
        attrs(mcp, "mcpservers/approval", "approve", "tenant-a"),
        // Nothing else at all.
        attrs("", "pods/log", "get", "tenant-a"),
        attrs("", "services", "list", "tenant-a"),
        attrs("apps", "deployments", "update", "tenant-a"),
        attrs("", "serviceaccounts/token", "create", release),
        attrs("rbac.authorization.k8s.io", "clusterroles", "escalate", ""),
        attrs(
            "rbac.authorization.k8s.io",
            "rolebindings",
            "create",
            release,
        ),
        attrs(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "create",
            "",
        ),
    ];
    for a in refused {
        assert!(
            !may(&client, &user, a.clone()).await,
            "{user} must not: {a}"
        );
    }
}

/// Every object the chart renders with its defaults is accepted by the apiserver as written
/// (server-side dry run, unknown fields refused): the Deployment, Services,
/// PodDisruptionBudget, ServiceAccount, roles and bindings, the Mutating- and
/// ValidatingWebhookConfiguration, and the `helm test` hook's Pod.
#[tokio::test]
async fn every_rendered_object_is_accepted_by_the_apiserver() {
    let (client, ns) = e2e::setup("chart-objects").await;
    let objects = render(ns.name(), ns.name(), &[]);
    let kinds: BTreeSet<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "MutatingWebhookConfiguration",
            "Pod",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
            // Its entries, the Secret guard's matchConditions (CEL, compiled by the
            // apiserver) among them.
            "ValidatingWebhookConfiguration",
            // The status guard (CEL, compiled by the apiserver).
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ])
    );
    for object in &objects {
        e2e::write(
            &client,
            e2e::Write::ServerSideApply,
            object,
            Some(ns.name()),
            true,
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the apiserver refused the chart's {} {}: {}",
                object["kind"],
                object["metadata"]["name"],
                e2e::describe(&e)
            )
        });
    }
}
