//! The `attnviz` command: opens the desktop app, or runs a subcommand.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = attnviz::cli::Cli::parse();
    match attnviz::cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line, naming what is wrong and with which file or argument.
            let message = format!("{err:#}").replace('\n', " ");
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
