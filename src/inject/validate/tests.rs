use serde_json::json;

use super::*;
use crate::inject::tests::trust;
use crate::inject::{Outcome, decide};

fn settings() -> SidecarSettings {
    SidecarSettings::with_image("mcp-operator:test")
}

fn refs() -> References {
    let mut refs = References::default();
    refs.secrets
        .entry("github".into())
        .or_default()
        .insert("token".into());
    refs
}

fn expected() -> Container {
    expected_sidecar("bot", &refs(), &trust(), &settings())
}

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

/// A tenant's agent pod before admission, with `agent` as its container.
fn agent_pod(agent: Value) -> Pod {
    pod(json!({
        "metadata": {"name": "bot", "labels": {AGENT_LABEL: "bot"}},
        "spec": {"containers": [agent]},
    }))
}

/// The pod after the injection's patch.
fn injected(pod: &Pod) -> Pod {
    let Outcome::Inject(patch) =
        decide(pod, "bot", "bot-mcp-grants", &refs(), &trust(), &settings()).unwrap()
    else {
        panic!("a pod without a sidecar gets one");
    };
    let mut doc = serde_json::to_value(pod).unwrap();
    json_patch::patch(&mut doc, &patch).unwrap();
    serde_json::from_value(doc).unwrap()
}

fn plain_agent() -> Pod {
    injected(&agent_pod(json!({"name": "agent", "image": "agent:1"})))
}

/// What the apiserver does to the pod after the injection: defaulting, the ServiceAccount
/// token in every container, a LimitRange's default CPU limit.
fn as_stored(pod: &Pod) -> Pod {
    let mut doc = serde_json::to_value(pod).unwrap();
    let token = json!({
        "name": "kube-api-access-x7k2p",
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        "readOnly": true,
    });
    for list in ["initContainers", "containers"] {
        for c in doc["spec"][list].as_array_mut().unwrap() {
            c["terminationMessagePath"] = json!("/dev/termination-log");
            c["terminationMessagePolicy"] = json!("File");
            c["volumeMounts"]
                .as_array_mut()
                .map(|m| m.push(token.clone()))
                .unwrap_or_else(|| c["volumeMounts"] = json!([token.clone()]));
            c["resources"]["limits"]["cpu"] = json!("500m");
            for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
                if c.get(probe).is_some() {
                    c[probe]["successThreshold"] = json!(1);
                    c[probe]["httpGet"]["scheme"] = json!("HTTP");
                }
            }
        }
    }
    doc["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "kube-api-access-x7k2p", "projected": {"sources": []}}));
    serde_json::from_value(doc).unwrap()
}

fn with_sidecar(pod: &Pod, change: impl FnOnce(&mut Value)) -> Pod {
    let mut doc = serde_json::to_value(pod).unwrap();
    let sidecar = doc["spec"]["initContainers"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["name"] == SIDECAR_CONTAINER)
        .unwrap();
    change(sidecar);
    serde_json::from_value(doc).unwrap()
}

fn edited(pod: &Pod, change: impl FnOnce(&mut Value)) -> Pod {
    let mut doc = serde_json::to_value(pod).unwrap();
    change(&mut doc);
    serde_json::from_value(doc).unwrap()
}

#[test]
fn an_injected_pod_is_admitted_as_the_apiserver_stores_it() {
    let pod = plain_agent();
    assert_eq!(on_create(&pod, &expected()), Ok(()));
    assert_eq!(on_create(&as_stored(&pod), &expected()), Ok(()));
    // The injection's reinvocation (another webhook changed the pod) sees its own sidecar.
    assert_eq!(
        decide(
            &as_stored(&pod),
            "bot",
            "bot-mcp-grants",
            &refs(),
            &trust(),
            &settings()
        ),
        Ok(Outcome::AlreadyInjected)
    );
}

#[test]
fn the_agent_container_mounting_the_credentials_is_refused() {
    let pod = injected(&agent_pod(json!({
        "name": "agent",
        "image": "agent:1",
        "volumeMounts": [{"name": CREDENTIALS_VOLUME, "mountPath": "/creds", "readOnly": true}],
    })));
    let refusal = on_create(&pod, &expected()).unwrap_err();
    assert_eq!(
        refusal,
        Refusal::SidecarVolumeMounted {
            kind: "container",
            container: "agent".into(),
            volume: CREDENTIALS_VOLUME.into(),
        }
    );
    let message = refusal.to_string();
    assert!(
        message.contains("\"agent\"")
            && message.contains("only the MCP sidecar may mount")
            && message.contains("remove that volumeMount"),
        "{message}"
    );
}

#[test]
fn every_sidecar_volume_in_every_kind_of_container_is_refused() {
    for volume in SIDECAR_VOLUMES {
        let mount = json!([{"name": volume, "mountPath": "/x", "subPath": "grants.json"}]);
        let init = edited(&plain_agent(), |doc| {
            doc["spec"]["initContainers"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "setup", "image": "busybox", "volumeMounts": mount}));
        });
        assert_eq!(
            on_create(&init, &expected()),
            Err(Refusal::SidecarVolumeMounted {
                kind: "init container",
                container: "setup".into(),
                volume: volume.into(),
            })
        );
        // A second regular container, even one that takes the sidecar's name.
        let named_like_it = edited(&plain_agent(), |doc| {
            doc["spec"]["containers"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": SIDECAR_CONTAINER, "image": "evil", "volumeMounts": mount}));
        });
        assert_eq!(
            on_create(&named_like_it, &expected()),
            Err(Refusal::SidecarVolumeMounted {
                kind: "container",
                container: SIDECAR_CONTAINER.into(),
                volume: volume.into(),
            })
        );
    }
}

/// One change a tenant makes to a copy of the operator's sidecar.
type SidecarChange = fn(&mut Value);

#[test]
fn a_pod_bringing_its_own_sidecar_is_refused_by_the_injection() {
    let real = expected();
    let own = |change: fn(&mut Value)| {
        let mut sidecar = serde_json::to_value(&real).unwrap();
        change(&mut sidecar);
        pod(json!({
            "metadata": {"labels": {AGENT_LABEL: "bot"}},
            "spec": {
                "initContainers": [sidecar],
                "containers": [{"name": "agent", "image": "agent:1"}],
            },
        }))
    };
    let cases: [(SidecarChange, &str); 8] = [
        (|c| c["image"] = json!("evil/sidecar:1"), "image"),
        (
            |c| c["command"] = json!(["/bin/sh", "-c", "cat /var/run/mcp-operator/credentials/*"]),
            "command",
        ),
        (
            |c| {
                c["args"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!("--listen=0.0.0.0:9500"))
            },
            "args",
        ),
        (
            |c| {
                c["env"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "X", "value": "y"}))
            },
            "env",
        ),
        (
            |c| c["securityContext"]["privileged"] = json!(true),
            "securityContext",
        ),
        (
            |c| c["lifecycle"] = json!({"postStart": {"exec": {"command": ["cp", "-r", "/var/run/mcp-operator", "/shared"]}}}),
            "lifecycle",
        ),
        (
            // Another ConfigMap where the sidecar reads its grants.
            |c| {
                c["volumeMounts"].as_array_mut().unwrap().push(json!({
                    "name": "mine", "mountPath": "/var/run/mcp-operator/grants/grants.json",
                    "subPath": "grants.json", "readOnly": true,
                }))
            },
            "volumeMounts",
        ),
        (
            |c| c["envFrom"] = json!([{"secretRef": {"name": "other"}}]),
            "envFrom",
        ),
    ];
    for (change, field) in cases {
        let refused = decide(
            &own(change),
            "bot",
            "bot-mcp-grants",
            &refs(),
            &trust(),
            &settings(),
        );
        assert_eq!(
            refused,
            Err(Refusal::OwnSidecar {
                field: field.into()
            }),
            "a sidecar whose {field} is changed"
        );
        // ...and by validation, should a later mutation make it so.
        let stored = with_sidecar(&plain_agent(), change);
        assert_eq!(
            on_create(&stored, &expected()),
            Err(Refusal::OwnSidecar {
                field: field.into()
            })
        );
    }
    let message = Refusal::OwnSidecar {
        field: "image".into(),
    }
    .to_string();
    assert!(
        message.contains("the mcp-sidecar container is the operator's; remove it"),
        "{message}"
    );
}

#[test]
fn the_sidecar_of_other_grants_is_not_the_one_for_these() {
    // Built for an AgentSpec without credentials: its mounts and arguments differ.
    let other = expected_sidecar("bot", &References::default(), &trust(), &settings());
    assert_eq!(sidecar_difference(&other, &expected()), Some("args".into()));
    let other_agent = expected_sidecar("admin-bot", &refs(), &trust(), &settings());
    assert_eq!(
        sidecar_difference(&other_agent, &expected()),
        Some("args".into())
    );
    assert_eq!(sidecar_difference(&expected(), &expected()), None);
}

#[test]
fn the_min_sequence_behind_is_raised_by_the_injection_and_admitted_by_the_validations() {
    let with = |min: Option<u64>| {
        let mut t = trust();
        t.min_sequence = min;
        expected_sidecar("bot", &refs(), &t, &settings())
    };
    // Published (again) since the pod was admitted, or lowered by hand: alike for the
    // validations (a pod created with its AgentSpec races the first publication), behind for
    // the injection, which every labelled pod passes first and which raises it.
    for behind in [with(Some(999)), with(None)] {
        assert_eq!(sidecar_difference(&behind, &expected()), None);
        assert!(floor_behind(&behind, &expected()));
        let mut pod = plain_agent();
        pod.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[0] = behind.clone();
        let Outcome::Inject(patch) = decide(
            &pod,
            "bot",
            "bot-mcp-grants",
            &refs(),
            &trust(),
            &settings(),
        )
        .unwrap() else {
            panic!("the injection raises a floor that is behind");
        };
        let mut doc = serde_json::to_value(&pod).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
        let raised: Pod = serde_json::from_value(doc).unwrap();
        let sidecar = &raised.spec.unwrap().init_containers.unwrap()[0];
        assert_eq!(sidecar_difference(sidecar, &expected()), None);
        assert!(!floor_behind(sidecar, &expected()));
    }
    // Higher only ever refuses more: a pod admitted a moment before a reinvocation keeps it.
    assert_eq!(sidecar_difference(&with(Some(1001)), &expected()), None);
    assert!(!floor_behind(&with(Some(1001)), &expected()));
    // Before the status names a sequence, the injection sets none; a pod with one is alike.
    assert_eq!(sidecar_difference(&with(Some(5)), &with(None)), None);
    assert_eq!(sidecar_difference(&with(None), &with(None)), None);
    // Any other argument changed alongside is still a difference.
    let mut changed = with(Some(1001));
    changed
        .args
        .as_mut()
        .unwrap()
        .push("--listen=0.0.0.0:9500".into());
    assert_eq!(
        sidecar_difference(&changed, &expected()),
        Some("args".into())
    );
}

#[test]
fn host_networking_and_shared_processes_are_refused() {
    let host = edited(&plain_agent(), |d| d["spec"]["hostNetwork"] = json!(true));
    let refusal = on_create(&host, &expected()).unwrap_err();
    assert_eq!(refusal, Refusal::HostNetwork);
    assert!(refusal.to_string().contains("remove hostNetwork"));
    for field in ["hostPID", "shareProcessNamespace"] {
        let shared = edited(&plain_agent(), |d| d["spec"][field] = json!(true));
        assert_eq!(
            on_create(&shared, &expected()),
            Err(Refusal::SharedProcesses { field })
        );
    }
    // The injection refuses them before it adds anything.
    let bare = edited(
        &agent_pod(json!({"name": "agent", "image": "agent:1"})),
        |d| d["spec"]["hostNetwork"] = json!(true),
    );
    assert_eq!(
        decide(
            &bare,
            "bot",
            "bot-mcp-grants",
            &refs(),
            &trust(),
            &settings()
        ),
        Err(Refusal::HostNetwork)
    );
    // Said false is no different from not said.
    let off = edited(&plain_agent(), |d| {
        d["spec"]["hostNetwork"] = json!(false);
        d["spec"]["shareProcessNamespace"] = json!(false);
    });
    assert_eq!(on_create(&off, &expected()), Ok(()));
}

#[test]
fn a_labelled_pod_without_the_sidecar_is_refused() {
    let bare = agent_pod(json!({"name": "agent", "image": "agent:1"}));
    assert_eq!(on_create(&bare, &expected()), Err(Refusal::MissingSidecar));
}

#[test]
fn the_agent_label_stays_as_the_pod_was_created() {
    let pod = as_stored(&plain_agent());
    let relabelled = |value: Option<&str>| {
        edited(&pod, |d| match value {
            Some(v) => d["metadata"]["labels"][AGENT_LABEL] = json!(v),
            None => {
                d["metadata"]["labels"]
                    .as_object_mut()
                    .unwrap()
                    .remove(AGENT_LABEL);
            }
        })
    };
    assert_eq!(
        on_update(&pod, &relabelled(None)),
        Err(Refusal::LabelChanged {
            was: Some("bot".into()),
            now: None
        })
    );
    assert_eq!(
        on_update(&pod, &relabelled(Some("admin-bot"))),
        Err(Refusal::LabelChanged {
            was: Some("bot".into()),
            now: Some("admin-bot".into())
        })
    );
    // Added to a pod that was never injected: it would pass for an agent (NetworkPolicies
    // admit agent-labelled pods) without a sidecar.
    assert_eq!(
        on_update(&relabelled(None), &pod),
        Err(Refusal::LabelChanged {
            was: None,
            now: Some("bot".into())
        })
    );
    let annotated = edited(&pod, |d| d["metadata"]["annotations"]["note"] = json!("x"));
    assert_eq!(on_update(&pod, &annotated), Ok(()));
    assert!(
        on_update(&pod, &relabelled(None))
            .unwrap_err()
            .to_string()
            .contains("(it was \"bot\", the update makes it absent): the sidecar is injected, or not, when the pod is created; delete the pod and create it with the label you want")
    );
}

#[test]
fn the_sidecar_image_cannot_be_changed_but_the_agent_image_can() {
    let pod = as_stored(&plain_agent());
    let swapped = with_sidecar(&pod, |c| c["image"] = json!("evil/sidecar:1"));
    assert_eq!(
        on_update(&pod, &swapped),
        Err(Refusal::SidecarImageChanged {
            was: "mcp-operator:test".into(),
            now: "evil/sidecar:1".into()
        })
    );
    let agent = edited(&pod, |d| {
        d["spec"]["containers"][0]["image"] = json!("agent:2")
    });
    assert_eq!(on_update(&pod, &agent), Ok(()));
}

#[test]
fn a_new_ephemeral_container_may_not_reach_the_sidecars_files() {
    let pod = as_stored(&plain_agent());
    let debug = |container: Value| {
        edited(&pod, |d| {
            d["spec"]["ephemeralContainers"]
                .as_array_mut()
                .map(|e| e.push(container.clone()))
                .unwrap_or_else(|| d["spec"]["ephemeralContainers"] = json!([container.clone()]));
        })
    };
    let mounting = debug(json!({
        "name": "debugger", "image": "busybox",
        "volumeMounts": [{"name": CREDENTIALS_VOLUME, "mountPath": "/c"}],
    }));
    let refusal = on_update(&pod, &mounting).unwrap_err();
    assert_eq!(
        refusal,
        Refusal::SidecarVolumeMounted {
            kind: "ephemeral container",
            container: "debugger".into(),
            volume: CREDENTIALS_VOLUME.into(),
        }
    );
    let targeting = debug(json!({
        "name": "debugger", "image": "busybox", "targetContainerName": SIDECAR_CONTAINER,
    }));
    assert_eq!(
        on_update(&pod, &targeting),
        Err(Refusal::DebugsSidecar {
            container: "debugger".into()
        })
    );
    let fine =
        debug(json!({"name": "debugger", "image": "busybox", "targetContainerName": "agent"}));
    assert_eq!(on_update(&pod, &fine), Ok(()));
    // One the pod already had is not judged again: the pod stays updatable.
    let later = edited(&mounting, |d| {
        d["metadata"]["annotations"]["note"] = json!("x")
    });
    assert_eq!(on_update(&mounting, &later), Ok(()));
}
