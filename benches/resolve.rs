//! Prints how long one resolution takes for the largest AgentSpec a tenant can write: the
//! CRD's maxima (256 allow and 256 deny patterns of up to 128 characters, on every entry) over
//! servers with 10,000 tools of 128-character names. Run by `bench/resolve.sh`; figures, not
//! assertions.
//!
//! Shapes: `literal` (names, as people write them), `prefix` (`get_*`-style), and `hostile`
//! (`*a*a…` patterns that cost a backtracking matcher pattern × name steps per name), and `wild`
//! (no literal prefix or suffix: every name runs through every pattern's automaton).

use std::time::Instant;

use mcp_operator::grants::{
    AgentServerInput, Approval, McpServerInput, ResolveInput, TenantDefault, resolve,
};

const TOOLS: usize = 10_000;
const PATTERNS: usize = 256;

fn catalog(tools: usize) -> serde_json::Value {
    let tools: Vec<serde_json::Value> = (0..tools)
        .map(|i| {
            // 128 characters: a long run the hostile patterns chase, then a distinct tail.
            let name = format!("{}{:08}", "a".repeat(120), i);
            serde_json::json!({
                "name": name,
                "access": "read",
                "idempotent": true,
                "schemaBytes": 100,
                "definitionDigest": format!("{i:064}"),
            })
        })
        .collect();
    serde_json::json!({"toolCount": tools.len(), "digest": "0", "pagesRead": 1, "tools": tools})
}

fn patterns(shape: &str, salt: usize) -> Vec<String> {
    (0..PATTERNS)
        .map(|i| match shape {
            "literal" => format!("{}{:08}", "a".repeat(120), (i * 37 + salt) % (TOOLS * 2)),
            "prefix" => format!("{}{:03}*", "a".repeat(120), (i + salt) % 1000),
            // Never matches (no `z` in any name) after chasing every `a`.
            "hostile" => format!("{}z{salt}", "*a".repeat(60)),
            // No literal prefix or suffix to rule a name out early: the automaton runs over
            // every name, the worst case per pattern and name.
            _ => format!("?{}*{:03}?", "a".repeat(100), (i + salt) % 1000),
        })
        .collect()
}

fn main() {
    // `cargo test --all-targets` runs bench targets too, unoptimised and without `--bench`:
    // figures from that would mislead, and the hostile shapes take minutes there.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("resolve: a benchmark; run it with `bash bench/resolve.sh` (cargo bench)");
        return;
    }
    let catalog: mcp_operator::core::Catalog =
        serde_json::from_value(catalog(TOOLS)).expect("the catalogue deserialises");
    println!(
        "| shape | entries | tools per server | patterns per entry | resolve (ms) | granted |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for shape in ["literal", "prefix", "hostile", "wild"] {
        for entries in [1usize, 4] {
            let servers = (0..entries)
                .map(|e| AgentServerInput {
                    name: format!("server-{e}"),
                    prefix: None,
                    allow: patterns(shape, e),
                    deny: patterns(shape, e + 7),
                    require_approval: Vec::new(),
                    resources: Default::default(),
                    prompts: Default::default(),
                    server: Some(McpServerInput {
                        ready: true,
                        not_ready_reason: None,
                        optional: false,
                        catalog: Some(&catalog),
                        allow: Vec::new(),
                        deny: Vec::new(),
                        require_approval: Vec::new(),
                        pinned: false,
                    }),
                })
                .collect();
            let input = ResolveInput {
                servers,
                approval: Approval::Destructive,
                policies: Vec::new(),
                tenant_default: TenantDefault::Allow,
                preload_budget: u64::MAX,
            };
            let started = Instant::now();
            let resolution = resolve(&input);
            let took = started.elapsed();
            let granted: usize = resolution.document.tool_count();
            println!(
                "| {shape} | {entries} | {TOOLS} | {PATTERNS}+{PATTERNS} | {:.1} | {granted} |",
                took.as_secs_f64() * 1000.0
            );
        }
    }
}
