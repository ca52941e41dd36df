//! The image `e2e/image.sh` builds without Docker keeps the Dockerfile's runtime contract: the
//! same user, entrypoint, command and port as the Dockerfile's runtime stage, no shell, and
//! everything the binary loads inside the image. The e2e node runs this image (tests/it/e2e_node.rs);
//! users run the Dockerfile's, so the two must not drift apart.
//!
//! ```text
//! Dockerfile (last FROM..)  ──parsed here──► USER, EXPOSE, ENTRYPOINT, CMD
//! e2e/image.sh operator ──► image.tar: manifest.json ─► config ─► compared
//!                                      layer.tar ─► extracted ─► run with its own loader
//! charts/mcp-operator values ─► runAsUser, metrics port ─► compared
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The instructions of the Dockerfile's last stage (what runs), keyed by instruction.
fn runtime_stage() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).expect("the Dockerfile");
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .expect("the Dockerfile has a FROM");
    lines[start + 1..]
        .iter()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once(char::is_whitespace))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

fn exec_form(stage: &BTreeMap<String, String>, key: &str) -> Vec<String> {
    let raw = stage
        .get(key)
        .unwrap_or_else(|| panic!("the runtime stage has no {key}"));
    serde_json::from_str(raw).unwrap_or_else(|e| {
        panic!("{key} {raw} is not exec form (a JSON array): a shell form would need a shell: {e}")
    })
}

struct Image {
    config: Value,
    root: PathBuf,
    _dir: tempfile::TempDir,
}

/// Packs the binary these tests were built with (the release binary in e2e; the packing is the
/// same) and unpacks the result.
fn build_image() -> Image {
    let dir = tempfile::tempdir().expect("a temp dir");
    let tarball = dir.path().join("image.tar");
    let out = Command::new("bash")
        .arg(repo().join("e2e/image.sh"))
        .arg("operator")
        .arg(&tarball)
        .arg(env!("CARGO_BIN_EXE_mcp-operator"))
        .stdin(Stdio::null())
        .output()
        .expect("bash runs e2e/image.sh");
    assert!(
        out.status.success(),
        "e2e/image.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reference = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(
        reference
            .trim()
            .starts_with("mcp-operator.local/mcp-operator:"),
        "image.sh prints the image reference, got {reference:?}"
    );
    let unpacked = dir.path().join("unpacked");
    untar(&tarball, &unpacked);
    let manifest: Value = read_json(&unpacked.join("manifest.json"));
    let manifest = &manifest[0];
    assert_eq!(
        manifest["RepoTags"][0].as_str(),
        Some(reference.trim()),
        "the tarball is tagged as printed"
    );
    let config = read_json(&unpacked.join(manifest["Config"].as_str().expect("a Config")));
    let layers = manifest["Layers"].as_array().expect("Layers");
    assert_eq!(layers.len(), 1, "one layer");
    let root = dir.path().join("root");
    untar(
        &unpacked.join(layers[0].as_str().expect("a layer path")),
        &root,
    );
    Image {
        config,
        root,
        _dir: dir,
    }
}

fn untar(tarball: &Path, into: &Path) {
    std::fs::create_dir_all(into).expect("mkdir");
    let status = Command::new("tar")
        .arg("-xf")
        .arg(tarball)
        .arg("-C")
        .arg(into)
        .arg("--no-same-owner")
        .status()
        .expect("tar runs");
    assert!(status.success(), "tar -xf {}", tarball.display());
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("readable")).expect("JSON")
}

fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable dir").flatten() {
            let path = entry.path();
            if entry.file_type().expect("a type").is_dir() {
                stack.push(path.clone());
            }
            out.push(path.strip_prefix(root).expect("under root").to_path_buf());
        }
    }
    out
}

#[test]
fn the_local_image_keeps_the_dockerfiles_runtime_contract() {
    let stage = runtime_stage();
    let image = build_image();
    let config = &image.config["config"];

    assert_eq!(
        config["User"].as_str(),
        Some(stage["USER"].as_str()),
        "user"
    );
    assert_eq!(
        stage["USER"], "65532:65532",
        "the Dockerfile runs as nonroot"
    );
    let entrypoint = exec_form(&stage, "ENTRYPOINT");
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(entrypoint),
        "entrypoint"
    );
    assert_eq!(
        config["Cmd"],
        serde_json::json!(exec_form(&stage, "CMD")),
        "command"
    );
    let port = stage["EXPOSE"].clone();
    let port = if port.contains('/') {
        port
    } else {
        format!("{port}/tcp")
    };
    let exposed: Vec<&String> = config["ExposedPorts"]
        .as_object()
        .expect("ExposedPorts")
        .keys()
        .collect();
    assert_eq!(exposed, vec![&port], "exposed ports");
    assert_eq!(image.config["os"], "linux");

    // No shell and no package manager, as on distroless: nothing may depend on one.
    let files = files_under(&image.root);
    for file in &files {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert!(
            !matches!(name, "sh" | "bash" | "dash" | "busybox" | "apt" | "dpkg"),
            "the image holds {}",
            file.display()
        );
    }
    let exe = image.root.join(entrypoint[0].trim_start_matches('/'));
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&exe)
            .expect("the entrypoint is in the image")
            .permissions(),
    );
    assert_eq!(
        mode & 0o755,
        0o755,
        "the entrypoint is executable by anyone"
    );
    assert!(
        image
            .root
            .join("etc/ssl/certs/ca-certificates.crt")
            .is_file(),
        "a CA bundle for HTTPS MCP servers"
    );
    let passwd = std::fs::read_to_string(image.root.join("etc/passwd")).expect("/etc/passwd");
    assert!(
        passwd.lines().any(|l| l.split(':').nth(2) == Some("65532")),
        "/etc/passwd names user 65532: {passwd}"
    );
    assert!(image.root.join("tmp").is_dir(), "/tmp exists");

    // The binary runs with nothing but what the image holds: its own loader and libraries, no
    // environment (a library missing from the image fails here).
    let loader = files
        .iter()
        .find(|f| {
            f.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ld-linux"))
        })
        .expect("the image holds the dynamic loader");
    let libs: Vec<String> = ["lib/x86_64-linux-gnu", "lib64", "usr/lib/x86_64-linux-gnu"]
        .iter()
        .map(|d| image.root.join(d).display().to_string())
        .collect();
    let out = Command::new(image.root.join(loader))
        .arg("--inhibit-cache")
        .arg("--library-path")
        .arg(libs.join(":"))
        .arg(&exe)
        .arg("--help")
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .expect("the image's loader runs");
    assert!(
        out.status.success(),
        "the packed binary does not run with the image's libraries: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("controller"));
}

/// The chart runs the image as the Dockerfile's user and probes the Dockerfile's port.
#[test]
fn the_chart_matches_the_dockerfile() {
    let stage = runtime_stage();
    let values = std::fs::read_to_string(repo().join("charts/mcp-operator/values.yaml"))
        .expect("values.yaml");
    let values: Value = serde_saphyr::from_str(&values).expect("values.yaml parses");
    let (uid, gid) = stage["USER"].split_once(':').expect("USER uid:gid");
    assert_eq!(
        values["podSecurityContext"]["runAsUser"].to_string(),
        uid,
        "runAsUser"
    );
    assert_eq!(
        values["podSecurityContext"]["runAsGroup"].to_string(),
        gid,
        "runAsGroup"
    );
    assert_eq!(
        values["metrics"]["port"].to_string(),
        stage["EXPOSE"].trim_end_matches("/tcp"),
        "the metrics port is the exposed one"
    );
    assert_eq!(values["securityContext"]["readOnlyRootFilesystem"], true);
}
