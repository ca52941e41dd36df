//! The `mcp-operator` binary: argument parsing and wiring only.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Declares remote MCP servers and the tool grants of AI agents on Kubernetes.
#[derive(Parser)]
#[command(name = "mcp-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions as YAML (the checked-in crds/ equals this output).
    Crds,
    /// Connect to one MCP server exactly as the controller would and print its catalogue, or the
    /// reason it could not be read, as one JSON document.
    Probe(mcp_operator::probe::ProbeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    mcp_operator::install_crypto_provider();
    match cli.command {
        Command::Crds => {
            print!("{}", mcp_operator::api::crds_yaml());
            ExitCode::SUCCESS
        }
        Command::Probe(args) => mcp_operator::probe::main(args),
    }
}
