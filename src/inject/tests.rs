use super::*;
use proptest::prelude::*;

fn endpoint(value: Value) -> Endpoint {
    let mut base = json!({
        "url": "https://mcp.example/mcp",
        "transport": "streamable-http",
        "connectTimeoutMs": 1000,
        "callTimeoutMs": 1000,
        "retry": 1,
    });
    base.as_object_mut()
        .unwrap()
        .extend(value.as_object().unwrap().clone());
    serde_json::from_value(base).unwrap()
}

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn agent_pod() -> Pod {
    pod(json!({
        "metadata": {"name": "bot", "labels": {AGENT_LABEL: "bot"}},
        "spec": {"containers": [{"name": "agent", "image": "agent:1"}]},
    }))
}

pub(super) fn trust() -> GrantsTrust {
    use std::sync::OnceLock;
    // One keyring for every test: the same pod gets the same patch.
    static KEYS: OnceLock<VerifyingKeys> = OnceLock::new();
    GrantsTrust {
        verify_keys: KEYS
            .get_or_init(|| crate::grants::signature::Keyring::generate().verifying_keys())
            .clone(),
        namespace: "team-a".into(),
        uid: "uid-bot".into(),
        min_sequence: Some(1000),
    }
}

fn settings() -> SidecarSettings {
    SidecarSettings::with_image("mcp-operator:test")
}

/// The pod after the outcome's patch, as the apiserver would apply it.
fn admitted(pod: &Pod, outcome: &Outcome) -> Pod {
    let mut doc = serde_json::to_value(pod).unwrap();
    if let Outcome::Inject(patch) = outcome {
        json_patch::patch(&mut doc, patch).expect("the patch applies to the pod it was made for");
    }
    serde_json::from_value(doc).expect("the patched pod is still a pod")
}

fn inject(pod: &Pod, refs: &References) -> Pod {
    let outcome = decide(pod, "bot", "bot-mcp-grants", refs, &trust(), &settings()).unwrap();
    admitted(pod, &outcome)
}

fn sidecar(pod: &Pod) -> &Container {
    pod.spec
        .as_ref()
        .unwrap()
        .init_containers
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.name == SIDECAR_CONTAINER)
        .unwrap()
}

fn volume<'p>(pod: &'p Pod, name: &str) -> Option<&'p Volume> {
    pod.spec
        .as_ref()
        .unwrap()
        .volumes
        .as_ref()?
        .iter()
        .find(|v| v.name == name)
}

/// The files the projected volume lays out, as `kind/name/key` paths, checked against the
/// key each item projects.
fn projected_paths(pod: &Pod) -> Vec<String> {
    let Some(v) = volume(pod, CREDENTIALS_VOLUME) else {
        return vec![];
    };
    let mut out = Vec::new();
    for source in v.projected.as_ref().unwrap().sources.as_ref().unwrap() {
        let (dir, name, items) = match (&source.secret, &source.config_map) {
            (Some(s), None) => ("secrets", &s.name, s.items.as_ref().unwrap()),
            (None, Some(c)) => ("configmaps", &c.name, c.items.as_ref().unwrap()),
            other => panic!("unexpected projection {other:?}"),
        };
        for item in items {
            assert_eq!(item.path, format!("{dir}/{name}/{}", item.key));
            out.push(item.path.clone());
        }
    }
    out.sort();
    out
}

#[test]
fn a_labelled_pod_gets_a_native_sidecar_that_gates_the_agent() {
    let refs = References::of(&[endpoint(
        json!({"bearerToken": {"name": "tok", "key": "token"}}),
    )]);
    let pod = inject(&agent_pod(), &refs);
    let spec = pod.spec.as_ref().unwrap();
    let init = spec.init_containers.as_ref().unwrap();
    assert_eq!(init[0].name, SIDECAR_CONTAINER, "the sidecar starts first");
    let sc = &init[0];
    assert_eq!(sc.restart_policy.as_deref(), Some("Always"));
    assert_eq!(sc.image.as_deref(), Some("mcp-operator:test"));
    let startup = sc.startup_probe.as_ref().unwrap();
    assert_eq!(
        startup.http_get.as_ref().unwrap().path.as_deref(),
        Some("/readyz")
    );
    let args = sc.args.as_ref().unwrap();
    assert_eq!(args[0], "sidecar");
    assert!(args.contains(&"--agent=bot".to_string()));
    assert!(args.contains(&format!("--grants-file={GRANTS_DIR}/grants.json")));
    assert!(args.contains(&format!("--credentials-dir={CREDENTIALS_DIR}")));
    assert!(args.contains(&"--listen=127.0.0.1:9500".to_string()));
    assert!(args.contains(&"--mounted-credentials=secrets/tok/token".to_string()));
    // The sidecar obeys only grants signed for this AgentSpec, by the keyring's two keys.
    let keys = trust().verify_keys.to_arg();
    assert_eq!(keys.split(',').count(), 2);
    assert!(args.contains(&format!("--grants-verify-keys={keys}")));
    assert!(args.contains(&"--agent-namespace=team-a".to_string()));
    assert!(args.contains(&"--agent-uid=uid-bot".to_string()));
    assert!(args.contains(&format!("--state-dir={STATE_DIR}")));
    // No signed document older than the one the AgentSpec's status says is published.
    assert!(args.contains(&"--grants-min-sequence=1000".to_string()));
    let state = volume(&pod, STATE_VOLUME).expect("the state volume");
    assert!(state.empty_dir.is_some());
    let state_mounts: Vec<&str> = sc
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .filter(|m| m.name == STATE_VOLUME)
        .map(|m| m.mount_path.as_str())
        .collect();
    assert_eq!(state_mounts, [STATE_DIR]);
    for c in &spec.containers {
        assert!(
            c.volume_mounts
                .iter()
                .flatten()
                .all(|m| m.name != STATE_VOLUME),
            "only the sidecar mounts its state"
        );
    }
    let security = sc.security_context.as_ref().unwrap();
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(
        security.capabilities.as_ref().unwrap().drop,
        Some(vec!["ALL".into()])
    );
    assert!(sc.resources.as_ref().unwrap().limits.is_some());
    let grants = volume(&pod, GRANTS_VOLUME)
        .unwrap()
        .config_map
        .clone()
        .unwrap();
    assert_eq!(grants.name, "bot-mcp-grants");
    assert_eq!(grants.optional, Some(false));
    let env = spec.containers[0].env.as_ref().unwrap();
    assert_eq!(
        env.iter()
            .find(|e| e.name == SERVER_URL_ENV)
            .unwrap()
            .value
            .as_deref(),
        Some("http://127.0.0.1:9500/mcp")
    );
    assert_eq!(
        pod.metadata.annotations.as_ref().unwrap()[INJECTED_ANNOTATION],
        "bot"
    );
    assert_eq!(projected_paths(&pod), vec!["secrets/tok/token"]);
}

#[test]
fn the_projected_volume_holds_exactly_the_referenced_keys() {
    let refs = References::of(&[
        endpoint(json!({
            "bearerToken": {"name": "tok", "key": "token"},
            "headers": [{"name": "X-Key", "secretKeyRef": {"name": "tok", "key": "api-key"}},
                        {"name": "X-Other", "secretKeyRef": {"name": "other", "key": "v"}}],
            "tls": {"caBundleConfigMap": {"name": "ca", "key": "ca.crt"}},
        })),
        endpoint(json!({
            "bearerToken": {"name": "tok", "key": "token"},
            "tls": {"caBundleSecret": {"name": "ca", "key": "bundle.pem"}},
        })),
        endpoint(json!({})),
    ]);
    let pod = inject(&agent_pod(), &refs);
    assert_eq!(
        projected_paths(&pod),
        vec![
            "configmaps/ca/ca.crt",
            "secrets/ca/bundle.pem",
            "secrets/other/v",
            "secrets/tok/api-key",
            "secrets/tok/token",
        ]
    );
    assert_eq!(projected_paths(&pod), {
        let mut p = refs.paths();
        p.sort();
        p
    });
    let mounts = sidecar(&pod).volume_mounts.as_ref().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m.name == CREDENTIALS_VOLUME && m.mount_path == CREDENTIALS_DIR)
    );
}

#[test]
fn grants_without_credentials_mount_no_credentials_volume() {
    let pod = inject(&agent_pod(), &References::of(&[endpoint(json!({}))]));
    assert!(volume(&pod, CREDENTIALS_VOLUME).is_none());
    assert!(
        sidecar(&pod)
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .all(|m| m.name != CREDENTIALS_VOLUME)
    );
}

#[test]
fn re_admission_does_not_inject_twice() {
    let first = inject(&agent_pod(), &References::default());
    assert!(is_injected(&first));
    let again = decide(
        &first,
        "bot",
        "bot-mcp-grants",
        &References::default(),
        &trust(),
        &settings(),
    )
    .unwrap();
    assert_eq!(again, Outcome::AlreadyInjected);
}

#[test]
fn an_agent_container_keeps_its_own_server_url_and_other_fields() {
    let pod = pod(json!({
        "metadata": {"labels": {AGENT_LABEL: "bot"}, "annotations": {"keep": "me"}},
        "spec": {
            "initContainers": [{"name": "setup", "image": "busybox"}],
            "containers": [
                {"name": "a", "image": "a", "env": [{"name": SERVER_URL_ENV, "value": "http://mine/mcp"}]},
                {"name": "b", "image": "b", "env": [{"name": "OTHER", "value": "x"}]},
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }));
    let out = inject(&pod, &References::default());
    let spec = out.spec.as_ref().unwrap();
    let init: Vec<&str> = spec
        .init_containers
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(init, vec![SIDECAR_CONTAINER, "setup"]);
    let url = |c: &Container| {
        c.env
            .as_ref()
            .unwrap()
            .iter()
            .filter(|e| e.name == SERVER_URL_ENV)
            .map(|e| e.value.clone().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(url(&spec.containers[0]), vec!["http://mine/mcp"]);
    assert_eq!(url(&spec.containers[1]), vec!["http://127.0.0.1:9500/mcp"]);
    assert_eq!(spec.containers[1].env.as_ref().unwrap()[0].name, "OTHER");
    let volumes: Vec<&str> = spec
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(volumes, vec!["data", GRANTS_VOLUME, STATE_VOLUME]);
    let annotations = out.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations["keep"], "me");
    assert_eq!(annotations[INJECTED_ANNOTATION], "bot");
    assert_eq!(annotations[MOUNTS_ANNOTATION], "", "nothing projected");
}

#[test]
fn the_pod_records_what_it_mounts_and_no_value() {
    let refs = References::of(&[endpoint(json!({
        "bearerToken": {"name": "tok", "key": "token"},
        "tls": {"caBundleConfigMap": {"name": "ca", "key": "ca.crt"}},
    }))]);
    let pod = inject(&agent_pod(), &refs);
    let recorded = &pod.metadata.annotations.as_ref().unwrap()[MOUNTS_ANNOTATION];
    assert_eq!(recorded, "secrets/tok/token,configmaps/ca/ca.crt");
    // The same files the projected volume holds and the sidecar is told it mounts.
    let mut listed: Vec<String> = recorded.split(',').map(String::from).collect();
    listed.sort();
    assert_eq!(listed, projected_paths(&pod));
    assert!(
        sidecar(&pod)
            .args
            .as_ref()
            .unwrap()
            .contains(&format!("--mounted-credentials={recorded}"))
    );
    // Admitted as it is, the pod is up to date with the grants it was admitted for.
    let d = drift("bot", &refs, [&pod.metadata]);
    assert_eq!((d.injected, d.out_of_date.len()), (1, 0));
}

#[test]
fn refusals_name_what_is_wrong() {
    let empty = pod(json!({"metadata": {"labels": {AGENT_LABEL: ""}}}));
    assert_eq!(agent_of(&empty), Some(Err(Refusal::EmptyLabel)));
    assert_eq!(agent_of(&agent_pod()), Some(Ok("bot")));
    assert_eq!(agent_of(&pod(json!({"metadata": {}}))), None);

    let unknown = Refusal::UnknownAgentSpec {
        agent: "ghost".into(),
        namespace: "team-a".into(),
    }
    .to_string();
    assert!(
        unknown.contains("\"ghost\"") && unknown.contains("team-a"),
        "{unknown}"
    );

    let taken = pod(json!({
        "metadata": {"labels": {AGENT_LABEL: "bot"}},
        "spec": {"containers": [{"name": "a"}], "volumes": [{"name": GRANTS_VOLUME, "emptyDir": {}}]},
    }));
    let err = decide(
        &taken,
        "bot",
        "bot-mcp-grants",
        &References::default(),
        &trust(),
        &settings(),
    )
    .unwrap_err();
    assert!(err.to_string().contains(GRANTS_VOLUME), "{err}");

    let dotdot = References::of(&[endpoint(
        json!({"bearerToken": {"name": "tok", "key": ".."}}),
    )]);
    let err = decide(
        &agent_pod(),
        "bot",
        "bot-mcp-grants",
        &dotdot,
        &trust(),
        &settings(),
    )
    .unwrap_err();
    assert!(matches!(err, Refusal::UnmountableKey { .. }), "{err}");
}

#[test]
fn chart_values_deserialise_and_unknown_ones_are_refused() {
    let s: SidecarSettings = serde_json::from_value(json!({
        "image": "img:1", "port": 9600, "resources": {"limits": {"memory": "64Mi"}},
        "securityContext": {"runAsUser": 1000}, "extraArgs": ["--refresh-interval=30s"],
    }))
    .unwrap();
    assert_eq!(s.server_url(), "http://127.0.0.1:9600/mcp");
    let pod = {
        let outcome = decide(
            &agent_pod(),
            "bot",
            "bot-mcp-grants",
            &References::default(),
            &trust(),
            &s,
        )
        .unwrap();
        admitted(&agent_pod(), &outcome)
    };
    let sc = sidecar(&pod);
    assert_eq!(
        sc.security_context.as_ref().unwrap().run_as_user,
        Some(1000)
    );
    assert!(
        sc.args
            .as_ref()
            .unwrap()
            .contains(&"--refresh-interval=30s".into())
    );
    assert!(serde_json::from_value::<SidecarSettings>(json!({"image": "x", "prot": 1})).is_err());
}

#[test]
fn the_charts_response_budget_reaches_the_injected_sidecar() {
    let injected_args = |s: &SidecarSettings| {
        let outcome = decide(
            &agent_pod(),
            "bot",
            "bot-mcp-grants",
            &References::default(),
            &trust(),
            s,
        )
        .unwrap();
        sidecar(&admitted(&agent_pod(), &outcome))
            .args
            .clone()
            .unwrap()
    };
    let budgeted: SidecarSettings =
        serde_json::from_value(json!({"image": "img:1", "responseBudget": 33554432})).unwrap();
    let args = injected_args(&budgeted);
    assert_eq!(
        args.iter()
            .filter(|a| a.starts_with("--response-budget="))
            .collect::<Vec<_>>(),
        ["--response-budget=33554432"]
    );
    // Unset: the sidecar's own default, no flag.
    let args = injected_args(&settings());
    assert!(
        !args.iter().any(|a| a.starts_with("--response-budget")),
        "{args:?}"
    );
}

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,6}"
}

fn key() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_][-._a-zA-Z0-9]{0,6}"
}

fn selector() -> impl Strategy<Value = Value> {
    (name(), key()).prop_map(|(n, k)| json!({"name": n, "key": k}))
}

fn endpoints() -> impl Strategy<Value = Vec<Endpoint>> {
    let one = (
        proptest::option::of(selector()),
        proptest::collection::vec(selector(), 0..3),
        proptest::option::of(selector()),
        proptest::option::of(selector()),
    )
        .prop_map(|(bearer, headers, ca_secret, ca_cm)| {
            let headers: Vec<Value> = headers
                .into_iter()
                .enumerate()
                .map(|(i, s)| json!({"name": format!("X-H{i}"), "secretKeyRef": s}))
                .collect();
            let mut v = json!({"headers": headers});
            if let Some(b) = bearer {
                v["bearerToken"] = b;
            }
            v["tls"] = json!({});
            if let Some(s) = ca_secret {
                v["tls"]["caBundleSecret"] = s;
            }
            if let Some(c) = ca_cm {
                v["tls"]["caBundleConfigMap"] = c;
            }
            endpoint(v)
        });
    proptest::collection::vec(one, 0..4)
}

/// Random pods: some with init containers, volumes, env and annotations of their own.
fn pods() -> impl Strategy<Value = Pod> {
    (
        proptest::collection::vec((name(), any::<bool>(), any::<bool>()), 1..4),
        proptest::collection::vec(name(), 0..3),
        proptest::option::of(proptest::collection::vec(name(), 0..3)),
        any::<bool>(),
    )
        .prop_map(|(containers, init, volumes, annotated)| {
            let containers: Vec<Value> = containers
                .into_iter()
                .enumerate()
                .map(|(i, (n, has_env, own_url))| {
                    let mut c = json!({"name": format!("{n}-{i}"), "image": "x"});
                    if has_env {
                        let mut env = vec![json!({"name": "A", "value": "1"})];
                        if own_url {
                            env.push(json!({"name": SERVER_URL_ENV, "value": "http://own/mcp"}));
                        }
                        c["env"] = json!(env);
                    }
                    c
                })
                .collect();
            let mut spec = json!({"containers": containers});
            if !init.is_empty() {
                spec["initContainers"] = init
                    .iter()
                    .enumerate()
                    .map(|(i, n)| json!({"name": format!("init-{n}-{i}")}))
                    .collect();
            }
            if let Some(v) = volumes {
                spec["volumes"] = v
                    .iter()
                    .enumerate()
                    .map(|(i, n)| json!({"name": format!("v-{n}-{i}"), "emptyDir": {}}))
                    .collect();
            }
            let mut meta = json!({"labels": {AGENT_LABEL: "bot"}});
            if annotated {
                meta["annotations"] = json!({"a": "b"});
            }
            pod(json!({"metadata": meta, "spec": spec}))
        })
}

proptest! {
    /// Whatever the pod: the patch applies, adds exactly one sidecar first, exactly the
    /// referenced keys, one MCP_SERVER_URL per container (its own if it had one), keeps every
    /// container and volume it had, and a second admission adds nothing.
    #[test]
    fn injection_is_exact_and_idempotent(pod in pods(), eps in endpoints()) {
        let refs = References::of(&eps);
        let out = inject(&pod, &refs);
        let before = pod.spec.as_ref().unwrap();
        let after = out.spec.as_ref().unwrap();
        let init = after.init_containers.as_ref().unwrap();
        prop_assert_eq!(&init[0].name, SIDECAR_CONTAINER);
        prop_assert_eq!(init.iter().filter(|c| c.name == SIDECAR_CONTAINER).count(), 1);
        prop_assert_eq!(&init[1..], before.init_containers.as_deref().unwrap_or_default());
        let mut expected = refs.paths();
        expected.sort();
        prop_assert_eq!(projected_paths(&out), expected);
        let old_volumes = before.volumes.clone().unwrap_or_default();
        let new_volumes = after.volumes.clone().unwrap();
        prop_assert_eq!(&new_volumes[..old_volumes.len()], &old_volumes[..]);
        prop_assert_eq!(new_volumes.len(), old_volumes.len() + 2 + usize::from(!refs.is_empty()));
        prop_assert_eq!(after.containers.len(), before.containers.len());
        for (b, a) in before.containers.iter().zip(&after.containers) {
            let env = a.env.clone().unwrap();
            let urls: Vec<_> = env.iter().filter(|e| e.name == SERVER_URL_ENV).collect();
            prop_assert_eq!(urls.len(), 1);
            let own = b.env.as_ref().and_then(|e| e.iter().find(|e| e.name == SERVER_URL_ENV));
            match own {
                Some(own) => prop_assert_eq!(urls[0], own),
                None => prop_assert_eq!(urls[0].value.as_deref(), Some("http://127.0.0.1:9500/mcp")),
            }
            let old_env = b.env.clone().unwrap_or_default();
            prop_assert_eq!(&env[..old_env.len()], &old_env[..]);
        }
        let again = decide(&out, "bot", "bot-mcp-grants", &refs, &trust(), &settings()).unwrap();
        prop_assert_eq!(again, Outcome::AlreadyInjected);
    }
}

/// The sidecar of a pod injected with these settings.
fn injected_sidecar(s: &SidecarSettings) -> Container {
    let outcome = decide(
        &agent_pod(),
        "bot",
        "bot-mcp-grants",
        &References::default(),
        &trust(),
        s,
    )
    .unwrap();
    sidecar(&admitted(&agent_pod(), &outcome)).clone()
}

fn env_value<'c>(c: &'c Container, name: &str) -> Option<&'c EnvVar> {
    c.env.iter().flatten().find(|e| e.name == name)
}

#[test]
fn the_charts_telemetry_reaches_the_injected_sidecar_as_the_otel_environment() {
    let traced: SidecarSettings = serde_json::from_value(json!({
        "image": "img:1",
        "traces": {
            "endpoint": "http://otel-collector.observability:4318",
            "headersSecret": {"name": "otlp-auth", "key": "headers"},
            "sampler": "parentbased_traceidratio", "samplerArg": "0.25",
            "resourceAttributes": "deployment.environment=prod",
        },
    }))
    .unwrap();
    traced.traces.as_ref().unwrap().check().unwrap();
    let sc = injected_sidecar(&traced);
    let value = |name| env_value(&sc, name).and_then(|e| e.value.as_deref());
    assert_eq!(
        value("OTEL_EXPORTER_OTLP_ENDPOINT"),
        Some("http://otel-collector.observability:4318")
    );
    assert_eq!(value("OTEL_EXPORTER_OTLP_PROTOCOL"), Some("http/protobuf"));
    assert_eq!(
        value("OTEL_TRACES_SAMPLER"),
        Some("parentbased_traceidratio")
    );
    assert_eq!(value("OTEL_TRACES_SAMPLER_ARG"), Some("0.25"));
    assert_eq!(
        value("OTEL_RESOURCE_ATTRIBUTES"),
        Some(
            "k8s.namespace.name=team-a,k8s.pod.name=$(MCP_SIDECAR_POD_NAME),mcp_operator.agent=bot,deployment.environment=prod"
        )
    );
    assert_eq!(value("RUST_LOG"), Some("info"));
    // The headers stay in the Secret: the kubelet reads them, the pod spec names the key only.
    let headers = env_value(&sc, "OTEL_EXPORTER_OTLP_HEADERS").unwrap();
    assert_eq!(headers.value, None);
    let from = headers
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        (from.name.as_str(), from.key.as_str(), from.optional),
        ("otlp-auth", "headers", Some(true))
    );
    // $(MCP_SIDECAR_POD_NAME) expands only a variable defined before it.
    let names: Vec<&str> = sc.env.iter().flatten().map(|e| e.name.as_str()).collect();
    let pos = |n| names.iter().position(|x| *x == n).unwrap();
    assert!(pos("MCP_SIDECAR_POD_NAME") < pos("OTEL_RESOURCE_ATTRIBUTES"));
    let field = env_value(&sc, "MCP_SIDECAR_POD_NAME")
        .unwrap()
        .value_from
        .as_ref()
        .unwrap()
        .field_ref
        .clone()
        .unwrap();
    assert_eq!(field.field_path, "metadata.name");
    assert_eq!(
        field.api_version.as_deref(),
        Some("v1"),
        "as the apiserver defaults it"
    );

    // The agent's containers get none of it: only the sidecar exports.
    let pod = {
        let outcome = decide(
            &agent_pod(),
            "bot",
            "bot-mcp-grants",
            &References::default(),
            &trust(),
            &traced,
        )
        .unwrap();
        admitted(&agent_pod(), &outcome)
    };
    let agent_env = pod.spec.as_ref().unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    assert!(agent_env.iter().all(|e| !e.name.starts_with("OTEL_")));
    // The injected sidecar is the one validation expects (re-admission keeps it).
    assert_eq!(
        decide(
            &pod,
            "bot",
            "bot-mcp-grants",
            &References::default(),
            &trust(),
            &traced
        ),
        Ok(Outcome::AlreadyInjected)
    );
}

#[test]
fn without_telemetry_the_sidecar_gets_no_otel_environment() {
    let sc = injected_sidecar(&settings());
    let names: Vec<&str> = sc.env.iter().flatten().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["RUST_LOG"]);
    // Optional fields stay unset: the sidecar's defaults (and no headers) apply.
    let minimal: SidecarSettings = serde_json::from_value(
        json!({"image": "img:1", "traces": {"endpoint": "https://otlp.example:4318"}}),
    )
    .unwrap();
    let sc = injected_sidecar(&minimal);
    assert!(env_value(&sc, "OTEL_EXPORTER_OTLP_HEADERS").is_none());
    assert!(env_value(&sc, "OTEL_TRACES_SAMPLER").is_none());
    assert!(env_value(&sc, "OTEL_EXPORTER_OTLP_ENDPOINT").is_some());
}

#[test]
fn telemetry_settings_that_would_export_nothing_are_refused() {
    let check = |traces: Value| {
        serde_json::from_value::<TraceExport>(traces)
            .map_err(|e| e.to_string())
            .and_then(|t| t.check())
    };
    assert!(check(json!({"endpoint": "http://c:4318"})).is_ok());
    let grpc = check(json!({"endpoint": "http://c:4317", "protocol": "grpc"})).unwrap_err();
    assert!(grpc.contains("http/protobuf only"), "{grpc}");
    assert!(check(json!({"endpoint": "c:4318"})).is_err());
    assert!(check(json!({"endpoint": "not a url"})).is_err());
    assert!(
        check(json!({"endpoint": "http://c:4318", "headersSecret": {"name": "", "key": "h"}}))
            .is_err()
    );
    assert!(check(json!({"endpoint": "http://c:4318", "sampler_arg": "1"})).is_err());
}
