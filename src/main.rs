//! The `mcp-operator` binary: argument parsing and wiring only.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

mod allocator;

#[global_allocator]
static ALLOCATOR: allocator::ByRole = allocator::ByRole;

/// Declares remote MCP servers and the tool grants of AI agents on Kubernetes.
#[derive(Parser)]
#[command(name = "mcp-operator", version, about)]
struct Cli {
    /// Log format: text for people, json for log pipelines. RUST_LOG sets the level (default info).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the operator: reconcile McpServers against the cluster in KUBECONFIG or in-cluster.
    Controller(mcp_operator::controller::ControllerArgs),
    /// Serve a stdio MCP server over Streamable HTTP (both protocol eras):
    /// `bridge --listen 127.0.0.1:8000 -- npx -y @modelcontextprotocol/server-memory`.
    Bridge(mcp_operator::bridge::BridgeArgs),
    /// Copy this binary to PATH (executable): the init container of a stdio McpServer's pod
    /// brings the bridge into the server's image this way (the operator's image has no shell).
    CopySelf {
        /// Where the copy goes, e.g. a file in an emptyDir volume.
        path: std::path::PathBuf,
    },
    /// Turn an MCP config file into McpServer and Secret manifests: an `mcpServers` file (Claude
    /// Desktop, Cursor, Claude Code's .mcp.json), VS Code's mcp.json (`servers`, `inputs`) or an
    /// MCP Registry server.json (`packages`, `remotes`). YAML on stdout; what was not imported,
    /// and which Secret keys need values, on stderr. No secret value is ever printed.
    Import(mcp_operator::import::ImportArgs),
    /// Print the CustomResourceDefinitions as YAML (the checked-in crds/ equals this output).
    Crds,
    /// Connect to one MCP server exactly as the controller would and print its catalogue, or the
    /// reason it could not be read, as one JSON document.
    Probe(mcp_operator::probe::ProbeArgs),
    /// Serve the agent's MCP endpoint: exactly the tools its grants file names, every call
    /// checked against it before it reaches an upstream.
    Sidecar(mcp_operator::sidecar::SidecarArgs),
    /// GET one URL and exit 0 on a 2xx answer, else say why and exit 1: `helm test`'s check
    /// that the operator answers, in an image with no shell or curl.
    CheckUrl(mcp_operator::check_url::CheckUrlArgs),
}

fn main() -> ExitCode {
    tune_malloc();
    let cli = Cli::parse();
    mcp_operator::install_crypto_provider();
    match cli.command {
        Command::Crds => {
            print!("{}", mcp_operator::api::crds_yaml());
            ExitCode::SUCCESS
        }
        Command::Probe(args) => mcp_operator::probe::main(args),
        Command::CheckUrl(args) => mcp_operator::check_url::main(args),
        Command::Import(args) => mcp_operator::import::main(args),
        Command::CopySelf { path } => match mcp_operator::bridge::copy_self(&path) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!(
                    "copy-self: cannot copy this binary to {}: {e}",
                    path.display()
                );
                ExitCode::FAILURE
            }
        },
        Command::Bridge(args) => {
            init_logging(cli.log_format);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime starts");
            match runtime.block_on(mcp_operator::bridge::run(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(reason = e.reason(), "{e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Sidecar(args) => {
            init_logging(cli.log_format);
            // One thread: the sidecar serves one agent, and a call's steps (agent connection,
            // pipeline, upstream connection) handing work between worker threads cost more CPU
            // in wake-ups than the call itself (issue 24's profile).
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime starts");
            match runtime.block_on(mcp_operator::sidecar::run(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(reason = e.reason(), "{e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Controller(args) => {
            init_logging(cli.log_format);
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime starts");
            // Probe spans, exported only when OTEL_EXPORTER_OTLP_ENDPOINT is set.
            let run = async {
                let traces = mcp_operator::telemetry::init("mcp-operator-controller");
                let result = mcp_operator::controller::run(args).await;
                traces.shutdown().await;
                result
            };
            match runtime.block_on(run) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(reason = e.reason(), "{e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a person at a terminal: a log file or a container's log gets plain text
    // (and every audit line is cheaper to write).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => {
            builder.json().init();
            mcp_operator::sidecar::audit::lines_as_json();
        }
        LogFormat::Text => builder.init(),
    }
}

/// glibc's malloc gives each thread that allocates its own arena, and keeps what an arena freed
/// as fragments it rarely returns: the controller's probes parse and drop pages of JSON on
/// every worker thread at once, and with 1,000 McpServers starting together the process held
/// about 40 MiB more than its live heap (bench/memory.sh's fleet: peak RSS 175 MiB with the
/// default arenas, 138 MiB with one). Our runtimes have two worker threads at most (the sidecar
/// one), so one arena costs no contention worth measuring.
///
/// And a fixed mmap threshold of 1 MiB: glibc raises its threshold to the size of each big block
/// freed, so after the first 8 MB answer every later one (and each step of a buffer growing to
/// it) came from the heap, whose holes it keeps — 64 answers of 8 MB arriving as events grew the
/// sidecar by 116 MiB over a 64 MiB budget. Fixed, a big buffer is mapped, grown in place and
/// given back to the system when freed; calls that allocate less than 1 MiB are unchanged.
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before any other thread
    // exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1024 * 1024);
    }
}
