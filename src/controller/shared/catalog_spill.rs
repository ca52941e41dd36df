//! Catalogues too large for an McpServer's status (etcd caps an object at about 1.5 MiB) move to
//! a companion ConfigMap `<server>-mcp-catalog`, gzip-compressed, owned by the McpServer; status
//! then keeps the counts and digest with empty tool, resource, template and prompt lists and
//! names the ConfigMap, with the SHA-256 of the catalogue JSON it holds. The
//! McpServer reconciler writes and removes it; the AgentSpec reconciler reads it back.
//!
//! A tenant may edit ConfigMaps in its namespace, and grants are built from this one: it is read
//! back only while it holds exactly what the status (written by the operator alone) says. One
//! that holds anything else is [`Spilled::Altered`]: grants leave the server out (they never
//! take its word), and the McpServer reconciler writes it again on its next read.

use std::collections::BTreeMap;
use std::io::Write;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use sha2::{Digest, Sha256};

use crate::api::mcp_server::McpServer;
use crate::controller::shared::config_map::{apply_if_changed, delete_if_present};
use crate::core::Catalog;
use crate::core::pinning::content_key;

/// Above this many bytes of tool, resource, template and prompt entries, the catalogue leaves
/// status.
pub const STATUS_TOOLS_BUDGET: usize = 512 * 1024;
/// The key holding the gzip-compressed catalogue JSON.
pub const CATALOG_KEY: &str = "catalog.json.gz";
const DIGEST_ANNOTATION: &str = "mcp-operator.dev/catalog-digest";

const CONFIG_MAP_SUFFIX: &str = "-mcp-catalog";

pub fn config_map_name(server: &str) -> String {
    format!("{server}{CONFIG_MAP_SUFFIX}")
}

/// The McpServer whose catalogue a ConfigMap of this name would hold.
pub fn server_of_config_map(name: &str) -> Option<&str> {
    name.strip_suffix(CONFIG_MAP_SUFFIX)
}

/// Whether a ConfigMap was last written by anyone but `field_manager` (from its managed
/// fields, which name each writer as the writer named itself: a tool for noticing at once,
/// not a proof; [`judge`] is the check).
pub fn written_by_others(config_map: &ObjectMeta, field_manager: &str) -> bool {
    config_map
        .managed_fields
        .iter()
        .flatten()
        .any(|f| f.manager.as_deref() != Some(field_manager))
}

/// Whether the catalogue's lists (tools, resources, resource templates, prompts) together are
/// too large for status.
pub fn too_large_for_status(catalog: &Catalog) -> bool {
    let size = |v: Result<Vec<u8>, serde_json::Error>| v.map_or(usize::MAX, |v| v.len());
    let total = [
        size(serde_json::to_vec(&catalog.tools)),
        size(serde_json::to_vec(&catalog.resources)),
        size(serde_json::to_vec(&catalog.resource_templates)),
        size(serde_json::to_vec(&catalog.prompts)),
    ]
    .into_iter()
    .fold(0usize, usize::saturating_add);
    total > STATUS_TOOLS_BUDGET
}

/// The most catalogue JSON a ConfigMap is read back into. The 1 MiB of gzip the operator writes
/// holds far less; more is someone else's gzip bomb, not a catalogue.
const MAX_SPILLED_JSON: u64 = 64 * 1024 * 1024;

fn json_of(catalog: &Catalog) -> Vec<u8> {
    serde_json::to_vec(catalog).expect("a catalogue serialises")
}

fn digest_of_json(json: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(json)))
}

/// What status keeps of a spilled catalogue (`catalogConfigMapDigest`): the SHA-256 of the
/// JSON the ConfigMap holds.
pub fn spill_digest(catalog: &Catalog) -> String {
    digest_of_json(&json_of(catalog))
}

/// The gzip-compressed JSON of the whole catalogue.
pub fn compress(catalog: &Catalog) -> Vec<u8> {
    let json = json_of(catalog);
    let mut encoder = flate2::GzBuilder::new().write(Vec::new(), flate2::Compression::best());
    encoder.write_all(&json).expect("writing to memory");
    encoder.finish().expect("writing to memory")
}

/// The JSON in gzip `bytes`, up to [`MAX_SPILLED_JSON`].
fn decompress_json(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut json = Vec::new();
    let mut reader = std::io::Read::take(flate2::read::GzDecoder::new(bytes), MAX_SPILLED_JSON + 1);
    std::io::Read::read_to_end(&mut reader, &mut json).ok()?;
    (json.len() as u64 <= MAX_SPILLED_JSON).then_some(json)
}

/// Reads a spilled catalogue back, unchecked (the sidecar and tests use this).
pub fn decompress(bytes: &[u8]) -> Option<Catalog> {
    serde_json::from_slice(&decompress_json(bytes)?).ok()
}

/// What the companion ConfigMap holds, judged against the status that names it.
#[derive(Debug)]
pub enum Spilled {
    /// The catalogue the status describes (or, under a status written before the operator
    /// kept a digest, a readable one).
    Catalog(Catalog),
    /// No ConfigMap, or one holding no catalogue while the status keeps no digest.
    Missing,
    /// Something other than what the status describes: written by someone else.
    Altered,
}

/// Judges the ConfigMap's gzip `bytes` (None: no ConfigMap or no catalogue key) against the
/// digest the status keeps (`expected`).
pub fn judge(bytes: Option<&[u8]>, expected: Option<&str>) -> Spilled {
    let json = bytes.and_then(decompress_json);
    let Some(json) = json else {
        return match (bytes, expected) {
            (Some(_), Some(_)) => Spilled::Altered,
            _ => Spilled::Missing,
        };
    };
    if expected.is_some_and(|e| e != digest_of_json(&json)) {
        return Spilled::Altered;
    }
    match serde_json::from_slice(&json) {
        Ok(catalog) => Spilled::Catalog(catalog),
        Err(_) if expected.is_some() => Spilled::Altered,
        Err(_) => Spilled::Missing,
    }
}

/// Makes the companion ConfigMap hold `catalog` (built and written only when its content key
/// changed: its digest, and under pinning which tools wait; always when `altered`, since
/// whoever altered it may have kept the annotation). Returns whether anything was written.
pub async fn publish(
    client: &Client,
    server: &McpServer,
    catalog: &Catalog,
    field_manager: &str,
    altered: bool,
) -> Result<bool, kube::Error> {
    let namespace = server.namespace().unwrap_or_default();
    let name = config_map_name(&server.name_any());
    let key = content_key(catalog);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let build = || ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            owner_references: server.controller_owner_ref(&()).map(|o| vec![o]),
            labels: Some(BTreeMap::from([
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    "mcp-operator".to_string(),
                ),
                ("mcp-operator.dev/mcpserver".to_string(), server.name_any()),
            ])),
            annotations: Some(BTreeMap::from([(
                DIGEST_ANNOTATION.to_string(),
                key.clone(),
            )])),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            CATALOG_KEY.to_string(),
            ByteString(compress(catalog)),
        )])),
        ..Default::default()
    };
    if altered {
        api.patch(
            &name,
            &PatchParams::apply(field_manager).force(),
            &Patch::Apply(&build()),
        )
        .await?;
        return Ok(true);
    }
    apply_if_changed(&api, &name, DIGEST_ANNOTATION, &key, field_manager, build).await
}

/// Whether someone other than `field_manager` wrote the server's companion ConfigMap (its
/// metadata only; an error counts as yes: a restarted controller then reads the server at once
/// rather than trusting what it cannot see).
pub async fn written_by_others_now(
    client: &Client,
    server: &McpServer,
    field_manager: &str,
) -> bool {
    let api: Api<ConfigMap> =
        Api::namespaced(client.clone(), &server.namespace().unwrap_or_default());
    match api
        .get_metadata_opt(&config_map_name(&server.name_any()))
        .await
    {
        Ok(Some(cm)) => written_by_others(&cm.metadata, field_manager),
        Ok(None) => false,
        Err(_) => true,
    }
}

/// The companion ConfigMap of `server`, judged against its status.
pub async fn read_checked(client: &Client, server: &McpServer) -> Result<Spilled, kube::Error> {
    let api: Api<ConfigMap> =
        Api::namespaced(client.clone(), &server.namespace().unwrap_or_default());
    let Some(cm) = api.get_opt(&config_map_name(&server.name_any())).await? else {
        return Ok(Spilled::Missing);
    };
    let expected = server
        .status
        .as_ref()
        .and_then(|s| s.catalog_config_map_digest.as_deref());
    let bytes = cm.binary_data.as_ref().and_then(|d| d.get(CATALOG_KEY));
    Ok(judge(bytes.map(|b| b.0.as_slice()), expected))
}

/// Removes the companion ConfigMap once the catalogue fits in status again.
pub async fn remove(client: &Client, server: &McpServer) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> =
        Api::namespaced(client.clone(), &server.namespace().unwrap_or_default());
    delete_if_present(&api, &config_map_name(&server.name_any())).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::catalog::build;
    use serde_json::json;

    #[test]
    fn ten_thousand_tools_spill_and_fit_a_config_map() {
        let tools: Vec<_> = (0..10_000)
            .map(|i| {
                json!({"name": format!("tool_{i:05}"),
                       "description": format!("Tool number {i} does a thing to the thing {i}."),
                       "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}})
                .as_object()
                .unwrap()
                .clone()
            })
            .collect();
        let catalog = build(&tools, &BTreeMap::new(), 100);
        assert!(too_large_for_status(&catalog));
        let gz = compress(&catalog);
        // A ConfigMap holds at most 1 MiB of data.
        assert!(gz.len() < 1024 * 1024, "compressed to {} bytes", gz.len());
        assert_eq!(decompress(&gz).unwrap(), catalog);
    }

    /// What a tenant may do to the ConfigMap (it may edit ConfigMaps in its namespace): lower a
    /// tool's access class and keep every digest field, put garbage or a gzip bomb in, or
    /// delete the key. Only the catalogue the status's digest names is read back.
    #[test]
    fn only_the_catalogue_the_status_names_is_read_back() {
        let tools: Vec<_> = [
            json!({"name": "read_file", "inputSchema": {}, "annotations": {"readOnlyHint": true}}),
            json!({"name": "delete_file", "inputSchema": {}}),
        ]
        .into_iter()
        .map(|t| t.as_object().unwrap().clone())
        .collect();
        let catalog = build(&tools, &BTreeMap::new(), 100);
        let digest = spill_digest(&catalog);
        let written = compress(&catalog);
        assert!(
            matches!(judge(Some(&written), Some(&digest)), Spilled::Catalog(c) if c == catalog)
        );

        let mut lowered = catalog.clone();
        let delete = lowered
            .tools
            .iter_mut()
            .find(|t| t.name == "delete_file")
            .unwrap();
        assert_ne!(delete.access, crate::core::Access::Read);
        delete.access = crate::core::Access::Read;
        assert_eq!(
            crate::core::pinning::content_key(&lowered),
            crate::core::pinning::content_key(&catalog),
            "the content key alone does not see a lowered class"
        );
        assert!(matches!(
            judge(Some(&compress(&lowered)), Some(&digest)),
            Spilled::Altered
        ));
        assert!(matches!(
            judge(Some(b"not gzip"), Some(&digest)),
            Spilled::Altered
        ));
        let bomb = {
            let mut encoder =
                flate2::GzBuilder::new().write(Vec::new(), flate2::Compression::best());
            let zeros = vec![b' '; 1024 * 1024];
            for _ in 0..=MAX_SPILLED_JSON / zeros.len() as u64 {
                encoder.write_all(&zeros).unwrap();
            }
            encoder.finish().unwrap()
        };
        assert!(bomb.len() < 1024 * 1024, "{} bytes", bomb.len());
        assert!(matches!(
            judge(Some(&bomb), Some(&digest)),
            Spilled::Altered
        ));
        assert!(matches!(judge(None, Some(&digest)), Spilled::Missing));
        // A status written before the operator kept a digest: read as before.
        assert!(matches!(judge(Some(&written), None), Spilled::Catalog(_)));
        assert!(matches!(judge(Some(b"x"), None), Spilled::Missing));
    }

    /// Each waiting tool adds its pinned digest (about 50 bytes compressed): 10,000 tools of
    /// which 8,000 wait at once still fit. All 10,000 do not (about 1.09 MB); the README says so.
    #[test]
    fn ten_thousand_tools_with_eight_thousand_waiting_for_approval_fit_a_config_map() {
        use crate::core::pinning::{Approvals, pin};
        let tools = |changed: usize| -> Vec<_> {
            (0..10_000)
                .map(|i| {
                    let version = if i < changed { "v2" } else { "v1" };
                    json!({"name": format!("tool_{i:05}"),
                           "description": format!("Tool number {i} does a thing ({version})."),
                           "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}})
                    .as_object()
                    .unwrap()
                    .clone()
                })
                .collect()
        };
        let none = Approvals::default();
        let first = pin(None, build(&tools(0), &BTreeMap::new(), 100), &none).catalog;
        let changed = pin(
            Some(&first),
            build(&tools(8_000), &BTreeMap::new(), 100),
            &none,
        )
        .catalog;
        assert_eq!(
            changed
                .tools
                .iter()
                .filter(|t| t.awaiting_approval.is_some())
                .count(),
            8_000
        );
        let gz = compress(&changed);
        eprintln!(
            "10,000 tools: {} bytes compressed; 8,000 of them waiting: {} bytes",
            compress(&first).len(),
            gz.len()
        );
        assert!(gz.len() < 1024 * 1024, "compressed to {} bytes", gz.len());
        assert_eq!(decompress(&gz).unwrap(), changed);
    }

    #[test]
    fn small_catalogues_stay_in_status() {
        let tools = vec![
            json!({"name": "a", "inputSchema": {}})
                .as_object()
                .unwrap()
                .clone(),
        ];
        assert!(!too_large_for_status(&build(&tools, &BTreeMap::new(), 1)));
    }
}
