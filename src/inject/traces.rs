//! Trace export for injected sidecars: the chart's `telemetry` values, given to every injected
//! `mcp-sidecar` as the standard OpenTelemetry environment it reads at start
//! ([`crate::telemetry`]). The sidecar exports only when an endpoint is set; this module only
//! writes the variables.
//!
//! ```text
//!  telemetry.otlp.endpoint        ─► OTEL_EXPORTER_OTLP_ENDPOINT
//!  telemetry.otlp.protocol        ─► OTEL_EXPORTER_OTLP_PROTOCOL        (http/protobuf only)
//!  telemetry.otlp.headersSecret   ─► OTEL_EXPORTER_OTLP_HEADERS        secretKeyRef in the pod's
//!                                                                       namespace, optional
//!  telemetry.sampler / samplerArg ─► OTEL_TRACES_SAMPLER / _ARG
//!  (the pod)                      ─► OTEL_RESOURCE_ATTRIBUTES          k8s.namespace.name,
//!  telemetry.resourceAttributes                                        k8s.pod.name,
//!                                                                       mcp_operator.agent, then these
//! ```
//!
//! The headers (an API key of a tracing vendor, say) are read by the kubelet from a Secret of
//! the agent's own namespace, never copied into the pod spec where anyone who may read pods
//! would see them.

use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, SecretKeySelector};
use serde::{Deserialize, Serialize};

/// The only OTLP protocol this build exports.
pub const OTLP_PROTOCOL: &str = "http/protobuf";

/// The sidecar's own pod name, from the downward API: `OTEL_RESOURCE_ATTRIBUTES` refers to it.
const POD_NAME_ENV: &str = "MCP_SIDECAR_POD_NAME";

/// Where and how injected sidecars export their spans (the chart's `telemetry` values).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraceExport {
    /// The collector's OTLP/HTTP base URL (spans go to `<endpoint>/v1/traces`).
    pub endpoint: String,
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// A Secret key holding `OTEL_EXPORTER_OTLP_HEADERS` (`key=value,…`), read in the pod's
    /// namespace; where that Secret is absent, no headers are sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_secret: Option<HeadersSecret>,
    /// `OTEL_TRACES_SAMPLER` (`parentbased_always_on` when unset: the agent's decision is
    /// followed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler: Option<String>,
    /// `OTEL_TRACES_SAMPLER_ARG` (the ratio of a `traceidratio` sampler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler_arg: Option<String>,
    /// More `OTEL_RESOURCE_ATTRIBUTES` (`key=value,…`), after the pod's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_attributes: Option<String>,
}

/// A key of a Secret in the pod's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HeadersSecret {
    pub name: String,
    pub key: String,
}

fn default_protocol() -> String {
    OTLP_PROTOCOL.into()
}

impl TraceExport {
    /// Why these settings would give sidecars that export nothing (refused when the controller
    /// starts, rather than logged by every sidecar).
    pub fn check(&self) -> Result<(), String> {
        let url = url::Url::parse(&self.endpoint).map_err(|e| {
            format!(
                "telemetry.otlp.endpoint {:?} is not a URL: {e}",
                self.endpoint
            )
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "telemetry.otlp.endpoint {:?} must be http:// or https:// (OTLP over HTTP)",
                self.endpoint
            ));
        }
        if self.protocol != OTLP_PROTOCOL {
            return Err(format!(
                "telemetry.otlp.protocol {:?} is not supported: sidecars export {OTLP_PROTOCOL} only",
                self.protocol
            ));
        }
        if let Some(s) = &self.headers_secret
            && (s.name.is_empty() || s.key.is_empty())
        {
            return Err("telemetry.otlp.headersSecret needs a name and a key".into());
        }
        Ok(())
    }

    /// The sidecar's environment for the pod of `agent` in `namespace`.
    pub fn env(&self, agent: &str, namespace: &str) -> Vec<EnvVar> {
        let value = |name: &str, value: &str| EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..Default::default()
        };
        // First: OTEL_RESOURCE_ATTRIBUTES names it ($(…) expands earlier variables only).
        let mut env = vec![EnvVar {
            name: POD_NAME_ENV.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    // What the apiserver would default it to: the injected container is
                    // compared field by field with the one stored.
                    api_version: Some("v1".into()),
                    field_path: "metadata.name".into(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }];
        env.push(value("OTEL_EXPORTER_OTLP_ENDPOINT", &self.endpoint));
        env.push(value("OTEL_EXPORTER_OTLP_PROTOCOL", &self.protocol));
        if let Some(s) = &self.headers_secret {
            env.push(EnvVar {
                name: "OTEL_EXPORTER_OTLP_HEADERS".into(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: s.name.clone(),
                        key: s.key.clone(),
                        optional: Some(true),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        if let Some(sampler) = &self.sampler {
            env.push(value("OTEL_TRACES_SAMPLER", sampler));
        }
        if let Some(arg) = &self.sampler_arg {
            env.push(value("OTEL_TRACES_SAMPLER_ARG", arg));
        }
        let mut attributes = format!(
            "k8s.namespace.name={namespace},k8s.pod.name=$({POD_NAME_ENV}),mcp_operator.agent={agent}"
        );
        if let Some(more) = self
            .resource_attributes
            .as_deref()
            .filter(|m| !m.is_empty())
        {
            attributes.push(',');
            attributes.push_str(more);
        }
        env.push(value("OTEL_RESOURCE_ATTRIBUTES", &attributes));
        env
    }
}
