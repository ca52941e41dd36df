//! The chart's `telemetry` values reaching an injected sidecar, on the real control plane (no
//! node: admission is what is judged, a pod the apiserver stores is admitted): the controller
//! with its webhook and `--sidecar` traces settings, the chart's injection and pod-validation
//! entries pointed at it, and a labelled pod. The pod validation compares the stored sidecar,
//! after the apiserver's defaulting, with the one the injection builds: the OTEL environment
//! must come through it unchanged.

use crate::e2e;
use crate::e2e_secret_guard::chart_entry;
use crate::operator::{self, Operator, eventually, server_manifest};

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{Api, ApiResource, Patch, PatchParams, PostParams};
use mcp_operator::api::agent_spec::AgentSpec;
use serde_json::{Value, json};

const SOON: Duration = Duration::from_secs(60);

/// The chart's webhook entry `name`, pointed at the local controller's `path`, for `namespace`.
fn entry(kind: &str, name: &str, port: u16, path: &str, namespace: &str) -> Value {
    let mut entry = chart_entry(kind, name);
    entry["clientConfig"] = json!({"url": format!("https://localhost:{port}{path}")});
    entry["namespaceSelector"] = json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}});
    entry
}

fn env<'c>(c: &'c Container, name: &str) -> &'c k8s_openapi::api::core::v1::EnvVar {
    c.env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("{name} in {:?}", c.env))
}

#[tokio::test]
async fn an_injected_sidecar_gets_the_charts_trace_settings_and_passes_pod_validation() {
    let (admin, ns) = e2e::setup("inject-traces").await;
    let namespace = ns.name().to_owned();
    let port = crate::support::free_port();
    let metrics_port = crate::support::free_port();
    let configuration = ns.scoped_name("traces");
    let sidecar = json!({"image": "mcp-e2e.local/operator:1", "traces": {
        "endpoint": "http://otel-collector.observability:4318",
        "headersSecret": {"name": "otlp-auth", "key": "headers"},
        "sampler": "parentbased_traceidratio", "samplerArg": "0.5",
    }})
    .to_string();
    let args = [
        "controller",
        "--watch-namespace",
        &namespace,
        "--identity",
        "op-traces",
        "--max-failure-backoff",
        "4s",
        "--metrics-addr",
        &format!("127.0.0.1:{metrics_port}"),
        "--webhook-addr",
        &format!("127.0.0.1:{port}"),
        "--webhook-service",
        "localhost",
        "--webhook-secret",
        "traces-webhook-tls",
        "--webhook-configuration",
        &configuration,
        "--sidecar",
        &sidecar,
    ]
    .map(String::from);
    // Both configurations exist before the controller starts: its caBundle keeper fills them.
    let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": configuration},
        "webhooks": [entry("MutatingWebhookConfiguration", "inject.mcp-operator.dev", port, "/inject", &namespace)],
    }))
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(admin.clone())
        .create(&PostParams::default(), &mutating)
        .await
        .unwrap();
    ns.delete_later(
        ApiResource::erase::<MutatingWebhookConfiguration>(&()),
        &configuration,
    );
    let validating: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": configuration},
        "webhooks": [entry("ValidatingWebhookConfiguration", "pods.validate.mcp-operator.dev", port, "/validate/pods", &namespace)],
    }))
    .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .create(&PostParams::default(), &validating)
        .await
        .unwrap();
    ns.delete_later(
        ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        &configuration,
    );
    let op = Operator::spawn(
        &e2e::kubeconfig_path().await,
        "op-traces",
        &args,
        &[],
        metrics_port,
    );
    operator::apply_server(
        &admin,
        &namespace,
        server_manifest("files", "https://mcp.example.com/mcp", json!({})),
    )
    .await;
    let agent: AgentSpec = serde_json::from_value(json!({
        "apiVersion": "mcp-operator.dev/v1alpha1", "kind": "AgentSpec",
        "metadata": {"name": "bot"}, "spec": {"servers": [{"name": "files"}]},
    }))
    .unwrap();
    Api::<AgentSpec>::namespaced(admin.clone(), &namespace)
        .create(&PostParams::default(), &agent)
        .await
        .unwrap();

    // A labelled pod: injected, then judged by the pod validation as stored (both Fail: it is
    // stored only once both answered).
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &namespace);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "agent", "labels": {"mcp-operator.dev/agent": "bot"}},
        "spec": {"automountServiceAccountToken": false,
                 "containers": [{"name": "agent", "image": "busybox:1"}]},
    }))
    .unwrap();
    let stored = eventually(SOON, "the labelled pod admitted", || async {
        pods.create(&PostParams::default(), &pod)
            .await
            .map_err(|e| format!("{}\n{}", e2e::describe(&e), op.log_text()))
    })
    .await;
    let spec = stored.spec.as_ref().unwrap();
    let sc = spec
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == "mcp-sidecar")
        .expect("the injected sidecar");
    let value = |name: &str| env(sc, name).value.clone().unwrap_or_default();
    assert_eq!(
        value("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "http://otel-collector.observability:4318"
    );
    assert_eq!(value("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf");
    assert_eq!(value("OTEL_TRACES_SAMPLER"), "parentbased_traceidratio");
    assert_eq!(value("OTEL_TRACES_SAMPLER_ARG"), "0.5");
    assert_eq!(
        value("OTEL_RESOURCE_ATTRIBUTES"),
        format!(
            "k8s.namespace.name={namespace},k8s.pod.name=$(MCP_SIDECAR_POD_NAME),mcp_operator.agent=bot"
        )
    );
    let headers = serde_json::to_value(&env(sc, "OTEL_EXPORTER_OTLP_HEADERS").value_from).unwrap();
    assert_eq!(
        headers,
        json!({"secretKeyRef": {"name": "otlp-auth", "key": "headers", "optional": true}})
    );
    let pod_name = serde_json::to_value(&env(sc, "MCP_SIDECAR_POD_NAME").value_from).unwrap();
    assert_eq!(
        pod_name,
        json!({"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}})
    );
    assert!(
        spec.containers[0]
            .env
            .iter()
            .flatten()
            .all(|e| !e.name.starts_with("OTEL_")),
        "the agent's own container gets no trace settings"
    );

    // The pod validation is live (it refuses what only it judges: the agent label changed),
    // so the CREATE above passed it.
    let relabel = pods
        .patch(
            "agent",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"mcp-operator.dev/agent": "other"}}})),
        )
        .await
        .expect_err("the label cannot change");
    assert!(
        e2e::describe(&relabel).contains("cannot be added, changed or removed"),
        "{}",
        e2e::describe(&relabel)
    );
    // And an update that leaves the sidecar alone is admitted.
    pods.patch(
        "agent",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"team": "a"}}})),
    )
    .await
    .unwrap_or_else(|e| panic!("an annotation on the agent pod: {}", e2e::describe(&e)));
}
