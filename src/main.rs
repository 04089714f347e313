//! The `attnviz` command: opens the desktop app, or runs a subcommand.

use std::process::ExitCode;

use clap::Parser;

/// mimalloc, and blocks of 2 MB or more in 2 MB pages ([`attnviz::alloc::Allocator`]).
#[global_allocator]
static ALLOCATOR: attnviz::alloc::Allocator = attnviz::alloc::Allocator;

fn main() -> ExitCode {
    let args = attnviz::cli::Cli::parse();
    match attnviz::cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, naming what is wrong and with which file or argument; a
/// cause whose text the message already quotes (library errors often include their source) is not
/// repeated.
fn one_line(err: &anyhow::Error) -> String {
    let mut message = err.to_string();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
    }
    message.replace('\n', " ")
}
